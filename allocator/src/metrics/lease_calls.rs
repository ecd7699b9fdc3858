//! The lease calls a node's ledger applied, by kind, alone or in `LeaseBatch` calls.

use crate::service::call_counts::LeaseCallCounts;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

#[derive(Debug)]
pub(super) struct LeaseCallCollector(pub(super) Arc<LeaseCallCounts>);

impl Collector for LeaseCallCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let c = &self.0;
        let mut family = encoder.encode_descriptor(
            "leasehold_lease_calls",
            "Acquires, reports and releases the ledger applied (granted or refused), alone or in LeaseBatch calls.",
            None,
            MetricType::Counter,
        )?;
        for (call, n) in [
            ("acquire", &c.acquires),
            ("report", &c.reports),
            ("release", &c.releases),
        ] {
            let labels = [("call", call)];
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(n.load(Relaxed)).encode(metric)?;
        }
        let metric = encoder.encode_descriptor(
            "leasehold_lease_calls_batched",
            "Of the lease calls applied, those that came in a LeaseBatch call.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(c.batched.load(Relaxed)).encode(metric)
    }
}
