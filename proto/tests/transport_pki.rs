//! The development PKI issues certificates that carry the right identities and usages, writes
//! them without overwriting and with owner-only keys, and PEM loading names the bad file.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use leasehold_proto::transport::identity::identity_from_cert_der;
use leasehold_proto::transport::{
    cert_file_name, key_file_name, ChannelError, ChannelFactory, ChannelSettings, ClientTransport,
    DevPki, PeerIdentity, PemKind, PkiError, PkiFilesError, PkiSpec, Role, TlsConfigError,
    TlsPaths, TlsPem, CA_CERT_FILE, CA_KEY_FILE, NOT_BEFORE_BACKDATE_S,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

fn spec() -> PkiSpec {
    PkiSpec::local(&["alloc-1", "alloc-2"], &["gw-1"], &["ops"])
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[test]
fn every_identity_gets_a_certificate_naming_it() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let pki = DevPki::generate(&spec(), now).unwrap();
    let expected = [
        (Role::Admin, "ops"),
        (Role::Allocator, "alloc-1"),
        (Role::Allocator, "alloc-2"),
        (Role::Agent, "gw-1"),
    ];
    assert_eq!(pki.certs.len(), expected.len());
    for (issued, (role, name)) in pki.certs.iter().zip(expected) {
        assert_eq!(issued.identity, PeerIdentity::new(role, name).unwrap());
        let der = der(&issued.cert_pem);
        let uri = identity_from_cert_der(&der).unwrap();
        assert_eq!(uri.identity, issued.identity);
        assert_eq!(uri.trust_domain, "leasehold");

        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && eku.client_auth, "{role}/{name}");
        assert!(!cert.is_ca());
        let validity = cert.validity();
        assert_eq!(
            validity.not_before.timestamp(),
            1_800_000_000 - NOT_BEFORE_BACKDATE_S
        );
        assert_eq!(validity.not_after.timestamp(), 1_800_000_000 + 30 * 86_400);
        let dns: Vec<String> = cert
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .filter(|n| !matches!(n, x509_parser::extensions::GeneralName::URI(_)))
            .map(|n| n.to_string())
            .collect();
        // Serving roles carry the host names; admin certificates carry none.
        assert_eq!(dns.is_empty(), role == Role::Admin, "{role}: {dns:?}");
        pki.tls_pem(role, name).unwrap().validate().unwrap();
    }
    let ca_der = der(&pki.ca_cert_pem);
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    assert!(ca.is_ca());
    assert!(pki.tls_pem(Role::Agent, "nobody").is_none());
}

#[test]
fn invalid_specs_name_the_field() {
    type Mutation = fn(&mut PkiSpec);
    let cases: [(&str, Mutation); 6] = [
        ("agents", |s| s.agents.push("bad name".into())),
        ("allocators", |s| s.allocators.push("alloc-1".into())),
        ("trust_domain", |s| s.trust_domain = "Upper".into()),
        ("valid_days", |s| s.valid_days = 0),
        ("hosts", |s| s.hosts.push("-bad-.example".into())),
        ("hosts", |s| s.hosts.push("a/b".into())),
    ];
    for (field, mutate) in cases {
        let mut spec = spec();
        mutate(&mut spec);
        match DevPki::generate(&spec, SystemTime::now()) {
            Err(PkiError::InvalidSpec { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: expected InvalidSpec, got {other:?}"),
        }
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn write_to_sets_owner_only_key_modes_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let pki = DevPki::generate(&spec(), SystemTime::now()).unwrap();
    let written = pki.write_to(&out, false).unwrap();
    assert_eq!(written.len(), 2 + 2 * pki.certs.len());
    assert_eq!(mode(&out), 0o700);
    assert_eq!(mode(&out.join(CA_KEY_FILE)), 0o600);
    assert_eq!(mode(&out.join(CA_CERT_FILE)), 0o644);
    for issued in &pki.certs {
        assert_eq!(mode(&out.join(key_file_name(&issued.identity))), 0o600);
        let cert = fs::read_to_string(out.join(cert_file_name(&issued.identity))).unwrap();
        assert_eq!(cert, issued.cert_pem);
    }
    assert!(out.join("agent-gw-1.pem").exists());
    assert!(out.join("agent-gw-1-key.pem").exists());

    // A second PKI must not clobber the first, not even partially.
    let other = DevPki::generate(&spec(), SystemTime::now()).unwrap();
    let refused = other.write_to(&out, false).unwrap_err();
    assert!(matches!(refused, PkiFilesError::Exists { .. }), "{refused}");
    assert_eq!(
        fs::read_to_string(out.join(CA_CERT_FILE)).unwrap(),
        pki.ca_cert_pem
    );

    // With force, files are replaced, and a loosened key mode does not survive.
    let key = out.join(CA_KEY_FILE);
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    other.write_to(&out, true).unwrap();
    assert_eq!(mode(&key), 0o600);
    assert_eq!(fs::read_to_string(&key).unwrap(), other.ca_key_pem);
}

#[test]
fn write_to_refuses_identities_that_share_a_file_name() {
    // Agent `a`'s key file and agent `a-key`'s certificate file are both `agent-a-key.pem`.
    let spec = PkiSpec::local(&[], &["a", "a-key"], &[]);
    let pki = DevPki::generate(&spec, SystemTime::now()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let err = pki.write_to(dir.path(), false).unwrap_err();
    assert!(
        matches!(&err, PkiFilesError::NameClash { file, .. } if file == "agent-a-key.pem"),
        "{err}"
    );
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn written_files_load_back_and_bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let pki = DevPki::generate(&spec(), SystemTime::now()).unwrap();
    pki.write_to(dir.path(), false).unwrap();
    let paths = |ca: &str, cert: &str, key: &str| TlsPaths {
        ca: dir.path().join(ca),
        cert: dir.path().join(cert),
        key: dir.path().join(key),
    };
    let loaded = paths(CA_CERT_FILE, "agent-gw-1.pem", "agent-gw-1-key.pem")
        .load()
        .unwrap();
    assert_eq!(loaded, pki.tls_pem(Role::Agent, "gw-1").unwrap());
    let own = loaded.own_identity().unwrap();
    assert_eq!(
        own.identity,
        PeerIdentity::new(Role::Agent, "gw-1").unwrap()
    );

    let missing = paths(CA_CERT_FILE, "agent-nobody.pem", "agent-gw-1-key.pem")
        .load()
        .unwrap_err();
    assert!(
        matches!(&missing, TlsConfigError::Read { kind: PemKind::Cert, path, .. }
            if path.ends_with("agent-nobody.pem")),
        "{missing}"
    );
    assert!(missing.to_string().contains("agent-nobody.pem"));

    let mismatch = paths(CA_CERT_FILE, "agent-gw-1.pem", "admin-ops-key.pem")
        .load()
        .unwrap_err();
    assert!(
        matches!(mismatch, TlsConfigError::KeyMismatch { .. }),
        "{mismatch}"
    );
    assert!(mismatch.to_string().contains("admin-ops-key.pem"));

    let leaf_as_ca = paths("agent-gw-1.pem", "agent-gw-1.pem", "agent-gw-1-key.pem")
        .load()
        .unwrap_err();
    assert!(
        matches!(
            leaf_as_ca,
            TlsConfigError::Invalid {
                kind: PemKind::Ca,
                ..
            }
        ),
        "{leaf_as_ca}"
    );

    let key_as_cert = paths(CA_CERT_FILE, "agent-gw-1-key.pem", "agent-gw-1-key.pem")
        .load()
        .unwrap_err();
    assert!(
        matches!(
            key_as_cert,
            TlsConfigError::Invalid {
                kind: PemKind::Cert,
                ..
            }
        ),
        "{key_as_cert}"
    );
}

#[test]
fn in_memory_pem_is_validated_too() {
    let pki = DevPki::generate(&spec(), SystemTime::now()).unwrap();
    let good = pki.tls_pem(Role::Admin, "ops").unwrap();
    let no_key = TlsPem {
        key: String::new(),
        ..good.clone()
    };
    assert!(matches!(
        no_key.validate(),
        Err(TlsConfigError::Invalid {
            kind: PemKind::Key,
            ..
        })
    ));
    assert!(!format!("{good:?}").contains("PRIVATE KEY"));
    assert!(!format!("{pki:?}").contains("PRIVATE KEY"));
}

#[tokio::test]
async fn channel_factory_caches_per_address_within_its_bound() {
    let settings = ChannelSettings {
        channels_max: 2,
        ..ChannelSettings::default()
    };
    let factory = ChannelFactory::new(settings, ClientTransport::Plaintext).unwrap();
    // Channels connect lazily, so no server is needed to fill the cache.
    factory.channel("127.0.0.1:7001").unwrap();
    factory.channel("127.0.0.1:7001").unwrap();
    assert_eq!(factory.cached_len(), 1);
    factory.channel("127.0.0.1:7002").unwrap();
    factory.channel("127.0.0.1:7001").unwrap(); // 7002 is now the least recently used
    factory.channel("localhost:7003").unwrap();
    assert_eq!(factory.cached_len(), 2);
    assert!(
        !factory.forget("127.0.0.1:7002"),
        "7002 should have been evicted"
    );
    assert!(factory.forget("127.0.0.1:7001"));
    assert!(factory.forget("localhost:7003"));
    assert_eq!(factory.cached_len(), 0);

    assert!(matches!(
        factory.channel("https://localhost:7000"),
        Err(ChannelError::InvalidAddress { .. })
    ));
    assert_eq!(factory.cached_len(), 0);
}

#[test]
fn channel_settings_must_be_positive() {
    for (field, settings) in [
        (
            "channels_max",
            ChannelSettings {
                channels_max: 0,
                ..ChannelSettings::default()
            },
        ),
        (
            "request_timeout_ms",
            ChannelSettings {
                request_timeout_ms: 0,
                ..ChannelSettings::default()
            },
        ),
        (
            "connect_timeout_ms",
            ChannelSettings {
                connect_timeout_ms: 0,
                ..ChannelSettings::default()
            },
        ),
        (
            "keepalive_interval_ms",
            ChannelSettings {
                keepalive_interval_ms: 0,
                ..ChannelSettings::default()
            },
        ),
        (
            "keepalive_timeout_ms",
            ChannelSettings {
                keepalive_timeout_ms: 0,
                ..ChannelSettings::default()
            },
        ),
    ] {
        let err = ChannelFactory::new(settings, ClientTransport::Plaintext).unwrap_err();
        assert!(
            matches!(err, ChannelError::InvalidSetting { field: f, .. } if f == field),
            "{field}: {err}"
        );
    }
}
