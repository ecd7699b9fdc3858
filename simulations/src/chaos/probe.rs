//! A writer that tells when the cluster serves: a holder acquiring and releasing one unit
//! of a probe policy every few milliseconds through the agents' own grantor client (which
//! follows the leader), each success being a committed Raft write.

use super::error::ChaosError;
use leasehold_client::{Grantor, RemoteGrantor};
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::transport::{ChannelFactory, ChannelSettings, ClientTransport, DevPki, Role};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The probe's holder identity (an agent certificate).
pub const PROBE_HOLDER: &str = "probe";
/// The policy the probe writes to: a rate no probe can exhaust.
pub const PROBE_POLICY: &str = "probe";
pub const PROBE_POLICY_YAML: &str = "id: probe\ndimensions: [{name: tenant}]\nkey: [tenant]\nrate: {units: 1000000, per: 1s}\nburst: 1000000\nscope: global\nlease: {ttl: 5s, refresh_horizon: 1s, reserve_fraction: 0}\n";
/// Pause between probe writes, in milliseconds.
const PROBE_EVERY_MS: u64 = 5;
/// Deadline of one probe call, in milliseconds: a stopped node costs at most this.
const PROBE_CALL_TIMEOUT_MS: u64 = 300;
/// Nodes tried per probe write before it counts as failed (the agent's own setting).
const PROBE_ATTEMPTS: usize = 3;

/// Successful probe writes (when sent, when answered), shared with the task writing them.
#[derive(Clone, Default)]
pub struct ProbeLog {
    successes: Arc<Mutex<Vec<(Instant, Instant)>>>,
    stop: Arc<AtomicBool>,
}

impl ProbeLog {
    /// When the first write sent at or after `t` was answered: one sent before may have
    /// been committed by a leader killed since.
    pub fn first_success_after(&self, t: Instant) -> Option<Instant> {
        let s = self.successes.lock().unwrap_or_else(|e| e.into_inner());
        s.iter().find(|(sent, _)| *sent >= t).map(|(_, done)| *done)
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts the probe against `addrs`; it runs until [`ProbeLog::stop`].
pub fn start_probe(pki: &DevPki, addrs: Vec<String>) -> Result<ProbeLog, ChaosError> {
    let pem = pki
        .tls_pem(Role::Agent, PROBE_HOLDER)
        .ok_or_else(|| ChaosError::Pki("no probe certificate".into()))?;
    let settings = ChannelSettings {
        connect_timeout_ms: PROBE_CALL_TIMEOUT_MS,
        request_timeout_ms: PROBE_CALL_TIMEOUT_MS,
        keepalive_interval_ms: 250,
        keepalive_timeout_ms: PROBE_CALL_TIMEOUT_MS,
        ..ChannelSettings::default()
    };
    let transport = ClientTransport::MutualTls {
        pem,
        server_name: Some("localhost".into()),
    };
    let channels =
        ChannelFactory::new(settings, transport).map_err(|e| ChaosError::Pki(e.to_string()))?;
    let grantor = RemoteGrantor::new(channels, addrs, PROBE_ATTEMPTS);
    let log = ProbeLog::default();
    let out = log.clone();
    tokio::spawn(async move {
        let mut request_id = 0;
        while !log.stop.load(Ordering::Relaxed) {
            request_id += 2;
            let sent = Instant::now();
            if let Some(done) = write_once(&grantor, request_id).await {
                let mut s = log.successes.lock().unwrap_or_else(|e| e.into_inner());
                s.push((sent, done));
            }
            tokio::time::sleep(Duration::from_millis(PROBE_EVERY_MS)).await;
        }
    });
    Ok(out)
}

/// One acquire (the write that counts: when it was answered) and, best effort, its
/// release.
async fn write_once(grantor: &RemoteGrantor, request_id: u64) -> Option<Instant> {
    let req = pb::AcquireRequest {
        holder_id: PROBE_HOLDER.into(),
        policy_id: PROBE_POLICY.into(),
        key: "probe".into(),
        want_credit: 1,
        request_id,
        ..Default::default()
    };
    let lease = grantor.acquire(req).await.ok()?.lease?;
    let done = Instant::now();
    let release = pb::ReleaseRequest {
        holder_id: PROBE_HOLDER.into(),
        lease_id: lease.lease_id,
        final_used: 0,
        request_id: request_id + 1,
        ..Default::default()
    };
    let _ = grantor.release(release).await;
    Some(done)
}
