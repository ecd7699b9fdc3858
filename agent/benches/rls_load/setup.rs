//! Starting the agent process under test and pinning threads to CPUs.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the agent may take to accept connections after it is started.
const AGENT_READY_MS: u64 = 10_000;

/// Restricts the calling thread (and whatever it spawns afterwards: threads, child
/// processes) to `cpus`, as `taskset -c` does. An empty list leaves it unpinned.
pub fn pin(cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    // SAFETY: `set` is a plain bit set owned by this frame; the call only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(
        rc,
        0,
        "pinning to CPUs {cpus:?}: {}",
        std::io::Error::last_os_error()
    );
}

/// On-CPU time of every thread of process `pid` so far, in nanoseconds (Linux
/// `/proc/PID/task/*/schedstat`); `None` where that is not readable.
///
/// CPU time per decision shows what a request costs each side even when other work on
/// the machine steals cores and makes wall-clock rates noisy.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// A `leasehold-agent --standalone` child process, killed when dropped.
pub struct Agent {
    child: Child,
    /// Its gRPC listener.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Agent {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts the agent binary `exe` with one rule: every `tenant` value of domain `edge`
    /// may make `limit` requests per second. Returns once it accepts connections.
    pub fn spawn(exe: &Path, limit: u64) -> std::io::Result<Agent> {
        let dir = tempfile::tempdir()?;
        let limits = dir.path().join("limits.yaml");
        std::fs::write(
            &limits,
            format!(
                "domain: edge\ndescriptors:\n  - key: tenant\n    \
                 rate_limit: {{unit: second, requests_per_unit: {limit}}}\n"
            ),
        )?;
        let addr = free_port()?;
        let child = Command::new(exe)
            .arg("--standalone")
            .arg("--ratelimit-config")
            .arg(&limits)
            .arg("--grpc-addr")
            .arg(addr.to_string())
            .arg("--http-addr")
            .arg("127.0.0.1:0")
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .spawn()?;
        let mut agent = Agent {
            child,
            addr,
            _dir: dir,
        };
        agent.wait_ready()?;
        Ok(agent)
    }

    fn wait_ready(&mut self) -> std::io::Result<()> {
        let deadline = Instant::now() + Duration::from_millis(AGENT_READY_MS);
        loop {
            if TcpStream::connect(self.addr).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(std::io::Error::other(format!(
                    "leasehold-agent exited early: {status}"
                )));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "leasehold-agent not accepting on {} after {AGENT_READY_MS} ms",
                    self.addr
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port that was free a moment ago (the agent binds it right after).
fn free_port() -> std::io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}
