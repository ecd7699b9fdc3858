//! The cluster's lease-signing key file: loaded, or made once and shared by every node.

use super::ServerError;
use leasehold_common::lease::LeaseSigner;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Creates `dir` (and its parents) readable by this user only: it holds the replicated
/// state and the lease-signing key. An existing directory keeps its mode.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Loads the cluster's lease-signing key, creating it (mode 0600) on first start. Nodes that
/// share one key file may start together: the key appears under its name complete or not at
/// all, and a node that loses the race to create it loads the winner's.
pub fn signing_key(path: &Path) -> Result<LeaseSigner, ServerError> {
    let err = |reason: String| ServerError::SigningKey {
        path: path.display().to_string(),
        reason,
    };
    match read_signing_key(path) {
        Ok(signer) => signer.map_err(err),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let signer = LeaseSigner::generate(&ring::rand::SystemRandom::new())
                .map_err(|e| err(e.to_string()))?;
            if let Some(dir) = path.parent() {
                private_dir(dir).map_err(|e| err(e.to_string()))?;
            }
            match publish_private(path, signer.to_pkcs8()) {
                Ok(()) => Ok(signer),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_signing_key(path)
                    .map_err(|e| err(e.to_string()))?
                    .map_err(err),
                Err(e) => Err(err(e.to_string())),
            }
        }
        Err(e) => Err(err(e.to_string())),
    }
}

fn read_signing_key(path: &Path) -> std::io::Result<Result<LeaseSigner, String>> {
    // A PKCS#8 Ed25519 key is under a hundred bytes; anything far larger is not one.
    let bytes = leasehold_common::read::read_capped(path, 64 * 1024)?;
    Ok(LeaseSigner::from_pkcs8(&bytes).map_err(|e| e.to_string()))
}

/// Writes `bytes` durably to a private temporary file beside `path`, then links it in under
/// `path`: the link fails with `AlreadyExists` if another process got there first, and a
/// crash leaves either no key or a whole one, never an empty file that blocks every restart.
fn publish_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    // Unique per process and per call, so that nodes in one process (tests, the demo) and
    // nodes in several processes never write into each other's temporary file.
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".tmp-{}-{call}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp_name);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let written = opts.open(&tmp).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()
    });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    linked?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_starting_together_all_load_the_one_key_that_was_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys").join("lease-key.p8");
        let barrier = std::sync::Barrier::new(8);
        let keys: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        signing_key(&path).unwrap().public_key().to_vec()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            keys.iter().all(|k| *k == keys[0]),
            "every node signs with one key"
        );
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("lease-key.p8")]);
        assert_eq!(signing_key(&path).unwrap().public_key(), &keys[0][..]);
    }

    #[test]
    fn a_key_file_that_is_not_a_key_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease-key.p8");
        std::fs::write(&path, b"").unwrap();
        let Err(err) = signing_key(&path) else {
            panic!("an empty key file is refused");
        };
        assert!(err.to_string().contains("lease-key.p8"), "{err}");
    }
}
