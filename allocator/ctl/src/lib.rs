//! `leasectl`: the admins' command-line client of the allocator's admin service.

pub mod args;
mod backup;
mod budget;
mod certs;
pub mod client;
mod documents;
pub mod error;
mod ops;
pub mod output;
mod policy;
mod usage;

use args::{Cli, Command, OutputFormat};
use client::{Admin, Settings};
use error::CtlError;

/// Runs one command and prints its result; returns the process exit code.
pub async fn run(cli: Cli) -> i32 {
    let json = cli.output == OutputFormat::Json;
    let csv = cli.output == OutputFormat::Csv;
    // Refused before anything is sent: a change must not happen for output nobody can get.
    if csv && !matches!(cli.command, Command::Usage(_)) {
        let e = CtlError::Input("--output csv: only `usage` prints rows as CSV".into());
        eprintln!("leasectl: {e}");
        return e.exit_code();
    }
    match execute(cli).await {
        Ok(Some(out)) if csv => {
            print!("{}", out.csv.unwrap_or_default());
            0
        }
        Ok(Some(out)) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&out.json).unwrap_or_default()
                );
            } else {
                print!("{}", out.text);
            }
            0
        }
        Ok(None) => 0,
        Err(e) => {
            if json {
                let body = serde_json::json!({"error": e.to_string(), "exit_code": e.exit_code()});
                eprintln!("{body}");
            } else {
                eprintln!("leasectl: {e}");
            }
            e.exit_code()
        }
    }
}

async fn execute(cli: Cli) -> Result<Option<output::Rendered>, CtlError> {
    let json = cli.output == OutputFormat::Json;
    if let Command::Certs(c) = cli.command {
        return certs::run(c).map(Some);
    }
    let settings = Settings::resolve(&cli.conn)?;
    let mut admin = Admin::new(settings);
    let out = match cli.command {
        Command::Policy(c) => policy::run(&mut admin, c).await?,
        Command::Budget(c) => budget::run(&mut admin, c).await?,
        Command::Lease(c) => budget::run_lease(&mut admin, c).await?,
        Command::Cluster(c) => ops::run_cluster(&mut admin, c).await?,
        Command::Emergency(c) => ops::run_emergency(&mut admin, c).await?,
        Command::Audit(c) => {
            let follow = matches!(c, args::AuditCmd::Tail { follow: true, .. });
            let out = ops::run_audit(&mut admin, c, json).await?;
            if follow {
                return Ok(None);
            }
            out
        }
        Command::Status => ops::run_status(&mut admin).await?,
        Command::Usage(a) => usage::run(&mut admin, a).await?,
        Command::Backup { out } => backup::run_backup(&mut admin, &out).await?,
        Command::Restore { file, reason } => backup::run_restore(&mut admin, &file, reason).await?,
        Command::Certs(_) => unreachable!("handled before connecting"),
    };
    Ok(Some(out))
}
