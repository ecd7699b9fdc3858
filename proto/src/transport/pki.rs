//! A development PKI: one CA and one certificate per admin, allocator and agent identity,
//! generated with rcgen, kept in memory or written to a directory (`leasectl certs init`).
//!
//! Not for production: keys are generated on the spot and written unencrypted. Production
//! deployments bring certificates from their own CA with the same identity URIs.

use std::fmt;
use std::time::SystemTime;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::identity::{validate_trust_domain, PeerIdentity, Role, DEFAULT_TRUST_DOMAIN};
use super::pem::TlsPem;

/// Most identities (admins + allocators + agents) one PKI may hold.
pub const PKI_IDENTITIES_MAX: usize = 1024;
/// Most host names / addresses put in server certificates.
pub const PKI_HOSTS_MAX: usize = 64;
/// Longest validity, in days.
pub const PKI_VALID_DAYS_MAX: u32 = 3650;
/// How far before `now` certificates become valid, in seconds, so that a peer whose clock
/// runs a little behind does not reject a certificate made moments ago.
pub const NOT_BEFORE_BACKDATE_S: i64 = 3_600;

const SECONDS_PER_DAY: i64 = 86_400;

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PkiSpec {
    /// Trust domain of every identity URI (see [`super::identity`]).
    pub trust_domain: String,
    /// Node ids of allocators.
    pub allocators: Vec<String>,
    /// Holder ids of agents.
    pub agents: Vec<String>,
    /// Names of operators.
    pub admins: Vec<String>,
    /// DNS names and IP addresses put in allocator and agent certificates (the ones that
    /// serve), e.g. `localhost`, `127.0.0.1`. Admin certificates only act as clients and get
    /// none, so an admin key cannot impersonate a server.
    pub hosts: Vec<String>,
    /// Validity of every certificate, in days from generation.
    pub valid_days: u32,
}

impl PkiSpec {
    /// A spec for a single machine: default trust domain, hosts `localhost`, `127.0.0.1`
    /// and `::1`, valid 30 days.
    pub fn local(allocators: &[&str], agents: &[&str], admins: &[&str]) -> Self {
        let owned = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        Self {
            trust_domain: DEFAULT_TRUST_DOMAIN.to_owned(),
            allocators: owned(allocators),
            agents: owned(agents),
            admins: owned(admins),
            hosts: owned(&["localhost", "127.0.0.1", "::1"]),
            valid_days: 30,
        }
    }
}

/// Why a PKI could not be generated or written.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A field of the [`PkiSpec`] is invalid.
    #[error("PKI spec field `{field}` value `{value}` is invalid: {reason}")]
    InvalidSpec {
        /// The field.
        field: &'static str,
        /// The offending value.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// rcgen failed to generate a key or sign a certificate.
    #[error("generating {what}: {source}")]
    Generate {
        /// Which certificate or key.
        what: String,
        /// rcgen's error.
        source: rcgen::Error,
    },
}

/// One issued identity certificate with its private key.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCert {
    /// Whom the certificate names.
    pub identity: PeerIdentity,
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key (PKCS#8), PEM.
    pub key_pem: String,
}

impl fmt::Debug for IssuedCert {
    /// Never prints the private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("identity", &self.identity)
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// A generated CA and the certificates it issued, all as PEM text.
#[derive(Clone, PartialEq, Eq)]
pub struct DevPki {
    /// Trust domain of every identity URI.
    pub trust_domain: String,
    /// The CA certificate, PEM.
    pub ca_cert_pem: String,
    /// The CA private key, PEM.
    pub ca_key_pem: String,
    /// Issued certificates: admins, then allocators, then agents, each in spec order.
    pub certs: Vec<IssuedCert>,
}

impl fmt::Debug for DevPki {
    /// Never prints private keys.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevPki")
            .field("trust_domain", &self.trust_domain)
            .field("ca_cert_pem", &self.ca_cert_pem)
            .field("certs", &self.certs)
            .finish_non_exhaustive()
    }
}

impl DevPki {
    /// Generates a CA and one certificate per identity in `spec`, valid from
    /// `now - NOT_BEFORE_BACKDATE_S` for `spec.valid_days` days after `now`.
    ///
    /// Keys are ECDSA P-256. Every leaf carries its identity URI and EKU serverAuth +
    /// clientAuth, so one certificate serves both directions of a node's connections.
    pub fn generate(spec: &PkiSpec, now: SystemTime) -> Result<Self, PkiError> {
        let identities = validate_spec(spec)?;
        let hosts = host_sans(&spec.hosts)?;
        let (not_before, not_after) = validity(now, spec.valid_days)?;

        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = rcgen::DistinguishedName::new();
        ca_params.distinguished_name.push(
            DnType::CommonName,
            format!("Leasehold dev CA ({})", spec.trust_domain),
        );
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca_params.not_before = not_before;
        ca_params.not_after = not_after;
        let ca_key = generate_key("the CA key")?;
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(|source| generation_failed("the CA certificate", source))?;
        let ca_key_pem = ca_key.serialize_pem();
        let issuer = Issuer::new(ca_params, ca_key);

        let mut certs = Vec::with_capacity(identities.len());
        for identity in identities {
            let serves = identity.role != Role::Admin;
            let sans = if serves { hosts.as_slice() } else { &[] };
            certs.push(issue(
                &issuer,
                &spec.trust_domain,
                identity,
                sans,
                (not_before, not_after),
            )?);
        }
        Ok(Self {
            trust_domain: spec.trust_domain.clone(),
            ca_cert_pem: ca_cert.pem(),
            ca_key_pem,
            certs,
        })
    }

    /// The certificate issued to `role`/`name`, if any.
    pub fn cert(&self, role: Role, name: &str) -> Option<&IssuedCert> {
        self.certs
            .iter()
            .find(|c| c.identity.role == role && c.identity.name == name)
    }

    /// CA + certificate + key of `role`/`name`, ready for the TLS configuration functions.
    pub fn tls_pem(&self, role: Role, name: &str) -> Option<TlsPem> {
        self.cert(role, name).map(|c| TlsPem {
            ca: self.ca_cert_pem.clone(),
            cert: c.cert_pem.clone(),
            key: c.key_pem.clone(),
        })
    }
}

fn issue(
    issuer: &Issuer<'_, KeyPair>,
    trust_domain: &str,
    identity: PeerIdentity,
    hosts: &[SanType],
    (not_before, not_after): (time::OffsetDateTime, time::OffsetDateTime),
) -> Result<IssuedCert, PkiError> {
    let what = format!("the certificate of {identity}");
    let uri = identity.to_uri(trust_domain);
    let uri = SanType::URI(
        uri.clone()
            .try_into()
            .map_err(|source| generation_failed(&what, source))?,
    );
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, identity.to_string());
    params.subject_alt_names = std::iter::once(uri).chain(hosts.iter().cloned()).collect();
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.not_before = not_before;
    params.not_after = not_after;
    let key = generate_key(&format!("the key of {identity}"))?;
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|source| generation_failed(&what, source))?;
    Ok(IssuedCert {
        identity,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn generate_key(what: &str) -> Result<KeyPair, PkiError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|source| generation_failed(what, source))
}

fn generation_failed(what: &str, source: rcgen::Error) -> PkiError {
    PkiError::Generate {
        what: what.to_owned(),
        source,
    }
}

fn invalid_spec(
    field: &'static str,
    value: impl Into<String>,
    reason: impl fmt::Display,
) -> PkiError {
    PkiError::InvalidSpec {
        field,
        value: value.into(),
        reason: reason.to_string(),
    }
}

/// Every identity of the spec, validated and unique, admins first.
fn validate_spec(spec: &PkiSpec) -> Result<Vec<PeerIdentity>, PkiError> {
    validate_trust_domain(&spec.trust_domain)
        .map_err(|e| invalid_spec("trust_domain", &spec.trust_domain, e))?;
    if spec.valid_days == 0 || spec.valid_days > PKI_VALID_DAYS_MAX {
        return Err(invalid_spec(
            "valid_days",
            spec.valid_days.to_string(),
            format_args!("must be 1..={PKI_VALID_DAYS_MAX}"),
        ));
    }
    let groups = [
        ("admins", Role::Admin, &spec.admins),
        ("allocators", Role::Allocator, &spec.allocators),
        ("agents", Role::Agent, &spec.agents),
    ];
    let total: usize = groups.iter().map(|(_, _, names)| names.len()).sum();
    if total > PKI_IDENTITIES_MAX {
        return Err(invalid_spec(
            "admins+allocators+agents",
            total.to_string(),
            format_args!("at most {PKI_IDENTITIES_MAX} identities"),
        ));
    }
    let mut identities: Vec<PeerIdentity> = Vec::with_capacity(total);
    for (field, role, names) in groups {
        for name in names {
            let identity =
                PeerIdentity::new(role, name.as_str()).map_err(|e| invalid_spec(field, name, e))?;
            if identities.contains(&identity) {
                return Err(invalid_spec(field, name, "listed twice"));
            }
            identities.push(identity);
        }
    }
    Ok(identities)
}

/// DNS-name or IP-address SANs for the serving certificates.
fn host_sans(hosts: &[String]) -> Result<Vec<SanType>, PkiError> {
    if hosts.len() > PKI_HOSTS_MAX {
        return Err(invalid_spec(
            "hosts",
            hosts.len().to_string(),
            format_args!("at most {PKI_HOSTS_MAX} hosts"),
        ));
    }
    hosts
        .iter()
        .map(|host| {
            if let Ok(ip) = host.parse::<std::net::IpAddr>() {
                return Ok(SanType::IpAddress(ip));
            }
            check_dns_name(host).map_err(|reason| invalid_spec("hosts", host, reason))?;
            let ia5 = host
                .clone()
                .try_into()
                .map_err(|e| invalid_spec("hosts", host, e))?;
            Ok(SanType::DnsName(ia5))
        })
        .collect()
}

fn check_dns_name(host: &str) -> Result<(), &'static str> {
    if host.is_empty() || host.len() > 253 {
        return Err("a DNS name has 1 to 253 bytes");
    }
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if !host.split('.').all(label_ok) {
        return Err("not an IP address, nor a DNS name of 1-63 byte labels of A-Z, a-z, 0-9, '-'");
    }
    Ok(())
}

fn validity(
    now: SystemTime,
    valid_days: u32,
) -> Result<(time::OffsetDateTime, time::OffsetDateTime), PkiError> {
    let now_s = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok())
        .ok_or_else(|| invalid_spec("now", format!("{now:?}"), "before 1970 or out of range"))?;
    let at = |unix_s: i64| {
        time::OffsetDateTime::from_unix_timestamp(unix_s)
            .map_err(|e| invalid_spec("now", format!("{now:?}"), e))
    };
    let not_before = at(now_s - NOT_BEFORE_BACKDATE_S)?;
    let not_after = at(now_s + i64::from(valid_days) * SECONDS_PER_DAY)?;
    Ok((not_before, not_after))
}
