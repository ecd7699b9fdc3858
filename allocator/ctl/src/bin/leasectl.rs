//! `leasectl`: administer Leasehold allocator clusters.

use clap::Parser;
use leasehold_ctl::{args::Cli, run};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let code = run(Cli::parse()).await;
    std::process::exit(code);
}
