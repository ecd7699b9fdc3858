//! The agents of a cell: each an enforcement [`Engine`] with a [`LeaseManager`] leasing
//! from its region over gRPC, taking its rules from the region's watch stream.

use super::error::LiveError;
use super::nodes::channels;
use leasehold_agent::engine::{AdmitRequest, Dimension, Engine, RuleSource};
use leasehold_agent::lease::{LeaseManager, ManagerConfig, ManagerCounters};
use leasehold_client::RemoteGrantor;
use leasehold_common::time::{Clock, SystemClock};
use leasehold_proto::transport::{DevPki, Role};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long an agent may take to release its leases and stop.
const STOP_WAIT_MS: u64 = 10_000;
/// Gateway connection attempts per grantor call.
const GRANTOR_RETRIES_MAX: usize = 3;

/// One running agent.
pub struct LiveAgent {
    pub name: String,
    engine: Arc<Engine>,
    clock: SystemClock,
    synced: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
    task: JoinHandle<ManagerCounters>,
}

impl LiveAgent {
    /// Starts agent `name` leasing from the region node at `region_addr`. It has no rules
    /// of its own: they arrive over the watch stream.
    pub fn start(pki: &DevPki, name: &str, region_addr: &str) -> Result<LiveAgent, LiveError> {
        let fail = |reason: String| LiveError::Agent {
            agent: name.to_string(),
            reason,
        };
        let clock = SystemClock::new();
        let engine = Engine::builder()
            .start(clock.now())
            .build(RuleSource::default())
            .map_err(|e| fail(e.to_string()))?;
        let engine = Arc::new(engine);
        let grantor = Arc::new(RemoteGrantor::new(
            channels(pki, Role::Agent, name)?,
            vec![region_addr.to_string()],
            GRANTOR_RETRIES_MAX,
        ));
        let mut cfg = ManagerConfig::new(name);
        // Frequent reports let the region see where demand moved within a few ticks.
        cfg.tick_ms = 10;
        cfg.report_every_ms = 100;
        cfg.retry_ms = 50;
        cfg.initial_want = 20;
        cfg.idle_release_ms = 2_000;
        let queue = engine
            .take_acquire_queue()
            .ok_or_else(|| fail("acquire queue already taken".into()))?;
        let manager =
            LeaseManager::new(cfg, grantor, clock.clone(), queue).with_engine(Arc::clone(&engine));
        let synced = manager.policies_synced();
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(manager.run(rx));
        Ok(LiveAgent {
            name: name.to_string(),
            engine,
            clock,
            synced,
            stop,
            task,
        })
    }

    /// True once the agent has the region's current policies, including `policy_id`.
    pub fn has_policy(&self, policy_id: &str) -> bool {
        self.synced.load(Ordering::Acquire)
            && self.engine.policy_ids().iter().any(|p| p == policy_id)
    }

    /// Offers one request of `tenant` under `policy_id`; true if admitted.
    pub fn admit(&self, policy_id: &str, tenant: &str) -> bool {
        let entries = [("tenant", tenant)];
        let dims = [Dimension::policy(policy_id, &entries)];
        self.engine
            .admit(&AdmitRequest::new(&dims), self.clock.now())
            .allowed
    }

    /// Stops the lease manager (it releases every lease) and returns its counters.
    pub async fn stop(self) -> Result<ManagerCounters, LiveError> {
        let _ = self.stop.send(true);
        let fail = |reason: String| LiveError::Agent {
            agent: self.name.clone(),
            reason,
        };
        match tokio::time::timeout(Duration::from_millis(STOP_WAIT_MS), self.task).await {
            Ok(Ok(counters)) => Ok(counters),
            Ok(Err(e)) => Err(fail(format!("task failed: {e}"))),
            Err(_) => Err(fail(format!("did not stop within {STOP_WAIT_MS} ms"))),
        }
    }
}
