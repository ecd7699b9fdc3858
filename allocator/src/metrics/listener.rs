//! The gRPC listener's bounds as metrics: the request budget of the lease and admin
//! services, and the TLS handshakes that silent or hostile clients start.

use leasehold_proto::transport::handshake_stats;
use leasehold_proto::transport::request_budget::RequestBudget;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::sync::Arc;

#[derive(Debug)]
pub(super) struct ListenerCollector(pub(super) Arc<RequestBudget>);

impl Collector for ListenerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        use MetricType::{Counter, Gauge};
        let b = &self.0;
        let h = handshake_stats();
        let bytes = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let figures = [
            (
                "leasehold_request_bytes_buffered",
                "Lease and admin request bytes buffered now, across all calls.",
                Gauge,
                bytes(b.buffered_bytes()),
            ),
            (
                "leasehold_request_bytes_buffered_max",
                "Most lease and admin request bytes buffered at once (listener.request_bytes_buffered_max).",
                Gauge,
                bytes(b.max_bytes()),
            ),
            (
                "leasehold_request_budget_refused",
                "Calls answered RESOURCE_EXHAUSTED because listener.request_bytes_buffered_max was reached.",
                Counter,
                b.refused(),
            ),
            (
                "leasehold_request_body_timeouts",
                "Calls answered DEADLINE_EXCEEDED because their body took longer than listener.request_body_timeout_ms.",
                Counter,
                b.timed_out(),
            ),
            (
                "leasehold_tls_handshakes_in_progress",
                "TLS handshakes under way on the gRPC listener.",
                Gauge,
                h.in_progress,
            ),
            (
                "leasehold_tls_handshakes_completed",
                "TLS handshakes completed: the client presented a certificate of the CA.",
                Counter,
                h.completed,
            ),
            (
                "leasehold_tls_handshakes_failed",
                "TLS handshakes failed: no or a bad client certificate, a protocol error, a timeout.",
                Counter,
                h.failed,
            ),
            (
                "leasehold_tls_handshakes_evicted",
                "TLS handshakes abandoned to make room for a newer connection (a quarter of listener.connections_max handshake at once).",
                Counter,
                h.evicted,
            ),
            (
                "leasehold_tls_connections_over_peer_limit",
                "Connections closed after their handshake: their certificate had listener.connections_per_peer_max open.",
                Counter,
                h.over_peer_limit,
            ),
        ];
        for (name, help, kind, value) in figures {
            let counter = matches!(kind, Counter);
            let metric = encoder.encode_descriptor(name, help, None, kind)?;
            if counter {
                ConstCounter::new(value).encode(metric)?;
            } else {
                ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(metric)?;
            }
        }
        Ok(())
    }
}
