//! The lease manager's durable state: marks before deposits, request-id blocks, and the
//! release of a previous run's leases at start.

use super::blocking::blocking;
use super::manager::LeaseManager;
use super::marks::Allowance;
use super::state::{StateBatch, REQUEST_ID_BLOCK};
use leasehold_client::GrantorError;
use leasehold_common::time::Nanos;
use leasehold_proto::leasehold::v1 as pb;
use std::sync::Arc;

impl LeaseManager {
    /// Writes `batch` durably off the async threads (see [`super::blocking`]). Without a
    /// store there is nothing to write and it succeeds.
    async fn commit(&mut self, batch: StateBatch) -> bool {
        let Some(store) = self.store.as_ref().map(Arc::clone) else {
            return true;
        };
        if batch.is_empty() {
            return true;
        }
        let done = blocking(move || store.commit(&batch)).await;
        match done {
            Ok(Ok(())) => {
                self.counters.state_commits += 1;
                true
            }
            Ok(Err(e)) => {
                self.counters.state_errors += 1;
                tracing::error!(error = %e, "state file not written; credit held back");
                false
            }
            Err(e) => {
                self.counters.state_errors += 1;
                tracing::error!(error = %e, "state file write did not finish");
                false
            }
        }
    }

    /// Makes sure `n` more request ids are reserved on disk; false if they could not be.
    pub(super) async fn reserve_request_ids(&mut self, n: u64) -> bool {
        if self.store_unreadable {
            return false;
        }
        let needed = self.next_request.saturating_add(n).saturating_add(1);
        if needed < self.request_ids_end {
            return true;
        }
        let end = needed.saturating_add(REQUEST_ID_BLOCK);
        let ok = self
            .commit(StateBatch {
                request_ids_end: Some(end),
                ..StateBatch::default()
            })
            .await;
        if ok {
            self.request_ids_end = end;
        }
        ok
    }

    /// Raises (or lowers to the credit) the marks that need it in one durable batch, then
    /// deposits what the marks allow. Leases closed since the last batch are forgotten in
    /// the same write.
    pub(super) async fn top_up(&mut self, now: Nanos) {
        let chunk_min = self.cfg.mark_chunk_min.max(1);
        let mut marks = Vec::new();
        for h in self.held.values() {
            let (_, horizon) = self.demand(h, now);
            let a = Allowance {
                credit: h.credit,
                in_slot: h.in_slot(),
                mark: h.mark,
            };
            if let Some(m) = a.mark_wanted(h.spent(), chunk_min.max(2 * horizon)) {
                marks.push((h.lease_id, m));
            }
        }
        let forget = std::mem::take(&mut self.forget);
        let batch = StateBatch {
            marks,
            forget,
            request_ids_end: None,
        };
        if !self.commit(batch.clone()).await {
            self.forget = batch.forget;
        } else {
            for (lease_id, mark) in batch.marks {
                if let Some(h) = self.held.values_mut().find(|h| h.lease_id == lease_id) {
                    h.mark = mark;
                }
            }
        }
        for h in self.held.values_mut() {
            let units = Allowance {
                credit: h.credit,
                in_slot: h.in_slot(),
                mark: h.mark,
            }
            .depositable();
            if units > 0 {
                h.deposited += units;
                h.slot.deposit(units, h.deadline.0);
            }
        }
    }

    /// Writes pending forgets (shutdown).
    pub(super) async fn commit_pending(&mut self) {
        let forget = std::mem::take(&mut self.forget);
        let batch = StateBatch {
            forget,
            ..StateBatch::default()
        };
        if !self.commit(batch.clone()).await {
            self.forget = batch.forget;
        }
    }

    /// Reads what a previous run left: request ids continue above its reservation, and
    /// its leases are released as spent up to their marks.
    pub(super) async fn recover(&mut self) {
        let Some(store) = self.store.as_ref().map(Arc::clone) else {
            return;
        };
        let recorded = match blocking(move || store.load()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                // Spending from a store that cannot be read could repeat request ids and
                // hide the previous run's marks: hold every credit back instead.
                tracing::error!(error = %e, "state file unreadable; no credit will be spent");
                self.counters.state_errors += 1;
                self.store_unreadable = true;
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "state file read did not finish");
                self.counters.state_errors += 1;
                self.store_unreadable = true;
                return;
            }
        };
        // Above both what the file reserved and the wall-clock start (a run without the
        // file may have used higher ids).
        self.next_request = self.next_request.max(recorded.request_ids_end);
        self.request_ids_end = recorded.request_ids_end;
        self.orphans = recorded.marks;
        if !self.orphans.is_empty() {
            tracing::info!(
                leases = self.orphans.len(),
                "releasing the leases of the previous run"
            );
        }
        if self.reserve_request_ids(self.orphans.len() as u64).await {
            let recovered = self.orphans.len() as u64;
            self.retry_orphans().await;
            self.counters.recovered = recovered - self.orphans.len() as u64;
        }
    }

    /// Releases leases not held any more that the grantor could not be told about,
    /// each with its final usage (a previous run's: its mark).
    pub(super) async fn retry_orphans(&mut self) {
        let orphans = std::mem::take(&mut self.orphans);
        for (lease_id, final_used) in orphans {
            let r = pb::ReleaseRequest {
                holder_id: self.cfg.holder_id.clone(),
                lease_id,
                final_used,
                request_id: self.request_id(),
                ..Default::default()
            };
            match self.grantor.release(r).await {
                Ok(resp) => {
                    self.counters.recovered_reclaimed += resp.reclaimed;
                    self.forget.push(lease_id);
                }
                Err(GrantorError::Refused { code, message }) => {
                    // Already closed or expired: the grantor wrote it off as spent.
                    tracing::info!(lease_id, ?code, %message, "old lease already closed");
                    self.forget.push(lease_id);
                }
                Err(GrantorError::Unreachable(_)) => {
                    self.orphans.insert(lease_id, final_used);
                }
                Err(GrantorError::StaleRequest { last }) => {
                    self.continue_above(last);
                    self.orphans.insert(lease_id, final_used);
                }
            }
        }
    }

    /// The grantor has seen request ids up to `last` from this holder (a previous run whose
    /// wall clock was ahead): the next round continues above them, once it has reserved
    /// them on disk like every id. The refused request is asked again then.
    pub(super) fn continue_above(&mut self, last: u64) {
        self.ids_floor = self.ids_floor.max(last);
    }
}
