//! The binaries the chaos tests run, built into this test's target directory (they belong
//! to other packages, so cargo does not build them for this one).

#[path = "../../../allocator/tests/binary_support/mod.rs"]
mod binary_support;

use binary_support::{profile_dir, workspace_binary};
use leasehold_simulations::chaos::procs::Binaries;

pub fn binaries() -> Binaries {
    workspace_binary("leasehold-allocator", "leasehold-allocator");
    workspace_binary("leasehold-agent", "leasehold-agent");
    Binaries::in_dir(&profile_dir()).unwrap()
}
