//! Load generator: Envoy RLS `ShouldRateLimit` over loopback gRPC against the real
//! `leasehold-agent --standalone --ratelimit-config` process.
//!
//! ```sh
//! cargo bench -p leasehold-agent --bench rls_load -- --in-flight 8,16,32 --connections 2
//! ```
//!
//! The generator starts the agent binary built alongside it (another with `--agent PATH`, or
//! none with `--addr IP:PORT` for an agent already running) and pins the agent to `--server-cpus` and itself to `--client-cpus` (as
//! `taskset -c` would), so the two never share a core or a tokio runtime. It is closed-loop:
//! `--in-flight` requests are always outstanding, spread over `--connections` HTTP/2
//! connections, on a current-thread runtime. Requests are gRPC-framed once up front; every
//! response is decoded and must carry one descriptor status, OK or OVER_LIMIT. Latency is
//! measured at the client from sending the headers to the end of the trailers.
//!
//! One decision is one request with one descriptor, over `--tenants` tenant values, each
//! allowed `--limit` requests per second (a low limit makes some answers OVER_LIMIT).

#[path = "rls_load/client.rs"]
mod client;
#[path = "rls_load/setup.rs"]
mod setup;

use client::{run_load, Load, Tally};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Command-line options, `--name value` each.
struct Opts {
    addr: Option<SocketAddr>,
    agent: PathBuf,
    in_flight: Vec<usize>,
    connections: usize,
    seconds: u64,
    warmup_ms: u64,
    tenants: usize,
    limit: u64,
    server_cpus: Vec<usize>,
    client_cpus: Vec<usize>,
}

fn parse_opts() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` itself passes `--bench`.
    const FLAGS: [&str; 11] = [
        "--addr",
        "--agent",
        "--in-flight",
        "--connections",
        "--seconds",
        "--warmup-ms",
        "--tenants",
        "--limit",
        "--server-cpus",
        "--client-cpus",
        "--bench",
    ];
    if let Some(unknown) = args
        .iter()
        .find(|a| a.starts_with("--") && !FLAGS.contains(&a.as_str()))
    {
        return Err(format!(
            "unknown flag `{unknown}`; known: {}",
            FLAGS.join(" ")
        ));
    }
    let value = |name: &str| -> Option<&str> {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1).map(String::as_str)
    };
    let num = |name: &str, default: u64| -> Result<u64, String> {
        value(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| format!("{name}: `{v}` is not a whole number"))
        })
    };
    let list = |name: &str, default: &str| -> Result<Vec<usize>, String> {
        let text = value(name).unwrap_or(default);
        if text.is_empty() || text == "none" {
            return Ok(Vec::new());
        }
        text.split(',')
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| format!("{name}: `{v}` is not a whole number"))
            })
            .collect()
    };
    let addr = match value("--addr") {
        Some(a) => Some(
            a.parse()
                .map_err(|_| format!("--addr: `{a}` is not ip:port"))?,
        ),
        None => None,
    };
    let opts = Opts {
        addr,
        agent: value("--agent")
            .unwrap_or(env!("CARGO_BIN_EXE_leasehold-agent"))
            .into(),
        in_flight: list("--in-flight", "1,4,8,16,24,32,64")?,
        connections: num("--connections", 2)? as usize,
        seconds: num("--seconds", 5)?,
        warmup_ms: num("--warmup-ms", 500)?,
        tenants: num("--tenants", 100)? as usize,
        limit: num("--limit", 1_000_000_000)?,
        server_cpus: list("--server-cpus", "0")?,
        client_cpus: list("--client-cpus", "1")?,
    };
    if opts.in_flight.is_empty() || opts.in_flight.contains(&0) {
        return Err("--in-flight: give one or more counts, each at least 1".into());
    }
    if opts.connections == 0 || opts.tenants == 0 || opts.seconds == 0 {
        return Err("--connections, --tenants and --seconds must be at least 1".into());
    }
    Ok(opts)
}

fn main() {
    // `cargo test --benches` runs every bench binary once; there is nothing to test here.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let opts = parse_opts().unwrap_or_else(|e| {
        eprintln!("rls_load: {e}");
        std::process::exit(2);
    });
    // The agent inherits this thread's CPU set when it is spawned; the generator then moves
    // to its own CPUs before any runtime thread exists.
    setup::pin(&opts.server_cpus);
    let agent = match opts.addr {
        Some(_) => None,
        None => {
            Some(setup::Agent::spawn(&opts.agent, opts.limit).expect("starting leasehold-agent"))
        }
    };
    setup::pin(&opts.client_cpus);
    let addr = opts
        .addr
        .unwrap_or_else(|| agent.as_ref().expect("spawned").addr);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!(
        "Envoy RLS over loopback gRPC at {addr}: {} connection(s), {} s per load after {} ms warm-up, \
         {} tenants at {}/s each; agent on CPUs {:?}, generator on CPUs {:?}",
        opts.connections,
        opts.seconds,
        opts.warmup_ms,
        opts.tenants,
        opts.limit,
        opts.server_cpus,
        opts.client_cpus,
    );
    println!(
        "| in flight | decisions/s | OK | OVER_LIMIT | errors | p50 | p99 | p99.9 | max \
         | agent CPU/decision | generator CPU/decision |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let agent_pid = agent.as_ref().map(setup::Agent::pid);
    let mut failed = false;
    for &in_flight in &opts.in_flight {
        let load = Load {
            addr,
            in_flight,
            connections: opts.connections.min(in_flight),
            warmup: Duration::from_millis(opts.warmup_ms),
            measure: Duration::from_secs(opts.seconds),
            tenants: opts.tenants,
        };
        let cpu_before = cpu_sample(agent_pid);
        let tally = runtime.block_on(run_load(&load));
        let cpu_after = cpu_sample(agent_pid);
        print_row(in_flight, &tally, cpu_before, cpu_after);
        failed |= tally.errors > 0;
    }
    drop(agent);
    if failed {
        eprintln!("rls_load: some responses failed (see the errors column)");
        std::process::exit(1);
    }
}

/// On-CPU nanoseconds so far of the agent (when this generator started it) and of the
/// generator itself.
fn cpu_sample(agent_pid: Option<u32>) -> (Option<u64>, Option<u64>) {
    (
        agent_pid.and_then(setup::cpu_ns),
        setup::cpu_ns(std::process::id()),
    )
}

type CpuSample = (Option<u64>, Option<u64>);

fn print_row(in_flight: usize, t: &Tally, before: CpuSample, after: CpuSample) {
    let ms = |ns: u64| format!("{:.3} ms", ns as f64 / 1e6);
    let per_decision = |b: Option<u64>, a: Option<u64>| match (b, a) {
        (Some(b), Some(a)) if t.answers_all > 0 => {
            format!("{:.1} µs", (a - b) as f64 / 1e3 / t.answers_all as f64)
        }
        _ => "n/a".into(),
    };
    println!(
        "| {in_flight} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        t.per_second(),
        t.ok,
        t.over_limit,
        t.errors,
        ms(t.percentile_ns(50, 100)),
        ms(t.percentile_ns(99, 100)),
        ms(t.percentile_ns(999, 1000)),
        ms(t.max_ns()),
        per_decision(before.0, after.0),
        per_decision(before.1, after.1),
    );
    if let Some(e) = &t.first_error {
        eprintln!("first error: {e}");
    }
}
