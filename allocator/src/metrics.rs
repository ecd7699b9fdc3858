//! Prometheus metrics of an allocator node.
//!
//! Ledger figures are read from the replicated state at scrape time (a [`LedgerFigures`]
//! snapshot per policy), so they always agree with what `leasectl budget show` reports and
//! cost nothing between scrapes. Labels are policy ids, never keys or holders, so the number
//! of series stays bounded by the number of policies (P4).

mod lease_calls;
mod listener;
mod upstream;

use crate::policy_bounds::{policy_bounds, PolicyBound};
use crate::rpc_timer::RpcTimer;
use leasehold_common::ledger::Ledger;
use leasehold_common::policy::PolicySet;
use leasehold_proto::transport::request_budget::RequestBudget;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Cumulative and current figures of one policy on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerFigures {
    pub keys: u64,
    pub leases: u64,
    pub outstanding: u64,
    pub granted: u64,
    pub used: u64,
    pub reclaimed: u64,
    pub stranded: u64,
    pub dropped: u64,
    /// Delegated nodes: credit received from, given back to, and lost with upstream leases.
    pub upstream_received: u64,
    pub upstream_returned: u64,
    pub upstream_lost: u64,
    /// Delegated nodes: credit of upstream leases not yet sub-leased.
    pub upstream_idle: u64,
    /// The fleet-wide bound, for a policy whose admissions can be checked against it.
    pub bound: Option<PolicyBound>,
}

/// Sums a ledger's accounts per policy.
pub fn ledger_figures(ledger: &Ledger) -> BTreeMap<String, LedgerFigures> {
    let mut out: BTreeMap<String, LedgerFigures> = BTreeMap::new();
    for (_, acct) in ledger.accounts() {
        let f = out.entry(acct.policy_id.clone()).or_default();
        f.keys += 1;
        f.leases += acct.leases;
        f.outstanding += acct.outstanding;
        f.granted += acct.stats.granted;
        f.used += acct.stats.used;
        f.reclaimed += acct.stats.reclaimed;
        f.stranded += acct.stats.stranded;
        f.dropped += acct.stats.dropped;
        f.upstream_received += acct.stats.received;
        f.upstream_returned += acct.stats.returned_upstream;
        f.upstream_lost += acct.stats.lost_upstream;
        if let leasehold_common::ledger::Supply::Upstream(u) = &acct.supply {
            f.upstream_idle += u.idle;
        }
    }
    out
}

/// [`ledger_figures`] with the bounds of the single-key policies in `policies`.
pub fn figures_with_bounds(
    ledger: &Ledger,
    policies: &PolicySet,
) -> BTreeMap<String, LedgerFigures> {
    let mut out = ledger_figures(ledger);
    for (policy, bound) in policy_bounds(ledger, policies) {
        out.entry(policy).or_default().bound = Some(bound);
    }
    out
}

/// Where scrapes read ledger figures from.
pub type FiguresSource = Arc<dyn Fn() -> BTreeMap<String, LedgerFigures> + Send + Sync>;

struct LedgerCollector {
    source: FiguresSource,
}

impl fmt::Debug for LedgerCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LedgerCollector")
    }
}

type Field = fn(&LedgerFigures) -> u64;

const COUNTERS: &[(&str, &str, Field)] = &[
    (
        "leasehold_credit_granted",
        "Credit put on lease, renewals included (units).",
        |f| f.granted,
    ),
    (
        "leasehold_credit_used",
        "Credit holders reported spent (units).",
        |f| f.used,
    ),
    (
        "leasehold_credit_reclaimed",
        "Credit handed back by holders (units).",
        |f| f.reclaimed,
    ),
    (
        "leasehold_credit_stranded",
        "Credit written off at expiry, never re-granted (units).",
        |f| f.stranded,
    ),
    (
        "leasehold_credit_dropped",
        "Credit that no longer fitted under a lowered cap (units).",
        |f| f.dropped,
    ),
    (
        "leasehold_upstream_credit_received",
        "Credit received through upstream leases (delegated nodes; units).",
        |f| f.upstream_received,
    ),
    (
        "leasehold_upstream_credit_returned",
        "Idle credit given back to the upstream cluster (delegated nodes; units).",
        |f| f.upstream_returned,
    ),
    (
        "leasehold_upstream_credit_lost",
        "Idle credit lost when an upstream lease ran out or was revoked (delegated nodes; units).",
        |f| f.upstream_lost,
    ),
];

const GAUGES: &[(&str, &str, Field)] = &[
    (
        "leasehold_keys",
        "Policy keys with state on this node.",
        |f| f.keys,
    ),
    (
        "leasehold_leases_live",
        "Leases not yet released or written off.",
        |f| f.leases,
    ),
    (
        "leasehold_credit_outstanding",
        "Credit on lease, not yet reported spent or handed back (units).",
        |f| f.outstanding,
    ),
    (
        "leasehold_upstream_credit_idle",
        "Upstream credit not yet sub-leased (delegated nodes; units).",
        |f| f.upstream_idle,
    ),
];

impl Collector for LedgerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let figures = (self.source)();
        for (name, help, field) in COUNTERS {
            let mut metric = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (policy, f) in &figures {
                let labels = [("policy", policy.as_str())];
                let family = metric.encode_family(&labels)?;
                ConstCounter::new(field(f)).encode(family)?;
            }
        }
        for (name, help, field) in GAUGES {
            let mut metric = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (policy, f) in &figures {
                let labels = [("policy", policy.as_str())];
                let family = metric.encode_family(&labels)?;
                ConstGauge::new(field(f) as i64).encode(family)?;
            }
        }
        encode_bounds(&figures, &mut encoder)
    }
}

type BoundField = fn(&PolicyBound) -> f64;

const BOUNDS: &[(&str, &str, BoundField)] = &[
    (
        "leasehold_policy_rate_units_per_second",
        "Sustained rate of a single-key policy, fleet-wide (a window's limit per its length).",
        |b| b.rate_milli_per_sec as f64 / 1_000.0,
    ),
    (
        "leasehold_policy_burst_units",
        "Burst of a single-key policy, fleet-wide (a window's limit).",
        |b| b.burst as f64,
    ),
];

fn encode_bounds(
    figures: &BTreeMap<String, LedgerFigures>,
    encoder: &mut DescriptorEncoder<'_>,
) -> Result<(), fmt::Error> {
    for (name, help, field) in BOUNDS {
        let mut metric = encoder.encode_descriptor(
            name,
            help,
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (policy, f) in figures {
            let Some(b) = &f.bound else { continue };
            let labels = [("policy", policy.as_str()), ("scope", b.scope)];
            let family = metric.encode_family(&labels)?;
            ConstGauge::new(field(b)).encode(family)?;
        }
    }
    Ok(())
}

/// The node's metric registry and the handles drivers update.
pub struct AllocatorMetrics {
    registry: Registry,
    /// 1 while this node is the Raft leader.
    pub is_leader: Gauge,
    pub raft_term: Gauge,
    pub raft_last_log_index: Gauge,
    pub raft_applied_index: Gauge,
    /// Last log index the node's newest snapshot covers (0: none yet).
    pub raft_snapshot_index: Gauge,
    /// 1 while `/readyz` would answer 200, set at each scrape, so alerts need no HTTP probe.
    pub ready: Gauge,
    /// gRPC handling time per method, in seconds, of the lease and admin services.
    pub rpc: RpcTimer,
}

impl AllocatorMetrics {
    pub fn new(source: FiguresSource, rpc: RpcTimer) -> Self {
        let mut registry = Registry::default();
        let is_leader = Gauge::default();
        let raft_term = Gauge::default();
        let raft_last_log_index = Gauge::default();
        let raft_applied_index = Gauge::default();
        let raft_snapshot_index = Gauge::default();
        let ready = Gauge::default();
        registry.register(
            "leasehold_raft_is_leader",
            "1 while this node leads its cluster",
            is_leader.clone(),
        );
        registry.register(
            "leasehold_raft_term",
            "Current Raft term",
            raft_term.clone(),
        );
        registry.register(
            "leasehold_raft_last_log_index",
            "Index of the last log entry",
            raft_last_log_index.clone(),
        );
        registry.register(
            "leasehold_raft_applied_index",
            "Index of the last applied entry",
            raft_applied_index.clone(),
        );
        registry.register(
            "leasehold_raft_snapshot_index",
            "Last log index covered by the node's newest snapshot (0: none)",
            raft_snapshot_index.clone(),
        );
        registry.register(
            "leasehold_ready",
            "1 while the node knows a leader and has applied what was committed (/readyz)",
            ready.clone(),
        );
        registry.register(
            "leasehold_rpc_duration_seconds",
            "gRPC handling time of lease and admin calls by method",
            rpc.family(),
        );
        registry.register_collector(Box::new(LedgerCollector { source }));
        AllocatorMetrics {
            registry,
            is_leader,
            raft_term,
            raft_last_log_index,
            raft_applied_index,
            raft_snapshot_index,
            ready,
            rpc,
        }
    }

    /// Exports the gRPC listener's bounds: the lease and admin services' request budget,
    /// and the TLS handshakes.
    pub fn register_listener(&mut self, budget: Arc<RequestBudget>) {
        self.registry
            .register_collector(Box::new(listener::ListenerCollector(budget)));
    }

    /// Exports the lease calls the node's lease service applied.
    pub fn register_lease_calls(
        &mut self,
        counts: Arc<crate::service::call_counts::LeaseCallCounts>,
    ) {
        self.registry
            .register_collector(Box::new(lease_calls::LeaseCallCollector(counts)));
    }

    /// Exports a delegated node's upstream driver counters.
    pub fn register_upstream(&mut self, counters: Arc<crate::upstream::UpstreamCounters>) {
        self.registry
            .register_collector(Box::new(upstream::UpstreamCollector(counters)));
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_common::ledger::{Acquire, Command, LeaseParams, LedgerConfig, PolicyParams};
    use leasehold_common::rate::Rate;
    use leasehold_common::time::Nanos;
    use std::sync::Mutex;

    #[test]
    fn renders_ledger_figures_per_policy() {
        let mut ledger = Ledger::new(LedgerConfig::root("g"));
        let params = PolicyParams {
            policy_id: "api".into(),
            version: 1,
            rate: Rate::per_second(10).unwrap(),
            burst: 100,
            lease: LeaseParams::default(),
            weights: Default::default(),
            window: None,
            owner: Default::default(),
            exact: false,
        };
        ledger.apply(Nanos(0), Command::PutPolicy(params)).unwrap();
        let acquire = Command::Acquire(Acquire {
            holder_id: "a".into(),
            policy_id: "api".into(),
            key: "api:t=1".into(),
            want_credit: 30,
            demand_milli_per_sec: 0,
            request_id: 1,
            priority: 0,
        });
        ledger.apply(Nanos(0), acquire).unwrap();
        let shared = Arc::new(Mutex::new(ledger));
        let source: FiguresSource = {
            let shared = Arc::clone(&shared);
            Arc::new(move || ledger_figures(&shared.lock().unwrap()))
        };
        let metrics = AllocatorMetrics::new(source, RpcTimer::default());
        metrics.is_leader.set(1);
        metrics.rpc.observe("Acquire", 0.001);
        let text = metrics.render();
        assert!(
            text.contains("leasehold_credit_granted_total{policy=\"api\"} 30"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_credit_outstanding{policy=\"api\"} 30"),
            "{text}"
        );
        assert!(text.contains("leasehold_raft_is_leader 1"), "{text}");
        assert!(
            !text.contains("leasehold_policy_rate_units_per_second{"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_rpc_duration_seconds_count{method=\"Acquire\"} 1"),
            "{text}"
        );
    }
}
