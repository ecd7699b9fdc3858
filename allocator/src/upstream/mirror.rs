//! Follows the upstream's watch stream: a delegated allocator enforces the policies and
//! emergency switches its upstream has, and stops sub-leasing an upstream lease the moment
//! it is revoked.
//!
//! Only the leader follows (its proposals are the ones that count); every (re)connection
//! starts from the upstream's current state, which is idempotent here: an unchanged policy
//! makes no new version and an unchanged switch is not set again.

use crate::replica::{Replica, ReplicaError};
use crate::service::convert::emergency_from_pb;
use crate::state::{AllocatorState, StateCommand};
use leasehold_common::ledger::Command;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::lease_service_client::LeaseServiceClient;
use leasehold_proto::transport::ChannelFactory;
use leasehold_proto::LEADER_METADATA_KEY;
use std::future::Future;
use std::time::Duration;

/// Where and how to follow the upstream.
pub struct MirrorConfig {
    pub channels: ChannelFactory,
    pub addrs: Vec<String>,
    pub holder_id: String,
    /// Reconnect when nothing (not even a heartbeat) arrived for this long.
    pub silence_max_ms: u64,
    /// Wait between connection attempts, and while this node does not lead.
    pub retry_ms: u64,
}

/// Why one watch session ended.
enum Ended {
    NotLeader,
    Broken(String),
}

pub async fn run_mirror<R: Replica<AllocatorState>>(
    replica: R,
    cfg: MirrorConfig,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut next = 0usize;
    let mut preferred: Option<String> = None;
    loop {
        let addr = preferred
            .take()
            .unwrap_or_else(|| cfg.addrs[next % cfg.addrs.len().max(1)].clone());
        let session = async {
            if replica.read(|_| ()).await.is_err() {
                return (Ended::NotLeader, None);
            }
            follow(&replica, &cfg, &addr).await
        };
        let (ended, leader) = tokio::select! {
            _ = &mut shutdown => return,
            r = session => r,
        };
        match ended {
            Ended::NotLeader => {}
            Ended::Broken(why) => {
                tracing::debug!(addr, why, "upstream watch ended");
                next += 1;
                preferred = leader;
            }
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(Duration::from_millis(cfg.retry_ms.max(1))) => {}
        }
    }
}

/// One watch session against `addr`; on a redirect, also the leader's address.
async fn follow<R: Replica<AllocatorState>>(
    replica: &R,
    cfg: &MirrorConfig,
    addr: &str,
) -> (Ended, Option<String>) {
    let channel = match cfg.channels.channel(addr) {
        Ok(c) => c,
        Err(e) => return (Ended::Broken(e.to_string()), None),
    };
    let req = pb::WatchRequest {
        holder_id: cfg.holder_id.clone(),
        policy_ids: Vec::new(),
        after_seq: 0,
    };
    let mut stream = match LeaseServiceClient::new(channel).watch(req).await {
        Ok(s) => s.into_inner(),
        Err(status) => {
            let leader = status
                .metadata()
                .get(LEADER_METADATA_KEY)
                .and_then(|v| v.to_str().ok())
                .filter(|l| !l.is_empty() && *l != addr)
                .map(str::to_string);
            return (Ended::Broken(status.message().to_string()), leader);
        }
    };
    let silence = Duration::from_millis(cfg.silence_max_ms.max(1));
    loop {
        let event = match tokio::time::timeout(silence, stream.message()).await {
            Err(_) => return (Ended::Broken("upstream silent".into()), None),
            Ok(Err(status)) => return (Ended::Broken(status.message().to_string()), None),
            Ok(Ok(None)) => return (Ended::Broken("stream closed".into()), None),
            Ok(Ok(Some(ev))) => ev,
        };
        if let Err(e) = apply(replica, &cfg.holder_id, event).await {
            return match e {
                ReplicaError::NotLeader { .. } => (Ended::NotLeader, None),
                other => (Ended::Broken(other.to_string()), None),
            };
        }
    }
}

async fn apply<R: Replica<AllocatorState>>(
    replica: &R,
    holder_id: &str,
    ev: pb::WatchEvent,
) -> Result<(), ReplicaError> {
    let actor = format!("upstream:{holder_id}");
    match ev.event {
        Some(pb::watch_event::Event::PolicyChanged(p)) if !p.deleted => {
            let Some(info) = p.policy else { return Ok(()) };
            let cmd = StateCommand::MirrorPolicy {
                yaml: info.yaml,
                upstream_version: info.version,
                actor,
            };
            let out = replica.propose(cmd).await?;
            tracing::info!(policy = %info.policy_id, upstream_version = info.version, ?out, "policy from upstream");
        }
        Some(pb::watch_event::Event::Emergency(switch)) => {
            let Ok(emergency) = emergency_from_pb(&switch) else {
                tracing::warn!(?switch, "upstream sent an invalid emergency switch");
                return Ok(());
            };
            let id = emergency.policy_id.clone();
            let current = replica.read(move |s| s.emergency(&id)).await?;
            if current != emergency {
                let cmd = StateCommand::SetEmergency {
                    emergency,
                    reason: "set upstream".into(),
                    actor,
                };
                replica.propose(cmd).await?;
            }
        }
        Some(pb::watch_event::Event::Revoked(r)) => {
            let id = r.lease_id;
            let key = replica
                .read(move |s| {
                    s.ledger()
                        .accounts()
                        .map(|(k, _)| k)
                        .find(|k| {
                            s.ledger()
                                .upstream_position(k)
                                .is_some_and(|p| p.upstream_lease_id == id)
                        })
                        .cloned()
                })
                .await?;
            if let Some(key) = key {
                tracing::warn!(
                    key,
                    lease_id = id,
                    reason = r.reason,
                    "upstream lease revoked"
                );
                let cmd = Command::UpstreamClosed {
                    key,
                    released: false,
                };
                replica.propose(StateCommand::Ledger(cmd)).await?;
            }
        }
        _ => {}
    }
    Ok(())
}
