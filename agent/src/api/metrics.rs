//! Prometheus text for the agent: what the engine counted, per policy (never per key).

use super::request_budget::RequestBudget;
use crate::engine::EngineStats;
use crate::exact::ExactCounters;
use leasehold_proto::transport::HandshakeStats;
use std::fmt::Write;
use std::sync::atomic::Ordering;

type Field = fn(&crate::engine::PolicyCountersSnapshot) -> u64;

const UNITS: &[(&str, &str, Field)] = &[
    ("offered", "Units offered (admitted or not).", |c| c.offered),
    ("admitted", "Units admitted and charged.", |c| c.admitted),
    ("rejected", "Units refused.", |c| c.rejected),
    (
        "rolled_back",
        "Units charged then given back because another dimension refused.",
        |c| c.rolled_back,
    ),
    (
        "not_evaluated",
        "Units not checked because an earlier dimension refused.",
        |c| c.not_evaluated,
    ),
    (
        "shadow_denied",
        "Units a shadow-mode policy would have refused (admitted).",
        |c| c.shadow_denied,
    ),
    (
        "fail_open",
        "Units admitted uncharged while failing open.",
        |c| c.fail_open,
    ),
    (
        "restricted",
        "Units admitted under restricted operation.",
        |c| c.restricted,
    ),
    (
        "kill_switch",
        "Units admitted by a policy's kill switch.",
        |c| c.kill_switch,
    ),
];

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the engine's and the exact decisions' counters in the Prometheus text format.
pub fn render(stats: &EngineStats, exact: &ExactCounters) -> String {
    let mut out = String::new();
    for (name, help, field) in UNITS {
        let _ = writeln!(out, "# HELP leasehold_agent_{name}_units_total {help}");
        let _ = writeln!(out, "# TYPE leasehold_agent_{name}_units_total counter");
        for p in &stats.policies {
            let _ = writeln!(
                out,
                "leasehold_agent_{name}_units_total{{policy=\"{}\"}} {}",
                escape(&p.policy_id),
                field(&p.counters)
            );
        }
    }
    let read = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let engine: [(&str, &str, u64); 16] = [
        (
            "decisions_total",
            "Admission decisions made.",
            stats.decisions,
        ),
        (
            "self_protection_denied_total",
            "Requests refused by the instance's self-protection bucket.",
            stats.self_protection_denied,
        ),
        (
            "table_full_total",
            "New keys sent to an overflow key because the key table was full.",
            stats.table_full,
        ),
        (
            "acquire_queue_full_total",
            "Lease requests not queued because the queue was full.",
            stats.acquire_queue_full,
        ),
        (
            "unknown_policy_total",
            "Dimensions naming a policy that is not loaded.",
            stats.unknown_policy,
        ),
        (
            "evictions_total",
            "Keys dropped from the key table: local limits at rest, idle leased keys, keys of removed policies.",
            stats.evictions,
        ),
        ("keys", "Keys held in the key table.", stats.keys as u64),
        (
            "shaped_admitted_total",
            "Requests a shaping policy admitted with a delay.",
            stats.shaped_admitted,
        ),
        (
            "shaped_waiting_full_total",
            "Requests a shaping policy refused because shaped_waiting_max requests were waiting.",
            stats.shaped_waiting_full,
        ),
        (
            "shaped_waiting_max",
            "Most requests admitted with a delay that may wait at once.",
            stats.shaped_waiting_max as u64,
        ),
        (
            "clock_rollbacks_total",
            "Clock readings behind the last one, clamped.",
            stats.clock.rollbacks,
        ),
        (
            "exact_admitted_total",
            "Requests of exact policies the allocator admitted.",
            read(&exact.admitted),
        ),
        (
            "exact_refused_total",
            "Requests of exact policies the allocator refused.",
            read(&exact.refused),
        ),
        (
            "exact_unanswered_total",
            "Requests of exact policies left to the failure behaviour (no answer in time).",
            read(&exact.unanswered),
        ),
        (
            "exact_refunds_total",
            "Refunds sent for admitted exact decisions whose request another dimension refused.",
            read(&exact.refunds_sent),
        ),
        (
            "exact_refunds_dropped_total",
            "Refunds that could not be sent (their units stay counted).",
            read(&exact.refunds_dropped),
        ),
    ];
    write_all(&mut out, engine);
    if let Some(sync) = stats.policy_sync {
        render_policy_sync(&mut out, sync);
    }
    out
}

fn write_all<const N: usize>(out: &mut String, metrics: [(&str, &str, u64); N]) {
    for (name, help, value) in metrics {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(out, "# HELP leasehold_agent_{name} {help}\n# TYPE leasehold_agent_{name} {kind}\nleasehold_agent_{name} {value}");
    }
}

/// Renders the gRPC services' request budget in the Prometheus text format.
pub fn render_request_budget(b: &RequestBudget) -> String {
    let mut out = String::new();
    let metrics = [
            (
                "request_bytes_buffered",
                "gRPC request bytes buffered now, across all calls.",
                b.buffered_bytes() as u64,
            ),
            (
                "request_bytes_buffered_max",
                "Most gRPC request bytes buffered at once (request_bytes_buffered_max).",
                b.max_bytes() as u64,
            ),
            (
                "request_budget_refused_total",
                "gRPC calls answered RESOURCE_EXHAUSTED because request_bytes_buffered_max was reached.",
                b.refused(),
            ),
            (
                "request_body_timeouts_total",
                "gRPC calls answered DEADLINE_EXCEEDED because their body took longer than request_body_timeout_ms.",
                b.timed_out(),
            ),
    ];
    write_all(&mut out, metrics);
    out
}

/// Renders the TLS handshakes of the agent's listeners in the Prometheus text format.
pub fn render_handshakes(h: HandshakeStats) -> String {
    let mut out = String::new();
    let metrics = [
        (
            "tls_handshakes_in_progress",
            "TLS handshakes under way on the gRPC and HTTP listeners.",
            h.in_progress,
        ),
        (
            "tls_handshakes_completed_total",
            "TLS handshakes completed: the client presented a certificate of the CA.",
            h.completed,
        ),
        (
            "tls_handshakes_failed_total",
            "TLS handshakes failed: no or a bad client certificate, a protocol error, a timeout.",
            h.failed,
        ),
        (
            "tls_handshakes_evicted_total",
            "TLS handshakes abandoned to make room for a newer connection (a quarter of connections_max handshake at once per listener).",
            h.evicted,
        ),
        (
            "tls_connections_over_peer_limit_total",
            "Connections closed after their handshake: their certificate had connections_per_peer_max open.",
            h.over_peer_limit,
        ),
    ];
    write_all(&mut out, metrics);
    out
}

/// Seconds as Prometheus prints them, from milliseconds.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1_000, ms % 1_000)
}

fn render_policy_sync(out: &mut String, sync: crate::engine::PolicySyncStats) {
    let _ = writeln!(
        out,
        "# HELP leasehold_agent_policy_confirmed_timestamp_seconds When the allocator's watch stream last confirmed the policies (Unix time; 0: not yet).\n\
         # TYPE leasehold_agent_policy_confirmed_timestamp_seconds gauge\n\
         leasehold_agent_policy_confirmed_timestamp_seconds {}",
        seconds(sync.confirmed_unix_ms)
    );
    let _ = writeln!(
        out,
        "# HELP leasehold_agent_policy_stale_after_seconds Unconfirmed this long, the allocator's policies count as stale (policy_stale_after_ms).\n\
         # TYPE leasehold_agent_policy_stale_after_seconds gauge\n\
         leasehold_agent_policy_stale_after_seconds {}",
        seconds(sync.stale_after_ms)
    );
}
