//! Hot reload of `--ratelimit-config`, as envoyproxy/ratelimit reloads its runtime
//! directory: a changed, added or removed file, a directory or symlink swapped in its place
//! (how Kubernetes updates a mounted ConfigMap: `..data` is re-pointed at a new directory),
//! or SIGHUP loads the configuration again and installs it in one step.
//!
//! The files are compared by what `stat` says after following symlinks (the resolved
//! directory, each file's name, size, modification time and inode), every
//! [`POLL_INTERVAL_MS`] milliseconds, so no file-system notification API is needed and
//! a swapped symlink is seen like an edited file. A configuration that does not load is
//! refused with an error log line naming the problem, and the rules in force keep serving;
//! it is tried again when the files change again or on SIGHUP.

use crate::engine::Engine;
use leasehold_common::policy::envoy::{EnvoyConfig, EnvoyError, ENVOY_FILE_LEN_MAX};
use leasehold_common::read::read_text_capped;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the files are compared with what was last loaded.
pub const POLL_INTERVAL_MS: u64 = 1_000;

/// Reads `path`: one file, or every `*.yaml` and `*.yml` file directly in a directory.
pub fn load(path: &Path) -> Result<EnvoyConfig, EnvoyError> {
    if path.is_dir() {
        return EnvoyConfig::load_dir(path);
    }
    let text = read_text_capped(path, ENVOY_FILE_LEN_MAX as u64).map_err(|e| EnvoyError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    EnvoyConfig::from_yaml(&path.display().to_string(), &text)
}

/// What `stat` says about the configuration: equal fingerprints, same files.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    resolved: Option<PathBuf>,
    files: Vec<(PathBuf, u64, i64, i64, u64)>,
}

fn stat_of(path: &Path) -> Option<(PathBuf, u64, i64, i64, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((path.to_owned(), m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// The fingerprint of `path` now; unreadable parts count as absent, so that their return
/// is a change too.
fn fingerprint(path: &Path) -> Fingerprint {
    let resolved = std::fs::canonicalize(path).ok();
    let mut files = Vec::new();
    match std::fs::read_dir(path) {
        Ok(entries) => {
            for entry in entries.flatten() {
                files.extend(stat_of(&entry.path()));
            }
            files.sort();
        }
        Err(_) => files.extend(stat_of(path)),
    }
    Fingerprint { resolved, files }
}

/// Loads `path` into `engine`, logging the outcome; the rules in force stay on a failure.
pub fn reload(engine: &Engine, path: &Path, why: &str) -> bool {
    let installed = load(path).map_err(|e| e.to_string()).and_then(|config| {
        let domains: Vec<String> = config.domains().map(str::to_owned).collect();
        engine
            .reload_envoy(config)
            .map(|()| domains)
            .map_err(|e| e.to_string())
    });
    match installed {
        Ok(domains) => {
            tracing::info!(path = %path.display(), why, ?domains, "ratelimit config reloaded");
            true
        }
        Err(error) => {
            tracing::error!(
                path = %path.display(),
                why,
                %error,
                "ratelimit config refused; the rules loaded before keep serving"
            );
            false
        }
    }
}

/// Watches `path` until the process ends: reloads when its files change or on SIGHUP.
/// Without a path, SIGHUP is only logged (it must not end the agent).
pub fn spawn_watch(engine: Arc<Engine>, path: Option<PathBuf>) -> std::io::Result<()> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let Some(path) = path else {
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: no --ratelimit-config to reload");
            }
        });
        return Ok(());
    };
    tokio::spawn(async move {
        let mut seen = fingerprint(&path);
        let mut tick = tokio::time::interval(Duration::from_millis(POLL_INTERVAL_MS));
        loop {
            let why = tokio::select! {
                _ = tick.tick() => "files changed",
                _ = hup.recv() => "SIGHUP",
            };
            let now = fingerprint(&path);
            if why == "SIGHUP" || now != seen {
                seen = now;
                reload(&engine, &path, why);
            }
        }
    });
    Ok(())
}
