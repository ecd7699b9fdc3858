//! Child processes for the Envoy tests: each writes its output to a log file, never
//! outlives the test, and shows its log when the test fails.

use super::http1;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started agent has to answer `/readyz` with 200: a debug build on a busy
/// two-core machine can take a few seconds.
pub const AGENT_READY_WAIT_MS: u64 = 30_000;
/// Pause between two readiness probes.
pub const POLL_INTERVAL_MS: u64 = 50;

/// `N` distinct loopback ports nothing listens on right now: all bound by the OS at once,
/// then released for the processes under test to take.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("binding a loopback port"))
        .collect();
    std::array::from_fn(|i| {
        listeners[i]
            .local_addr()
            .expect("a bound listener's address")
            .port()
    })
}

/// A child process whose standard output and error go to `log`. Dropping it kills and
/// reaps the process; if the test is failing at that moment, the log is printed, since
/// a temporary directory is gone once the test ends.
pub struct Logged {
    name: String,
    log: PathBuf,
    child: Child,
}

impl Logged {
    /// Starts `cmd` with its output in `log`; `name` labels the printed log.
    pub fn spawn(mut cmd: Command, name: &str, log: &Path) -> Logged {
        let out = File::create(log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let err = out.try_clone().expect("a second handle on the log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({:?}): {e}", cmd.get_program()));
        Logged {
            name: name.to_string(),
            log: log.to_path_buf(),
            child,
        }
    }

    /// The log written so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `ready` until it answers `Ok`, for at most `wait_ms`. Panics with the last
    /// refusal and the log when the time is up or the process exits first: a process that
    /// died on a bad configuration is reported at once, not after the whole wait.
    pub fn wait_ready(&mut self, wait_ms: u64, mut ready: impl FnMut() -> Result<(), String>) {
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        loop {
            let why = match ready() {
                Ok(()) => return,
                Err(why) => why,
            };
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before it was ready: {why}\n--- {} log ---\n{}",
                    self.name,
                    self.name,
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready within {wait_ms} ms: {why}\n--- {} log ---\n{}",
                self.name,
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(POLL_INTERVAL_MS));
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- {} log ({}) ---\n{}",
                self.name,
                self.log.display(),
                self.log()
            );
        }
    }
}

/// A `leasehold-agent` process on free loopback ports.
pub struct Agent {
    pub grpc_port: u16,
    pub http_port: u16,
    process: Logged,
}

impl Agent {
    /// Starts the agent `binary` with `args` (its rules, `--standalone` or `--allocator`,
    /// ...) plus its listen addresses, logging to `dir/<name>.log`, and returns once its
    /// `/readyz` answers 200.
    pub fn start(binary: &Path, dir: &Path, name: &str, args: &[&str]) -> Agent {
        let [grpc_port, http_port] = free_ports();
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .arg("--grpc-addr")
            .arg(format!("127.0.0.1:{grpc_port}"))
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{http_port}"))
            .env("RUST_BACKTRACE", "0")
            .env("NO_COLOR", "1");
        let mut process = Logged::spawn(cmd, name, &dir.join(format!("{name}.log")));
        process.wait_ready(AGENT_READY_WAIT_MS, || {
            let r = http1::get(http_port, "/readyz", &[]).map_err(|e| e.to_string())?;
            match r.status {
                200 => Ok(()),
                s => Err(format!("/readyz answered {s}: {}", r.body)),
            }
        });
        Agent {
            grpc_port,
            http_port,
            process,
        }
    }

    pub fn log(&self) -> String {
        self.process.log()
    }
}
