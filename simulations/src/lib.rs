//! Seeded simulations of the Leasehold hierarchy.
//!
//! [`hierarchy`] runs the real credit ledgers of a root, its regions and their agents in one
//! process on a simulated clock: every grant, report, hand-back and expiry goes through
//! `leasehold_common::ledger`, and the agents spend exactly as the lease protocol allows.
//! Faults (crashes, partitions, clock steps, leader loss, rollouts, autoscaling) are
//! injected at chosen times, and the promises are checked as it runs ([`promises`]).
//! [`scenario`] builds the named scenarios and the fuzz mode on it; [`output`] writes
//! their CSV, SVG and Markdown. A run is a pure function of its configuration and seed, so
//! a failing seed replays exactly. [`live`] is the demo: the real allocator and agent
//! code on loopback sockets, driven by synthetic traffic and checked against the bound.
//!
//! [`net`] runs the production allocator service and agent lease manager on a simulated
//! network and clock (turmoil), with partitions, latency changes and agent crashes drawn
//! from a seed.
//!
//! [`chaos`] runs the built binaries themselves as OS processes (a 3-node mutual-TLS
//! cluster and agents) and injects seeded faults with signals, a network namespace and
//! libfaketime; it also measures failover (`leasehold-chaos`).

pub mod bound;
pub mod chaos;
pub mod error;
pub mod hierarchy;
pub mod live;
pub mod net;
pub mod output;
pub mod promises;
pub mod scale;
pub mod scenario;

pub use error::SimError;
