use super::*;
use std::collections::VecDeque;
use tonic::Code;

/// Hands out its frames, then ends, or stays pending forever (a half-sent call).
struct Script {
    frames: VecDeque<Bytes>,
    stall: bool,
}

fn script(sizes: &[usize], stall: bool) -> Script {
    Script {
        frames: sizes.iter().map(|n| Bytes::from(vec![0u8; *n])).collect(),
        stall,
    }
}

impl Body for Script {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match self.frames.pop_front() {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None if self.stall => Poll::Pending,
            None => Poll::Ready(None),
        }
    }
}

async fn next(body: &mut BudgetedBody<Script>) -> Option<Result<Frame<Bytes>, Status>> {
    std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
}

const KIB: usize = 1024;

#[test]
fn large_calls_stop_an_eighth_short_of_the_bound_and_small_ones_do_not() {
    let b = RequestBudget::new(64 * KIB, 1_000);
    assert!(b.try_charge(0, 56 * KIB));
    assert!(!b.try_charge(56 * KIB, 1), "a large call may not pass 7/8");
    assert!(!b.try_charge(0, 5 * KIB), "a 5 KiB frame is a large call");
    assert!(b.try_charge(0, 4 * KIB), "small calls use the reserve");
    assert!(b.try_charge(0, 4 * KIB));
    assert!(!b.try_charge(0, 1), "not past the whole bound");
    assert_eq!(b.buffered_bytes(), 64 * KIB);
    b.release(8 * KIB);
    assert_eq!(b.buffered_bytes(), 56 * KIB);
}

#[tokio::test]
async fn a_body_holds_its_bytes_until_it_ends() {
    let budget = Arc::new(RequestBudget::new(64 * KIB, 1_000));
    let mut body = BudgetedBody::new(script(&[10 * KIB, 6 * KIB], false), Arc::clone(&budget));
    assert!(next(&mut body).await.unwrap().is_ok());
    assert!(next(&mut body).await.unwrap().is_ok());
    assert_eq!(budget.buffered_bytes(), 16 * KIB);
    assert!(next(&mut body).await.is_none());
    assert_eq!(budget.buffered_bytes(), 0);
    assert!(body.is_end_stream());
    drop(body);
    assert_eq!(budget.buffered_bytes(), 0, "not given back twice");
}

#[tokio::test]
async fn a_dropped_body_gives_its_bytes_back() {
    let budget = Arc::new(RequestBudget::new(64 * KIB, 1_000));
    let mut body = BudgetedBody::new(script(&[10 * KIB], true), Arc::clone(&budget));
    assert!(next(&mut body).await.unwrap().is_ok());
    assert_eq!(budget.buffered_bytes(), 10 * KIB);
    drop(body);
    assert_eq!(budget.buffered_bytes(), 0);
}

#[tokio::test]
async fn a_frame_past_the_bound_fails_its_call_and_frees_its_bytes() {
    let budget = Arc::new(RequestBudget::new(64 * KIB, 1_000));
    let mut hog = BudgetedBody::new(script(&[16 * KIB; 3], true), Arc::clone(&budget));
    for _ in 0..3 {
        assert!(next(&mut hog).await.unwrap().is_ok());
    }
    let mut late = BudgetedBody::new(script(&[8 * KIB; 2], true), Arc::clone(&budget));
    assert!(next(&mut late).await.unwrap().is_ok());
    let err = next(&mut late).await.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message()
            .contains("request_bytes_buffered_max (65536 bytes)"),
        "{}",
        err.message()
    );
    assert_eq!(
        budget.buffered_bytes(),
        48 * KIB,
        "the failed call's 8 KiB are back"
    );
    assert_eq!(budget.refused(), 1);
    assert!(next(&mut late).await.is_none(), "a failed body ends");
    // An honest call of a few hundred bytes still fits, in the small calls' reserve.
    let mut honest = BudgetedBody::new(script(&[300], false), Arc::clone(&budget));
    let mut big = BudgetedBody::new(script(&[9 * KIB], false), Arc::clone(&budget));
    assert!(next(&mut big).await.unwrap().is_err());
    assert!(next(&mut honest).await.unwrap().is_ok());
    assert!(next(&mut honest).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_body_not_complete_in_time_fails_and_frees_its_bytes() {
    let budget = Arc::new(RequestBudget::new(64 * KIB, 2_000));
    let mut stalled = BudgetedBody::new(script(&[16 * KIB], true), Arc::clone(&budget));
    let started = tokio::time::Instant::now();
    assert!(next(&mut stalled).await.unwrap().is_ok());
    assert_eq!(budget.buffered_bytes(), 16 * KIB);
    let err = next(&mut stalled).await.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert!(
        err.message().contains("request_body_timeout_ms (2000 ms)"),
        "{}",
        err.message()
    );
    assert_eq!(started.elapsed(), Duration::from_millis(2_000));
    assert_eq!(budget.buffered_bytes(), 0);
    assert_eq!(budget.timed_out(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_trickling_without_pause_is_cut_off_too() {
    let budget = Arc::new(RequestBudget::new(64 * KIB, 1_000));
    let mut trickle = BudgetedBody::new(script(&[1; 100], false), Arc::clone(&budget));
    assert!(next(&mut trickle).await.unwrap().is_ok());
    tokio::time::advance(Duration::from_millis(1_000)).await;
    let err = next(&mut trickle).await.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert_eq!(budget.buffered_bytes(), 0);
}
