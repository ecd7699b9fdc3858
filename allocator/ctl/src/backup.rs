//! `leasectl backup` and `leasectl restore`.

use super::client::Admin;
use super::error::CtlError;
use super::output::Rendered;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::BACKUP_LEN_MAX;
use serde_json::json;
use std::io::Write;
use std::path::Path;

pub async fn run_backup(admin: &mut Admin, out: &Path) -> Result<Rendered, CtlError> {
    let b = admin
        .call(|mut c| async move { c.backup(pb::BackupRequest {}).await })
        .await?;
    write_whole(out, &b.backup)?;
    let text = format!(
        "backup of cluster {} ({} policies, taken at {} ms) written to {} ({} bytes)\n",
        b.cluster,
        b.policies,
        b.taken_at_ms,
        out.display(),
        b.backup.len()
    );
    Ok(Rendered::new(
        text,
        json!({"cluster": b.cluster, "policies": b.policies, "taken_at_ms": b.taken_at_ms,
               "file": out.display().to_string(), "bytes": b.backup.len()}),
    ))
}

pub async fn run_restore(
    admin: &mut Admin,
    file: &Path,
    reason: String,
) -> Result<Rendered, CtlError> {
    let backup = leasehold_common::read::read_capped(file, BACKUP_LEN_MAX as u64)
        .map_err(|e| CtlError::Input(format!("{}: {e}", file.display())))?;
    let req = pb::RestoreRequest { backup, reason };
    let r = admin
        .call(|mut c| {
            let req = req.clone();
            async move { c.restore(req).await }
        })
        .await?;
    let text = format!(
        "restored {} policies; {} outstanding leases ({} units) written off as spent; epoch {}\n",
        r.policies, r.leases_written_off, r.units_written_off, r.epoch
    );
    Ok(Rendered::new(
        text,
        json!({"policies": r.policies, "leases_written_off": r.leases_written_off,
               "units_written_off": r.units_written_off, "epoch": r.epoch}),
    ))
}

/// Writes `bytes` beside `path` and renames over it once they are on disk, so an
/// interrupted backup never leaves a truncated file under the name. Owner-only: a backup
/// holds every tenant's usage.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), CtlError> {
    let failed = |e: std::io::Error| CtlError::Output(format!("{}: {e}", path.display()));
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = std::path::PathBuf::from(tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(&tmp).map_err(failed)?;
    f.write_all(bytes).map_err(failed)?;
    f.sync_all().map_err(failed)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(failed)
}
