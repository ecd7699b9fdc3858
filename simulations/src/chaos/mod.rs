//! The chaos suite on real processes: a 3-node mutual-TLS cluster of `leasehold-allocator`
//! binaries and `leasehold-agent` binaries, traffic counted at the generator through the
//! agents' HTTP admit API, seeded faults sent as signals, namespaces and clock steps, and
//! at the end every window of every key checked against `B + r·T` and the ledgers of all
//! nodes compared with what the generator saw.
//!
//! Unlike [`crate::net`] (the production code on a simulated network and clock), nothing
//! here is simulated: the operating system schedules, the clocks are the machine's, and a
//! run is reproducible only in the faults it draws from its seed.

pub mod agents;
pub mod cluster;
pub mod error;
pub mod failover;
pub mod faults;
pub mod http;
pub mod isolate;
pub mod netns;
pub mod node_config;
pub mod probe;
pub mod procs;
pub mod run;
pub mod traffic;
pub mod verdict;
pub mod windows;

pub use error::ChaosError;
