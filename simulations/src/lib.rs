//! Seeded simulations of the Leasehold hierarchy.
//!
//! [`hierarchy`] runs the real credit ledgers of a root, its regions and their agents in one
//! process on a simulated clock: every grant, report, hand-back and expiry goes through
//! `leasehold_common::ledger`, and the agents spend exactly as the lease protocol allows. A
//! run is a pure function of its configuration and seed, so a failing seed replays exactly.

pub mod bound;
pub mod hierarchy;
