//! Leasehold's accounting core.
//!
//! Everything in this crate is pure and deterministic: time is an input, never read from
//! the environment inside a decision. The allocator replicates [`ledger`] commands through
//! Raft and the agent spends [`lease`]s locally; both drive the same code, so a replica,
//! a test and the seeded simulation all reach the same state from the same inputs.

pub mod algo;
pub mod key;
pub mod lease;
pub mod ledger;
pub mod policy;
pub mod rate;
pub mod read;
pub mod time;
