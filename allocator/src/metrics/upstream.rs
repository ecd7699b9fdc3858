//! A delegated node's upstream driver as metrics: what it asked its upstream for and how
//! the upstream answered, and how many `LeaseBatch` calls carried it.

use crate::upstream::UpstreamCounters;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

#[derive(Debug)]
pub(super) struct UpstreamCollector(pub(super) Arc<UpstreamCounters>);

impl Collector for UpstreamCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let c = &self.0;
        let figures = [
            (
                "leasehold_upstream_batch_calls",
                "LeaseBatch calls sent upstream; each carries every key's call of a driver round.",
                &c.batch_calls,
            ),
            (
                "leasehold_upstream_acquired",
                "Upstream leases acquired.",
                &c.acquired,
            ),
            (
                "leasehold_upstream_reports",
                "Reports on upstream leases answered (each renews).",
                &c.reports,
            ),
            (
                "leasehold_upstream_denied",
                "Upstream acquires denied credit.",
                &c.denied,
            ),
            (
                "leasehold_upstream_unreachable",
                "Upstream calls that got no answer (the key waits and is tried again).",
                &c.unreachable,
            ),
            (
                "leasehold_upstream_expired",
                "Upstream leases left to expire: their sub-leases did not settle by the deadline.",
                &c.expired,
            ),
            (
                "leasehold_upstream_released",
                "Upstream leases released (their keys idle).",
                &c.released,
            ),
            (
                "leasehold_upstream_returned_units",
                "Idle credit handed back upstream (units).",
                &c.returned_units,
            ),
        ];
        for (name, help, value) in figures {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value.load(Relaxed)).encode(metric)?;
        }
        Ok(())
    }
}
