//! Roles and peer identities, and their strict encoding as a certificate URI SAN.
//!
//! A Leasehold certificate names its holder with exactly one URI subject alternative name:
//!
//! ```text
//! spiffe://<trust-domain>/<role>/<name>
//! ```
//!
//! * `<trust-domain>`: 1–255 characters of `[a-z0-9._-]` (SPIFFE's trust-domain charset).
//! * `<role>`: `admin`, `allocator` or `agent`, lowercase.
//! * `<name>`: the node id or holder id, 1–128 characters of `[A-Za-z0-9._-]`, neither `.`
//!   nor `..`.
//!
//! The shape is a SPIFFE ID, so the same certificates work with SPIFFE-aware tooling. A
//! certificate with no URI SAN, more than one URI SAN, or one that breaks any rule above
//! carries no identity: the parser names what is wrong and never guesses.

use std::fmt;
use std::str::FromStr;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// URI scheme of identity URIs.
pub const IDENTITY_URI_SCHEME: &str = "spiffe";
/// Longest identity URI accepted, in bytes; checked before anything else is parsed.
pub const IDENTITY_URI_LEN_MAX: usize = 512;
/// Longest trust domain, in bytes.
pub const TRUST_DOMAIN_LEN_MAX: usize = 255;
/// Longest identity name (node id or holder id), in bytes.
pub const NAME_LEN_MAX: usize = 128;
/// Trust domain used when none is configured.
pub const DEFAULT_TRUST_DOMAIN: &str = "leasehold";

/// What a certified peer may do. Each RPC names the roles it admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// An operator using `leasectl`: policy, budget, lease and cluster administration.
    Admin,
    /// An allocator node: Raft peer, and holder of leases from its upstream cluster.
    Allocator,
    /// An enforcement agent beside a gateway: holder of leases from its allocator.
    Agent,
}

impl Role {
    /// Every role, in a fixed order.
    pub const ALL: [Role; 3] = [Role::Admin, Role::Allocator, Role::Agent];

    /// The lowercase spelling used in identity URIs, file names and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Allocator => "allocator",
            Role::Agent => "agent",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = IdentityError;

    /// Parses the exact lowercase spelling; anything else is [`IdentityError::UnknownRole`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| IdentityError::UnknownRole {
                value: s.to_owned(),
            })
    }
}

/// Who is on the other end of a connection, as proven by its client certificate.
///
/// Build one with [`PeerIdentity::new`], which validates the name; identities read from
/// certificates are always validated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerIdentity {
    /// What the peer may do.
    pub role: Role,
    /// Node id (allocators), holder id (agents) or operator name (admins).
    pub name: String,
}

impl PeerIdentity {
    /// An identity with a validated name (see [`validate_name`]).
    pub fn new(role: Role, name: impl Into<String>) -> Result<Self, IdentityError> {
        let name = name.into();
        validate_name(&name)?;
        Ok(Self { role, name })
    }

    /// The identity URI naming this peer in `trust_domain`.
    pub fn to_uri(&self, trust_domain: &str) -> String {
        format!(
            "{IDENTITY_URI_SCHEME}://{trust_domain}/{}/{}",
            self.role, self.name
        )
    }
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.role, self.name)
    }
}

/// Why a certificate or URI carries no valid identity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The peer presented no certificate (plaintext connection or TLS without client auth).
    #[error("no client certificate was presented")]
    NoCertificate,
    /// The certificate's DER could not be parsed.
    #[error("client certificate is not valid X.509: {reason}")]
    UnparsableCertificate {
        /// What the parser rejected.
        reason: String,
    },
    /// The certificate has no URI subject alternative name.
    #[error("certificate has no URI subject alternative name; expected exactly one `spiffe://<trust-domain>/<role>/<name>`")]
    MissingIdentityUri,
    /// The certificate has several URI subject alternative names, so its identity is ambiguous.
    #[error("certificate has {count} URI subject alternative names; exactly one identity URI is allowed")]
    MultipleUris {
        /// How many URI SANs were found.
        count: usize,
    },
    /// The URI is longer than [`IDENTITY_URI_LEN_MAX`].
    #[error("identity URI is {len} bytes long; the maximum is {max}")]
    UriTooLong {
        /// Its length in bytes.
        len: usize,
        /// [`IDENTITY_URI_LEN_MAX`].
        max: usize,
    },
    /// The URI does not start with `spiffe://`.
    #[error("identity URI `{uri}` does not start with `spiffe://`")]
    WrongScheme {
        /// The offending URI.
        uri: String,
    },
    /// The trust domain is empty, too long or has a character outside `[a-z0-9._-]`.
    #[error("trust domain `{value}` is invalid: {reason}")]
    InvalidTrustDomain {
        /// The offending trust domain.
        value: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The path is not exactly `/<role>/<name>`.
    #[error("identity URI `{uri}` must have the path `/<role>/<name>` (exactly two segments)")]
    WrongPathShape {
        /// The offending URI.
        uri: String,
    },
    /// The role segment is not `admin`, `allocator` or `agent`.
    #[error("unknown role `{value}`; expected one of admin, allocator, agent")]
    UnknownRole {
        /// The offending role spelling.
        value: String,
    },
    /// The name is empty, too long, `.`/`..` or has a character outside `[A-Za-z0-9._-]`.
    #[error("identity name `{value}` is invalid: {reason}")]
    InvalidName {
        /// The offending name.
        value: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
}

/// Checks a node id / holder id: 1–[`NAME_LEN_MAX`] bytes of `[A-Za-z0-9._-]`, not `.`/`..`.
pub fn validate_name(name: &str) -> Result<(), IdentityError> {
    let invalid = |reason| IdentityError::InvalidName {
        value: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > NAME_LEN_MAX {
        return Err(invalid("it is longer than 128 bytes"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid("only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"));
    }
    // Dot segments would be normalised away by URI tooling, changing who the URI names.
    if name == "." || name == ".." {
        return Err(invalid("`.` and `..` are not names"));
    }
    Ok(())
}

/// Checks a trust domain: 1–[`TRUST_DOMAIN_LEN_MAX`] bytes of `[a-z0-9._-]`.
pub fn validate_trust_domain(trust_domain: &str) -> Result<(), IdentityError> {
    let invalid = |reason| IdentityError::InvalidTrustDomain {
        value: trust_domain.to_owned(),
        reason,
    };
    if trust_domain.is_empty() {
        return Err(invalid("it is empty"));
    }
    if trust_domain.len() > TRUST_DOMAIN_LEN_MAX {
        return Err(invalid("it is longer than 255 bytes"));
    }
    if !trust_domain
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid("only a-z, 0-9, '.', '_' and '-' are allowed"));
    }
    Ok(())
}

/// A parsed identity URI: the trust domain it was issued in and the peer it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityUri {
    /// The trust domain (authority part of the URI).
    pub trust_domain: String,
    /// The role and name.
    pub identity: PeerIdentity,
}

/// Parses `spiffe://<trust-domain>/<role>/<name>` strictly (see the module docs).
pub fn parse_identity_uri(uri: &str) -> Result<IdentityUri, IdentityError> {
    if uri.len() > IDENTITY_URI_LEN_MAX {
        return Err(IdentityError::UriTooLong {
            len: uri.len(),
            max: IDENTITY_URI_LEN_MAX,
        });
    }
    let rest = uri
        .strip_prefix(IDENTITY_URI_SCHEME)
        .and_then(|r| r.strip_prefix("://"))
        .ok_or_else(|| IdentityError::WrongScheme {
            uri: uri.to_owned(),
        })?;
    let wrong_shape = || IdentityError::WrongPathShape {
        uri: uri.to_owned(),
    };
    let (trust_domain, path) = rest.split_once('/').ok_or_else(wrong_shape)?;
    validate_trust_domain(trust_domain)?;
    let (role, name) = path.split_once('/').ok_or_else(wrong_shape)?;
    if name.contains('/') {
        return Err(wrong_shape());
    }
    let role: Role = role.parse()?;
    let identity = PeerIdentity::new(role, name)?;
    Ok(IdentityUri {
        trust_domain: trust_domain.to_owned(),
        identity,
    })
}

/// Reads the identity URI of a DER-encoded certificate.
///
/// Only URI SANs count: DNS and IP SANs (used for server name checks) are ignored. The
/// certificate's signature and validity are NOT checked here; that is the TLS handshake's job.
pub fn identity_from_cert_der(der: &[u8]) -> Result<IdentityUri, IdentityError> {
    let unparsable = |reason: String| IdentityError::UnparsableCertificate { reason };
    let (trailing, cert) = X509Certificate::from_der(der).map_err(|e| unparsable(e.to_string()))?;
    if !trailing.is_empty() {
        return Err(unparsable(format!(
            "{} bytes follow the certificate",
            trailing.len()
        )));
    }
    let san = cert
        .subject_alternative_name()
        .map_err(|e| unparsable(format!("subject alternative names: {e}")))?;
    let names = san.iter().flat_map(|ext| ext.value.general_names.iter());
    // An undecodable entry might be a URI we cannot see, so it voids the whole identity.
    if names
        .clone()
        .any(|name| matches!(name, GeneralName::Invalid(..)))
    {
        return Err(unparsable(
            "a subject alternative name is not valid UTF-8 or not well-formed".to_owned(),
        ));
    }
    let mut uris = names.filter_map(|name| match name {
        GeneralName::URI(uri) => Some(*uri),
        _ => None,
    });
    let first = uris.next().ok_or(IdentityError::MissingIdentityUri)?;
    let others = uris.count();
    if others > 0 {
        return Err(IdentityError::MultipleUris { count: others + 1 });
    }
    parse_identity_uri(first)
}
