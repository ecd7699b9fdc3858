//! `leasectl`: administer Leasehold allocator clusters.

use clap::Parser;
use leasehold_allocator::ctl::{args::Cli, run};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let code = run(Cli::parse()).await;
    std::process::exit(code);
}
