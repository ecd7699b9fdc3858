//! Running the compose example of `deploy/compose` from a test: building its images, bringing
//! it up under a project name of its own, reaching its containers, and taking it down again
//! whatever happens.

#![allow(dead_code)]

pub mod traffic;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The repository's root (this crate lives one level below it).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn runs(cmd: &mut Command) -> bool {
    cmd.output().map(|o| o.status.success()).unwrap_or(false)
}

/// `docker compose` (v2) or `docker-compose` (v1), whichever this machine has.
fn compose_command() -> Option<Vec<String>> {
    if runs(Command::new("docker").args(["compose", "version"])) {
        Some(vec!["docker".into(), "compose".into()])
    } else if runs(Command::new("docker-compose").arg("version")) {
        Some(vec!["docker-compose".into()])
    } else {
        None
    }
}

/// The envoy binary the gateways' image is built from: `LEASEHOLD_ENVOY`, `envoy` on the
/// PATH, or the one `.ci/run` installs.
fn envoy_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LEASEHOLD_ENVOY") {
        return Some(PathBuf::from(p));
    }
    let out = Command::new("bash")
        .args(["-c", "command -v envoy || find \"${XDG_CACHE_HOME:-$HOME/.cache}/leasehold/envoy-1.40-venv/lib\" -path '*site-packages/envoy/*' -type f -name envoy -perm -u+x 2>/dev/null | head -n 1"])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// What the test needs from the machine, or why it cannot run here.
pub struct Tools {
    compose: Vec<String>,
    pub envoy: PathBuf,
}

pub fn tools() -> Result<Tools, String> {
    if !runs(Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"])) {
        return Err("docker is not installed or its daemon cannot be reached".into());
    }
    let compose = compose_command().ok_or("neither `docker compose` nor `docker-compose` runs")?;
    let envoy = envoy_binary()
        .ok_or("no envoy binary (set LEASEHOLD_ENVOY, or run .ci/run once to install it)")?;
    Ok(Tools { compose, envoy })
}

fn checked(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `docker ARGS`, which must succeed; its standard output.
pub fn docker(args: &[&str]) -> String {
    String::from_utf8_lossy(&checked(Command::new("docker").args(args)).stdout)
        .trim()
        .to_string()
}

/// The base image the Dockerfiles start from: `debian:bookworm-slim` when this machine has
/// it, else one made with `deploy/docker/make-base-image.sh` (no registry needed), or why
/// neither is possible.
pub fn base_image() -> Result<String, String> {
    if runs(Command::new("docker").args(["image", "inspect", "debian:bookworm-slim"])) {
        return Ok("debian:bookworm-slim".into());
    }
    let tag = "leasehold/debian:bookworm-minbase";
    let out = Command::new(repo().join("deploy/docker/make-base-image.sh"))
        .arg(tag)
        .output()
        .map_err(|e| format!("make-base-image.sh: {e}"))?;
    if out.status.success() {
        Ok(tag.into())
    } else {
        Err(format!(
            "no debian:bookworm-slim image and make-base-image.sh could not make one: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Builds the three images under `tag` from the binaries in `bin_dir`.
pub fn build_images(base: &str, bin_dir: &Path, envoy: &Path, tag: &str) {
    checked(
        Command::new(repo().join("deploy/docker/build-images.sh"))
            .env("BASE", base)
            .env("LEASEHOLD_BIN_DIR", bin_dir)
            .env("LEASEHOLD_ENVOY", envoy)
            .env("IMAGE_TAG", tag),
    );
}

/// A compose project of `deploy/compose`, taken down with its volumes when dropped.
pub struct Compose {
    command: Vec<String>,
    pub project: String,
    tag: String,
}

impl Compose {
    pub fn new(tools: &Tools, project: &str, tag: &str) -> Compose {
        Compose {
            command: tools.compose.clone(),
            project: project.into(),
            tag: tag.into(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .arg("-p")
            .arg(&self.project)
            .arg("-f")
            .arg(repo().join("deploy/compose/docker-compose.yaml"))
            .env("LEASEHOLD_IMAGE", format!("leasehold:{}", self.tag))
            .env(
                "LEASEHOLD_ENVOY_IMAGE",
                format!("leasehold-envoy:{}", self.tag),
            )
            .env(
                "LEASEHOLD_PROMETHEUS_IMAGE",
                format!("leasehold-prometheus:{}", self.tag),
            );
        cmd
    }

    /// `compose ARGS`, which must succeed; its standard output.
    pub fn run(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&checked(self.command().args(args)).stdout)
            .trim()
            .to_string()
    }

    /// The container of `service`.
    pub fn container(&self, service: &str) -> String {
        let id = self.run(&["ps", "-q", service]);
        assert!(!id.is_empty(), "no container for {service}");
        id
    }

    /// `service`'s address on the network `net` of this project.
    pub fn ip(&self, service: &str, net: &str) -> String {
        let format = format!(
            "{{{{(index .NetworkSettings.Networks \"{}_{net}\").IPAddress}}}}",
            self.project
        );
        docker(&["inspect", "-f", &format, &self.container(service)])
    }

    /// Waits for the one-shot `service` to exit, and returns its exit code.
    pub fn wait_exit(&self, service: &str, within: Duration) -> i64 {
        let id = self.container(service);
        super::process_support::wait_until(within, Duration::from_millis(500), || {
            let state = docker(&[
                "inspect",
                "-f",
                "{{.State.Status}} {{.State.ExitCode}}",
                &id,
            ]);
            match state.split_once(' ') {
                Some(("exited", code)) => Ok(code.parse::<i64>().unwrap()),
                _ => Err(format!("{service} still {state}")),
            }
        })
    }

    /// The answer to `GET path` on `port` inside `service`'s network namespace (the images
    /// carry no HTTP client; bash's /dev/tcp is enough). HTTP/1.0, so no chunked body.
    pub fn http_inside(&self, service: &str, port: u16, path: &str) -> Result<String, String> {
        let script = format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET {path} HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3 && timeout 3 cat <&3"
        );
        let out = Command::new("docker")
            .args(["exec", &self.container(service), "bash", "-c", &script])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Logs of every service, for a failing test.
    pub fn logs(&self) -> String {
        let out = self
            .command()
            .args(["logs", "--no-color", "--tail", "60"])
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        let _ = self
            .command()
            .args(["down", "-v", "--remove-orphans", "-t", "5"])
            .output();
    }
}
