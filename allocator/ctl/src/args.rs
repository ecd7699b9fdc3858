//! `leasectl`'s command line.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "leasectl",
    version,
    about = "Administer Leasehold allocator clusters: policies, budgets, leases, membership, emergencies, audit"
)]
pub struct Cli {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    /// Comma-separated values with a header row (commands that print rows: `usage`).
    Csv,
}

/// Where the cluster is and who we are. Flags win over environment variables, which win
/// over the config file (`~/.config/leasehold/leasectl.yaml` or `--config`).
#[derive(Args, Debug, Clone, Default)]
pub struct ConnArgs {
    /// Allocator address (`host:port`); any node works, followers point to the leader.
    #[arg(long, global = true, env = "LEASEHOLD_SERVER")]
    pub server: Option<String>,
    /// CA certificate (PEM) that signed the allocators' certificates.
    #[arg(long, global = true, env = "LEASEHOLD_CA")]
    pub ca: Option<PathBuf>,
    /// This admin's client certificate (PEM).
    #[arg(long, global = true, env = "LEASEHOLD_CERT")]
    pub cert: Option<PathBuf>,
    /// This admin's private key (PEM).
    #[arg(long, global = true, env = "LEASEHOLD_KEY")]
    pub key: Option<PathBuf>,
    /// Name the server certificate must carry (default: the host of `--server`).
    #[arg(long, global = true, env = "LEASEHOLD_SERVER_NAME")]
    pub server_name: Option<String>,
    /// Plaintext, no client certificate: only for a cluster started with `--insecure`.
    #[arg(long, global = true, env = "LEASEHOLD_INSECURE")]
    pub insecure: bool,
    /// Config file to read defaults from.
    #[arg(long, global = true, env = "LEASEHOLD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Per-request timeout, in milliseconds.
    #[arg(long, global = true, default_value_t = 5_000)]
    pub timeout_ms: u64,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Versioned policies.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Budget trees: who holds how much of a policy's credit.
    #[command(subcommand)]
    Budget(BudgetCmd),
    /// Live leases.
    #[command(subcommand)]
    Lease(LeaseCmd),
    /// Cluster membership and health.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Emergency switches for a policy.
    #[command(subcommand)]
    Emergency(EmergencyCmd),
    /// The audit trail of admin changes.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// The health of the cluster at a glance.
    Status,
    /// What holders reported per policy key (and holder) over a range or a calendar
    /// quota's period: admitted, refused, shaped, fail-open, stranded. For reconciling with
    /// billing; the output states its precision.
    Usage(UsageArgs),
    /// Write a consistent copy of a root cluster's state (policies and their versions,
    /// budgets, window and calendar-quota usage, emergency switches, audit) to a file.
    Backup {
        /// File to write; replaced whole only once the backup is complete.
        #[arg(long)]
        out: PathBuf,
    },
    /// Start a new root cluster (same name, no policies or credit yet) from a backup file.
    /// Leases outstanding when the backup was taken count as spent.
    Restore {
        /// A file written by `leasectl backup`.
        #[arg(long, short = 'f')]
        file: PathBuf,
        /// Why, for the audit trail.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Certificates for mutual TLS.
    #[command(subcommand)]
    Certs(CertsCmd),
}

#[derive(Args, Debug, Clone)]
pub struct UsageArgs {
    /// Policy id.
    #[arg(long)]
    pub policy: String,
    /// Only this policy key (e.g. `api:tenant=acme`); named as in `budget show`, since
    /// `--key` is the admin's private key.
    #[arg(long = "for-key")]
    pub for_key: Option<String>,
    /// One row per key and holder instead of per key.
    #[arg(long)]
    pub holder: bool,
    /// Start of the range (RFC 3339, inclusive; rounded down to the hour).
    #[arg(long, conflicts_with = "period")]
    pub since: Option<String>,
    /// End of the range (RFC 3339, exclusive; rounded up to the hour).
    #[arg(long, conflicts_with = "period")]
    pub until: Option<String>,
    /// A calendar_quota policy's period, in the policy's time zone.
    #[arg(long, value_enum)]
    pub period: Option<PeriodArg>,
    /// Most rows to print (0: the server's limit); totals always cover every row.
    #[arg(long, default_value_t = 0)]
    pub limit: u32,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum PeriodArg {
    Current,
    Previous,
}

#[derive(Subcommand, Debug)]
pub enum CertsCmd {
    /// Create a development CA and a certificate per identity, with the role encoded in it.
    Init {
        /// Directory to write `ca.pem` and `<role>-<name>.pem` / `-key.pem` into.
        #[arg(long)]
        out: PathBuf,
        /// Allocator node names, comma separated.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "global-1,global-2,global-3"
        )]
        allocators: Vec<String>,
        /// Agent (holder) names, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "agent-1")]
        agents: Vec<String>,
        /// Admin names, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "admin")]
        admins: Vec<String>,
        /// DNS names and IPs that allocators and agents serve on.
        #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1,::1")]
        hosts: Vec<String>,
        #[arg(long, default_value_t = 30)]
        valid_days: u32,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum PolicyCmd {
    /// Apply a policy document, or an envoyproxy/ratelimit file (stored as the document
    /// `ratelimit-<domain>`); prints the new version.
    Apply {
        /// Policy or envoyproxy/ratelimit YAML file, a directory of them (each `*.yaml` and
        /// `*.yml` file, checked all before any is applied), or `-` for standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Evaluate and count would-deny decisions, but admit.
        #[arg(long)]
        shadow: bool,
        /// When the version takes effect (RFC 3339); default now.
        #[arg(long)]
        effective_at: Option<String>,
        /// Show what would change without applying.
        #[arg(long)]
        dry_run: bool,
    },
    /// List policies.
    Ls,
    /// Show one policy (current version unless `--version`).
    Get {
        policy_id: String,
        #[arg(long)]
        version: Option<u64>,
    },
    /// Show what changes between two versions, or between the current one and a file.
    Diff {
        policy_id: String,
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        #[arg(long)]
        from: Option<u64>,
        #[arg(long)]
        to: Option<u64>,
    },
    /// Make a new version equal to an older one.
    Rollback {
        policy_id: String,
        #[arg(long = "to")]
        to_version: u64,
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum BudgetCmd {
    /// The budget tree of a policy with utilisation.
    Show {
        policy_id: String,
        /// Only this policy key (e.g. `api:tenant=acme`).
        #[arg(long = "for-key")]
        for_key: Option<String>,
    },
    /// Change a policy's rate and burst (a new policy version).
    Set {
        policy_id: String,
        /// Units per second (decimals allowed: 0.5).
        #[arg(long)]
        rate: String,
        #[arg(long)]
        burst: u64,
        #[arg(long)]
        dry_run: bool,
    },
    /// Split a policy's budget across children by weight: `--share eu=3 --share us=1`.
    Split {
        policy_id: String,
        #[arg(long = "share", value_name = "NAME=WEIGHT", required = true)]
        shares: Vec<String>,
        /// Share held back as an emergency reserve (`0.1` or `10%`).
        #[arg(long)]
        reserve: Option<String>,
        #[arg(long)]
        dry_run: bool,
    },
    /// Re-weight children by their measured demand.
    Rebalance {
        policy_id: String,
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum LeaseCmd {
    /// List live leases.
    Ls {
        #[arg(long)]
        holder: Option<String>,
        #[arg(long)]
        policy: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Revoke a lease: its holder stops spending and releases it.
    Revoke {
        lease_id: u64,
        #[arg(long, default_value = "")]
        reason: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Members, leader, term and replication progress.
    Status,
    /// Add a node as a learner.
    Add { node_id: u64, addr: String },
    /// Promote a learner to a voter.
    Promote { node_id: u64 },
    /// Remove a node from the cluster.
    Remove { node_id: u64 },
}

#[derive(Subcommand, Debug)]
pub enum EmergencyCmd {
    /// Admit everything for the policy (counted apart).
    FailOpen {
        #[arg(long)]
        policy: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Admit only priority ≥ `--min-priority`, at most `--rate` per second.
    Restricted {
        #[arg(long)]
        policy: String,
        #[arg(long)]
        min_priority: u32,
        #[arg(long)]
        rate: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Back to normal enforcement.
    Normal {
        #[arg(long)]
        policy: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum AuditCmd {
    /// The newest audit entries; `--follow` keeps printing new ones.
    Tail {
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: u32,
        #[arg(long, short = 'f')]
        follow: bool,
        #[arg(long)]
        actor: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
