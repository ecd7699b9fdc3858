//! Writing a [`DevPki`] to a directory: fixed file names, private keys readable by the owner
//! only, and no silent overwrites.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::identity::PeerIdentity;
use super::pki::DevPki;

/// File name of the CA certificate.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key.
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// File name of an identity's certificate: `<role>-<name>.pem`.
pub fn cert_file_name(identity: &PeerIdentity) -> String {
    format!("{}-{}.pem", identity.role, identity.name)
}

/// File name of an identity's private key: `<role>-<name>-key.pem`.
pub fn key_file_name(identity: &PeerIdentity) -> String {
    format!("{}-{}-key.pem", identity.role, identity.name)
}

/// Why a PKI could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PkiFilesError {
    /// A file exists and overwriting was not asked for. Nothing was written.
    #[error("`{}` already exists; nothing was written (use --force, or `force: true`, to overwrite)", path.display())]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// Two identities map to the same file name (e.g. agent `a` and agent `a-key`).
    #[error("{first} and {second} would both write `{file}`; rename one")]
    NameClash {
        /// The shared file name.
        file: String,
        /// The first identity (or `CA`).
        first: String,
        /// The second identity.
        second: String,
    },
    /// An I/O error on this path.
    #[error("writing `{}`: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

struct PlannedFile<'a> {
    name: String,
    owner: String,
    contents: &'a str,
    secret: bool,
}

impl DevPki {
    /// Writes `ca.pem`, `ca-key.pem` and `<role>-<name>.pem` / `<role>-<name>-key.pem` for
    /// every issued certificate into `dir` (created with mode 0700 if missing).
    ///
    /// Private keys get mode 0600 and certificates 0644 on Unix, whatever the umask. Without
    /// `force`, if any target file exists nothing is written. With `force`, existing files
    /// are replaced by new ones (never rewritten in place, so an old key file's looser mode
    /// cannot survive). Each file is synced to disk. Returns the paths written, in order.
    pub fn write_to(&self, dir: &Path, force: bool) -> Result<Vec<PathBuf>, PkiFilesError> {
        let plan = self.plan()?;
        create_dir(dir)?;
        if !force {
            for file in &plan {
                let path = dir.join(&file.name);
                if fs::symlink_metadata(&path).is_ok() {
                    return Err(PkiFilesError::Exists { path });
                }
            }
        }
        let mut written = Vec::with_capacity(plan.len());
        for file in &plan {
            let path = dir.join(&file.name);
            if force {
                remove_if_present(&path)?;
            }
            write_new(&path, file.contents, file.secret)?;
            written.push(path);
        }
        sync_dir(dir)?;
        Ok(written)
    }

    fn plan(&self) -> Result<Vec<PlannedFile<'_>>, PkiFilesError> {
        let mut plan = vec![
            PlannedFile {
                name: CA_CERT_FILE.to_owned(),
                owner: "CA".to_owned(),
                contents: &self.ca_cert_pem,
                secret: false,
            },
            PlannedFile {
                name: CA_KEY_FILE.to_owned(),
                owner: "CA".to_owned(),
                contents: &self.ca_key_pem,
                secret: true,
            },
        ];
        for cert in &self.certs {
            let owner = cert.identity.to_string();
            plan.push(PlannedFile {
                name: cert_file_name(&cert.identity),
                owner: owner.clone(),
                contents: &cert.cert_pem,
                secret: false,
            });
            plan.push(PlannedFile {
                name: key_file_name(&cert.identity),
                owner,
                contents: &cert.key_pem,
                secret: true,
            });
        }
        let mut seen: HashSet<&str> = HashSet::with_capacity(plan.len());
        for (i, file) in plan.iter().enumerate() {
            if !seen.insert(&file.name) {
                let first = plan[..i]
                    .iter()
                    .find(|f| f.name == file.name)
                    .map_or_else(String::new, |f| f.owner.clone());
                return Err(PkiFilesError::NameClash {
                    file: file.name.clone(),
                    first,
                    second: file.owner.clone(),
                });
            }
        }
        Ok(plan)
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PkiFilesError + '_ {
    move |source| PkiFilesError::Io {
        path: path.to_owned(),
        source,
    }
}

fn create_dir(dir: &Path) -> Result<(), PkiFilesError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(io_err(dir))
}

fn remove_if_present(path: &Path) -> Result<(), PkiFilesError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

/// Creates `path` (failing if it appeared meanwhile) with its final mode from the start, so
/// a key is never readable by others, not even between create and chmod.
fn write_new(path: &Path, contents: &str, secret: bool) -> Result<(), PkiFilesError> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if secret { 0o600 } else { 0o644 });
    }
    let mut file = options.open(path).map_err(io_err(path))?;
    // The umask may have cleared bits of a certificate's 0644; set the mode explicitly.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = if secret { 0o600 } else { 0o644 };
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(io_err(path))?;
    }
    file.write_all(contents.as_bytes()).map_err(io_err(path))?;
    file.sync_all().map_err(io_err(path))
}

fn sync_dir(dir: &Path) -> Result<(), PkiFilesError> {
    // Makes the new directory entries durable; only meaningful (and possible) on Unix.
    #[cfg(unix)]
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
