//! loom model of a credit slot's epochs: spends racing a close are counted exactly once,
//! either as spent under the closing lease or as left unspent at its close, and a refund of
//! a spend under a closed lease never reaches the next one.
//!
//! Run with `RUSTFLAGS="--cfg leasehold_loom" cargo test -p leasehold-agent --release --test loom_credit`.
#![cfg(leasehold_loom)]

use leasehold_agent::credit::CreditSlot;
use leasehold_agent::engine::models::bounded;
use loom::sync::Arc;
use loom::thread;

/// Two spenders race the lease manager closing the lease: every unit deposited is either
/// admitted or reported unspent, never both and never neither.
#[test]
fn spends_racing_a_close_are_counted_once() {
    bounded().check(|| {
        let slot = Arc::new(CreditSlot::new());
        slot.deposit(3, u64::MAX);
        let spenders: Vec<_> = (0..2)
            .map(|_| {
                let slot = Arc::clone(&slot);
                thread::spawn(move || {
                    (0..2).filter(|_| slot.try_spend(1, 1).is_some()).count() as u64
                })
            })
            .collect();
        let unspent = slot.close();
        let admitted: u64 = spenders.into_iter().map(|s| s.join().unwrap()).sum();
        assert_eq!(admitted + unspent, 3, "a unit was lost or counted twice");
        assert_eq!(slot.remaining(), 0);
        assert!(slot.try_spend(1, 1).is_none(), "spent after the close");
    });
}

/// A refund races the close and the next lease's deposit: it lands in the lease it was
/// spent under or nowhere, so the next lease holds exactly its own deposit.
#[test]
fn a_refund_never_crosses_an_epoch() {
    bounded().check(|| {
        let slot = Arc::new(CreditSlot::new());
        slot.deposit(2, u64::MAX);
        let ticket = slot.try_spend(2, 1).expect("credit was deposited");
        let refunder = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || slot.refund(2, ticket))
        };
        let unspent = slot.close();
        slot.deposit(5, u64::MAX);
        let refunded = refunder.join().unwrap();
        // Refunded before the close: the units were unspent at it. After: they stay spent.
        assert_eq!(unspent, if refunded { 2 } else { 0 });
        assert_eq!(
            slot.remaining(),
            5,
            "the old lease's units reached the new one"
        );
    });
}

/// A withdrawal (credit handed back) racing a spend takes only units nobody spent.
#[test]
fn withdraw_and_spend_share_the_credit_exactly() {
    bounded().check(|| {
        let slot = Arc::new(CreditSlot::new());
        slot.deposit(2, u64::MAX);
        let spender = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || slot.try_spend(2, 1).is_some())
        };
        let taken = slot.withdraw(1);
        let spent = spender.join().unwrap();
        let left = slot.close();
        assert_eq!(taken + if spent { 2 } else { 0 } + left, 2);
    });
}
