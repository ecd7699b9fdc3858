//! Agents as libraries: an enforcement engine and its lease manager, leasing from a node
//! over gRPC.

use leasehold_agent::engine::{Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig, ManagerCounters};
use leasehold_client::RemoteGrantor;
use leasehold_common::policy::Policy;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::transport::{ChannelFactory, DevPki, Role};
use std::sync::Arc;
use tokio::sync::watch;

pub struct Agent {
    pub engine: Arc<Engine>,
    pub clock: SystemClock,
    pub stop: watch::Sender<bool>,
    pub task: tokio::task::JoinHandle<ManagerCounters>,
}

impl Agent {
    /// Stops the lease manager and waits until it has settled its leases.
    pub async fn shut_down(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap();
    }
}

/// A lease manager for `holder` on the short timings the tests run with.
pub fn manager_config(holder: &str) -> ManagerConfig {
    let mut cfg = ManagerConfig::new(holder);
    cfg.tick_ms = 5;
    cfg.report_every_ms = 100;
    cfg.retry_ms = 50;
    cfg
}

/// An agent enforcing `policies` with credit leased from `allocator` over `channels`.
pub fn spawn_agent(
    channels: ChannelFactory,
    allocator: &str,
    policies: Vec<Policy>,
    cfg: ManagerConfig,
) -> Agent {
    let clock = SystemClock::new();
    let engine = Arc::new(
        Engine::builder()
            .start(clock.now())
            .build(RuleSource::from_policies(policies))
            .unwrap(),
    );
    let grantor = Arc::new(RemoteGrantor::new(channels, vec![allocator.to_string()], 3));
    let (stop, rx) = watch::channel(false);
    let queue = engine.take_acquire_queue().unwrap();
    let task = tokio::spawn(LeaseManager::new(cfg, grantor, clock.clone(), queue).run(rx));
    Agent {
        engine,
        clock,
        stop,
        task,
    }
}

/// An agent `name` enforcing `policy` with credit leased from `region` over mutual TLS.
pub fn start_agent(pki: &DevPki, name: &str, region: &str, policy: &Policy) -> Agent {
    let channels = super::channels(pki, Role::Agent, name);
    spawn_agent(channels, region, vec![policy.clone()], manager_config(name))
}
