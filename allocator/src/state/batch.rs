//! A holder's batch of lease calls, applied as one replicated command.
//!
//! A lower-level allocator reports on, renews, acquires and releases every key of a round in
//! one `LeaseBatch` call. Applying the calls as one command costs the grantor one proposal
//! and one slot of a log entry for the whole batch; each call is still applied, and
//! answered, exactly as its own command would have been, at the batch's one time.

use super::admin::AdminError;
use super::{AllocatorState, StateCommand, StateOutput};
use crate::replica::Machine;
use leasehold_common::time::Nanos;

impl AllocatorState {
    pub(super) fn apply_lease_calls(
        &mut self,
        now: Nanos,
        calls: Vec<StateCommand>,
    ) -> StateOutput {
        let outputs = calls
            .into_iter()
            .map(|call| {
                if call.is_lease_call() {
                    self.apply(now, call)
                } else {
                    StateOutput::Refused(AdminError::Invalid(
                        "a lease batch carries acquires, reports and releases only".into(),
                    ))
                }
            })
            .collect();
        StateOutput::Batch(outputs)
    }
}
