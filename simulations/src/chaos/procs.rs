//! The binaries under test as OS processes: where they are, starting them with their log in
//! a file, and the signals a fault sends (SIGKILL, SIGSTOP, SIGCONT, SIGTERM).

use super::error::ChaosError;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The release-style binaries, as cargo builds them into one target directory.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub allocator: PathBuf,
    pub agent: PathBuf,
}

impl Binaries {
    /// The binaries in `dir`, or which one is missing.
    pub fn in_dir(dir: &Path) -> Result<Binaries, ChaosError> {
        let find = |name: &str| {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(ChaosError::MissingBinary {
                    path: path.display().to_string(),
                })
            }
        };
        Ok(Binaries {
            allocator: find("leasehold-allocator")?,
            agent: find("leasehold-agent")?,
        })
    }

    /// The directory this program was started from (cargo puts every binary of a
    /// workspace side by side).
    pub fn beside_this_program() -> Result<Binaries, ChaosError> {
        let me = std::env::current_exe().map_err(ChaosError::io("locating this program"))?;
        let dir = me.parent().unwrap_or(Path::new("."));
        // Test binaries live one level down, in `deps/`.
        let dir = if dir.ends_with("deps") {
            dir.parent().unwrap_or(dir)
        } else {
            dir
        };
        Binaries::in_dir(dir)
    }
}

/// A signal a fault sends to a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Kill,
    Stop,
    Cont,
    Term,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::Kill => libc::SIGKILL,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
            Signal::Term => libc::SIGTERM,
        }
    }
}

/// A child process, killed and reaped when dropped so a failed run leaves none behind.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    child: Child,
}

impl Proc {
    /// Starts `cmd` with its standard output (where the binaries log) and error output
    /// appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Proc, ChaosError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(ChaosError::io(format!("log file {}", log.display())))?;
        let err = file
            .try_clone()
            .map_err(ChaosError::io(format!("log file {}", log.display())))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| ChaosError::process(name, format!("cannot start: {e}")))?;
        Ok(Proc {
            name: name.to_string(),
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, signal: Signal) -> Result<(), ChaosError> {
        // SAFETY: kill(2) on our own child's pid; the child is not reaped before `drop`
        // or `wait_exit`, so the pid cannot have been reused.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal.number()) };
        if rc == 0 {
            Ok(())
        } else {
            let e = std::io::Error::last_os_error();
            Err(ChaosError::process(&self.name, format!("{signal:?}: {e}")))
        }
    }

    /// Whether the process has exited (and its exit status, reaped).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL, then reaps it.
    pub fn kill(mut self) {
        let _ = self.signal(Signal::Cont);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and waits up to `wait_ms` for it to exit; SIGKILL after that. Whether it
    /// exited on its own.
    pub fn terminate(mut self, wait_ms: u64) -> bool {
        let _ = self.signal(Signal::Cont);
        let _ = self.signal(Signal::Term);
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on right now (a lost race shows as a process that
/// fails to start).
pub fn free_port() -> Result<u16, ChaosError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(ChaosError::io("finding a free loopback port"))
}

/// A run's directory: one the operator named (kept, for its logs), or a temporary one.
pub enum WorkDir {
    Kept(PathBuf),
    Temp(tempfile::TempDir),
}

impl WorkDir {
    pub fn new(named: Option<&Path>) -> Result<WorkDir, ChaosError> {
        match named {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(ChaosError::io(format!("creating {}", dir.display())))?;
                Ok(WorkDir::Kept(dir.to_path_buf()))
            }
            None => tempfile::tempdir()
                .map(WorkDir::Temp)
                .map_err(ChaosError::io("temporary directory")),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            WorkDir::Kept(p) => p,
            WorkDir::Temp(t) => t.path(),
        }
    }
}
