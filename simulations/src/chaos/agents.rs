//! `leasehold-agent` processes: mutual TLS to the cluster, optionally a state file, a
//! network namespace of their own or a faked wall clock (libfaketime).

use super::error::ChaosError;
use super::http::ready;
use super::procs::{free_port, Binaries, Proc};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long an agent may take to become ready, in milliseconds.
const AGENT_READY_WAIT_MS: u64 = 20_000;

/// How one agent runs.
#[derive(Clone, Debug, Default)]
pub struct AgentSpec {
    /// Holder id; also its certificate's name.
    pub name: String,
    pub state_file: bool,
    /// Network namespace to run in, with the address the agent listens on inside it.
    pub netns: Option<NetnsPlace>,
    /// libfaketime's shared library, when this agent's wall clock is faked.
    pub faketime_lib: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct NetnsPlace {
    pub name: String,
    pub agent_ip: String,
}

/// A running (or restartable) agent.
pub struct Agent {
    pub spec: AgentSpec,
    pub http: SocketAddr,
    grpc_port: u16,
    dir: PathBuf,
    allocators: Vec<String>,
    pub proc: Option<Proc>,
    pub stopped: bool,
    /// File the faked clock offset is read from (libfaketime's FAKETIME_TIMESTAMP_FILE).
    pub faketime_file: PathBuf,
}

impl Agent {
    pub fn new(dir: &Path, spec: AgentSpec, allocators: &[String]) -> Result<Agent, ChaosError> {
        let ip = spec
            .netns
            .as_ref()
            .map_or("127.0.0.1".to_string(), |n| n.agent_ip.clone());
        let http_port = free_port()?;
        let http = format!("{ip}:{http_port}")
            .parse()
            .map_err(|e| ChaosError::process(&spec.name, format!("address: {e}")))?;
        let allocators = allocators.to_vec();
        let faketime_file = dir.join(format!("{}.faketime", spec.name));
        std::fs::write(&faketime_file, "+0s\n").map_err(ChaosError::io("faketime file"))?;
        Ok(Agent {
            spec,
            http,
            grpc_port: free_port()?,
            dir: dir.to_path_buf(),
            allocators,
            proc: None,
            stopped: false,
            faketime_file,
        })
    }

    fn command(&self, bins: &Binaries) -> Command {
        let ip = self.http.ip();
        let c = self.dir.join("certs");
        let name = &self.spec.name;
        let mut cmd = match &self.spec.netns {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", &ns.name]).arg(&bins.agent);
                cmd
            }
            None => Command::new(&bins.agent),
        };
        if self.spec.netns.is_some() {
            // Only the generator on the host reaches the namespace's address.
            cmd.arg("--listen-insecure");
        }
        cmd.args(["--holder-id", name])
            .args(["--grpc-addr", &format!("{ip}:{}", self.grpc_port)])
            .args(["--http-addr", &self.http.to_string()])
            .arg("--ca")
            .arg(c.join("ca.pem"))
            .arg("--cert")
            .arg(c.join(format!("agent-{name}.pem")))
            .arg("--key")
            .arg(c.join(format!("agent-{name}-key.pem")));
        for a in &self.allocators {
            cmd.args(["--allocator", a]);
        }
        if self.spec.state_file {
            cmd.arg("--state-file")
                .arg(self.dir.join(format!("{name}.state")));
        }
        if let Some(lib) = &self.spec.faketime_lib {
            // The offset is re-read from the file, so a step needs no restart; monotonic
            // clocks are left alone, as a wall-clock step leaves them.
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME_TIMESTAMP_FILE", &self.faketime_file)
                .env("FAKETIME_NO_CACHE", "1")
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        cmd.env("RUST_LOG", "info");
        cmd
    }

    /// Starts the agent and waits until it has its policies.
    pub fn launch(&mut self, bins: &Binaries) -> Result<(), ChaosError> {
        let log = self.dir.join(format!("{}.log", self.spec.name));
        self.proc = Some(Proc::spawn(&self.spec.name, self.command(bins), &log)?);
        self.stopped = false;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(AGENT_READY_WAIT_MS) {
            if ready(self.http) {
                return Ok(());
            }
            if let Some(status) = self.proc.as_mut().and_then(Proc::exited) {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(ChaosError::process(
                    &self.spec.name,
                    format!("exited at start ({status}): {log}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(ChaosError::Timeout {
            what: format!("agent {} to become ready", self.spec.name),
            waited_ms: AGENT_READY_WAIT_MS,
        })
    }

    /// Sets the faked wall clock's offset from the real one, in seconds.
    pub fn set_clock_offset_s(&self, offset_s: i64) -> Result<(), ChaosError> {
        std::fs::write(&self.faketime_file, format!("{offset_s:+}s\n"))
            .map_err(ChaosError::io("faketime file"))
    }
}
