//! PEM material for one TLS endpoint (CA, certificate, key), loaded from files or memory and
//! checked up front so that a misconfiguration names the file at fault instead of failing
//! later inside a handshake.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use super::identity::{identity_from_cert_der, IdentityError, IdentityUri};

/// Largest PEM file read, in bytes. Real bundles are a few KiB; the cap keeps a wrong path
/// (a log file, a device) from being slurped into memory.
pub const PEM_FILE_LEN_MAX: u64 = 1 << 20;

/// Which of the three PEM inputs something is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PemKind {
    /// The CA certificate(s) that peers' certificates must chain to.
    Ca,
    /// This endpoint's own certificate chain, leaf first.
    Cert,
    /// This endpoint's private key.
    Key,
}

impl fmt::Display for PemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PemKind::Ca => "CA certificate",
            PemKind::Cert => "certificate",
            PemKind::Key => "private key",
        })
    }
}

/// Why TLS material could not be used. Every variant names the input at fault: its kind and
/// its file path, or `in-memory` for PEM given as strings.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// The file is missing or unreadable.
    #[error("cannot read {kind} file `{}`: {source}", path.display())]
    Read {
        /// Which input.
        kind: PemKind,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than [`PEM_FILE_LEN_MAX`].
    #[error("{kind} file `{}` is larger than {max} bytes", path.display())]
    TooLarge {
        /// Which input.
        kind: PemKind,
        /// The file.
        path: PathBuf,
        /// [`PEM_FILE_LEN_MAX`].
        max: u64,
    },
    /// The input is not usable PEM of the expected kind.
    #[error("{kind} in {origin} is invalid: {reason}")]
    Invalid {
        /// Which input.
        kind: PemKind,
        /// ``file `PATH` `` or `in-memory PEM`.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The private key does not belong to the certificate.
    #[error(
        "private key in {key_origin} does not match the certificate in {cert_origin}: {reason}"
    )]
    KeyMismatch {
        /// Where the certificate came from.
        cert_origin: String,
        /// Where the key came from.
        key_origin: String,
        /// What rustls reported.
        reason: String,
    },
    /// The certificate names no valid Leasehold identity.
    #[error("certificate in {origin} names no Leasehold identity: {source}")]
    Identity {
        /// Where the certificate came from.
        origin: String,
        /// What is wrong with its identity URI.
        source: IdentityError,
    },
}

/// Paths of the PEM files of one TLS endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsPaths {
    /// CA bundle that peers' certificates must chain to.
    pub ca: PathBuf,
    /// This endpoint's certificate chain, leaf first.
    pub cert: PathBuf,
    /// This endpoint's private key (PKCS#8, PKCS#1 or SEC1 PEM).
    pub key: PathBuf,
}

impl TlsPaths {
    /// Reads and checks all three files (see [`TlsPem::validate`]).
    pub fn load(&self) -> Result<TlsPem, TlsConfigError> {
        let pem = TlsPem {
            ca: read_pem_file(PemKind::Ca, &self.ca)?,
            cert: read_pem_file(PemKind::Cert, &self.cert)?,
            key: read_pem_file(PemKind::Key, &self.key)?,
        };
        pem.check(&Origins {
            ca: file_origin(&self.ca),
            cert: file_origin(&self.cert),
            key: file_origin(&self.key),
        })?;
        Ok(pem)
    }
}

/// The PEM text of one TLS endpoint: CA bundle, certificate chain and private key.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPem {
    /// CA bundle that peers' certificates must chain to.
    pub ca: String,
    /// This endpoint's certificate chain, leaf first.
    pub cert: String,
    /// This endpoint's private key.
    pub key: String,
}

impl fmt::Debug for TlsPem {
    /// Never prints the private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPem")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl TlsPem {
    /// Checks that `ca` holds only CA certificates, `cert` holds a certificate chain, `key`
    /// holds one private key, and the key belongs to the leaf certificate.
    pub fn validate(&self) -> Result<(), TlsConfigError> {
        let in_memory = || "in-memory PEM".to_owned();
        self.check(&Origins {
            ca: in_memory(),
            cert: in_memory(),
            key: in_memory(),
        })
    }

    /// The identity named by this endpoint's own (leaf) certificate.
    pub fn own_identity(&self) -> Result<IdentityUri, TlsConfigError> {
        let origin = "in-memory PEM".to_owned();
        let chain = parse_certs(PemKind::Cert, &self.cert, &origin)?;
        identity_from_cert_der(&chain[0])
            .map_err(|source| TlsConfigError::Identity { origin, source })
    }

    fn check(&self, origins: &Origins) -> Result<(), TlsConfigError> {
        for der in parse_certs(PemKind::Ca, &self.ca, &origins.ca)? {
            // A leaf in the CA slot would silently trust only itself; say so instead.
            let is_ca = X509Certificate::from_der(&der).is_ok_and(|(_, cert)| cert.is_ca());
            if !is_ca {
                return Err(invalid(
                    PemKind::Ca,
                    &origins.ca,
                    "a certificate in the bundle is not a CA (basicConstraints CA:TRUE missing)",
                ));
            }
        }
        let chain = parse_certs(PemKind::Cert, &self.cert, &origins.cert)?;
        let key = parse_key(&self.key, &origins.key)?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain, key, &provider).map_err(|err| match err {
            rustls::Error::InconsistentKeys(_) => TlsConfigError::KeyMismatch {
                cert_origin: origins.cert.clone(),
                key_origin: origins.key.clone(),
                reason: err.to_string(),
            },
            other => invalid(PemKind::Key, &origins.key, &other.to_string()),
        })?;
        Ok(())
    }
}

struct Origins {
    ca: String,
    cert: String,
    key: String,
}

fn file_origin(path: &Path) -> String {
    format!("file `{}`", path.display())
}

fn invalid(kind: PemKind, origin: &str, reason: &str) -> TlsConfigError {
    TlsConfigError::Invalid {
        kind,
        origin: origin.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Every `CERTIFICATE` block, each checked to be well-formed X.509; at least one.
pub(super) fn parse_certs(
    kind: PemKind,
    pem: &str,
    origin: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| invalid(kind, origin, &format!("bad PEM: {err}")))?;
    if certs.is_empty() {
        return Err(invalid(kind, origin, "no CERTIFICATE block found"));
    }
    for der in &certs {
        match X509Certificate::from_der(der) {
            Ok(([], _)) => {}
            Ok(_) => return Err(invalid(kind, origin, "trailing bytes after a certificate")),
            Err(err) => return Err(invalid(kind, origin, &format!("bad X.509: {err}"))),
        }
    }
    Ok(certs)
}

pub(super) fn parse_key(pem: &str, origin: &str) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|err| {
        invalid(
            PemKind::Key,
            origin,
            &format!("no usable PRIVATE KEY block: {err}"),
        )
    })
}

fn read_pem_file(kind: PemKind, path: &Path) -> Result<String, TlsConfigError> {
    let read_err = |source| TlsConfigError::Read {
        kind,
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    // Read one byte past the cap so an oversized file is detected without trusting metadata.
    file.take(PEM_FILE_LEN_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > PEM_FILE_LEN_MAX {
        return Err(TlsConfigError::TooLarge {
            kind,
            path: path.to_owned(),
            max: PEM_FILE_LEN_MAX,
        });
    }
    String::from_utf8(bytes).map_err(|_| invalid(kind, &file_origin(path), "not UTF-8 text"))
}
