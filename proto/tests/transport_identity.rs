//! Identity URIs are parsed strictly: exactly one `spiffe://<trust-domain>/<role>/<name>` URI
//! SAN, a known role, and a name of `[A-Za-z0-9._-]{1,128}`; anything else is a typed error
//! that names the offending part.

use leasehold_proto::transport::identity::{
    identity_from_cert_der, parse_identity_uri, validate_name, IDENTITY_URI_LEN_MAX, NAME_LEN_MAX,
};
use leasehold_proto::transport::{check_acts_as, check_role, IdentityError, PeerIdentity, Role};
use rcgen::{CertificateParams, KeyPair, SanType};

fn parse(uri: &str) -> Result<(String, Role, String), IdentityError> {
    parse_identity_uri(uri).map(|u| (u.trust_domain, u.identity.role, u.identity.name))
}

#[test]
fn well_formed_uris_parse_into_trust_domain_role_and_name() {
    assert_eq!(
        parse("spiffe://leasehold/agent/gw-7").unwrap(),
        ("leasehold".into(), Role::Agent, "gw-7".into())
    );
    assert_eq!(
        parse("spiffe://prod.example_1-x/allocator/eu.west_1").unwrap(),
        (
            "prod.example_1-x".into(),
            Role::Allocator,
            "eu.west_1".into()
        )
    );
    let max_name = "N".repeat(NAME_LEN_MAX);
    assert_eq!(
        parse(&format!("spiffe://td/admin/{max_name}")).unwrap(),
        ("td".into(), Role::Admin, max_name)
    );
}

#[test]
fn to_uri_round_trips_through_the_parser() {
    for role in Role::ALL {
        let identity = PeerIdentity::new(role, "node_1.a-b").unwrap();
        let parsed = parse_identity_uri(&identity.to_uri("leasehold")).unwrap();
        assert_eq!(parsed.identity, identity);
        assert_eq!(parsed.trust_domain, "leasehold");
        assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
    }
}

#[test]
fn wrong_scheme_is_named() {
    for uri in [
        "https://leasehold/agent/a",
        "SPIFFE://leasehold/agent/a",
        "spiffe:/leasehold/agent/a",
        "leasehold/agent/a",
        "",
    ] {
        assert!(
            matches!(parse(uri), Err(IdentityError::WrongScheme { .. })),
            "{uri}: {:?}",
            parse(uri)
        );
    }
}

#[test]
fn path_must_be_exactly_role_and_name() {
    for uri in [
        "spiffe://leasehold",
        "spiffe://leasehold/agent",
        "spiffe://leasehold/agent/a/b",
        "spiffe://leasehold/agent/a/",
    ] {
        assert!(
            matches!(parse(uri), Err(IdentityError::WrongPathShape { .. })),
            "{uri}: {:?}",
            parse(uri)
        );
    }
}

#[test]
fn unknown_roles_are_named() {
    for role in ["root", "Agent", "ADMIN", "", "agents"] {
        let err = parse(&format!("spiffe://leasehold/{role}/a")).unwrap_err();
        assert_eq!(
            err,
            IdentityError::UnknownRole {
                value: role.to_owned()
            }
        );
        assert!(err.to_string().contains(&format!("`{role}`")));
    }
}

#[test]
fn invalid_names_are_rejected_with_the_name() {
    let too_long = "n".repeat(NAME_LEN_MAX + 1);
    for name in [
        "", ".", "..", "a b", "a%2Fb", "a?x=1", "a#frag", "é", "a@b", "a+b", &too_long,
    ] {
        let err = parse(&format!("spiffe://leasehold/agent/{name}")).unwrap_err();
        match &err {
            IdentityError::InvalidName { value, .. } => assert_eq!(value, name),
            other => panic!("{name:?}: expected InvalidName, got {other:?}"),
        }
        assert!(validate_name(name).is_err());
    }
}

#[test]
fn invalid_trust_domains_are_rejected() {
    for td in [
        "",
        "Leasehold",
        "lease hold",
        "lease:8443",
        "user@host",
        "a%41",
    ] {
        let err = parse(&format!("spiffe://{td}/agent/a")).unwrap_err();
        assert!(
            matches!(&err, IdentityError::InvalidTrustDomain { value, .. } if value == td),
            "{td:?}: {err:?}"
        );
    }
}

#[test]
fn overlong_uris_are_rejected_before_parsing() {
    let uri = format!("spiffe://{}/agent/a", "t".repeat(IDENTITY_URI_LEN_MAX));
    assert_eq!(
        parse(&uri).unwrap_err(),
        IdentityError::UriTooLong {
            len: uri.len(),
            max: IDENTITY_URI_LEN_MAX
        }
    );
}

fn cert_with_sans(sans: Vec<SanType>) -> Vec<u8> {
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans;
    let key = KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

fn uri(s: &str) -> SanType {
    SanType::URI(s.to_owned().try_into().unwrap())
}

fn dns(s: &str) -> SanType {
    SanType::DnsName(s.to_owned().try_into().unwrap())
}

#[test]
fn certificates_need_exactly_one_uri_san() {
    let der = cert_with_sans(vec![dns("localhost"), uri("spiffe://leasehold/agent/a1")]);
    let parsed = identity_from_cert_der(&der).unwrap();
    assert_eq!(
        parsed.identity,
        PeerIdentity::new(Role::Agent, "a1").unwrap()
    );

    let none = cert_with_sans(vec![dns("localhost")]);
    assert_eq!(
        identity_from_cert_der(&none).unwrap_err(),
        IdentityError::MissingIdentityUri
    );
    let two = cert_with_sans(vec![
        uri("spiffe://leasehold/agent/a1"),
        uri("spiffe://leasehold/admin/root"),
    ]);
    assert_eq!(
        identity_from_cert_der(&two).unwrap_err(),
        IdentityError::MultipleUris { count: 2 }
    );
    let foreign = cert_with_sans(vec![uri("https://example.com/agent/a1")]);
    assert!(matches!(
        identity_from_cert_der(&foreign),
        Err(IdentityError::WrongScheme { .. })
    ));
    let bad_role = cert_with_sans(vec![uri("spiffe://leasehold/root/a1")]);
    assert!(matches!(
        identity_from_cert_der(&bad_role),
        Err(IdentityError::UnknownRole { .. })
    ));
}

#[test]
fn garbage_der_is_unparsable_not_a_panic() {
    let mut der = cert_with_sans(vec![uri("spiffe://leasehold/agent/a1")]);
    for bad in [&b""[..], &b"\x30\x03abc"[..], &der[..der.len() / 2]] {
        assert!(matches!(
            identity_from_cert_der(bad),
            Err(IdentityError::UnparsableCertificate { .. })
        ));
    }
    der.push(0);
    assert!(matches!(
        identity_from_cert_der(&der),
        Err(IdentityError::UnparsableCertificate { .. })
    ));
}

#[test]
fn role_and_holder_checks_deny_with_the_reason() {
    let agent = PeerIdentity::new(Role::Agent, "a1").unwrap();
    let denied = check_role(&agent, &[Role::Admin]).unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    assert!(denied.message().contains("`agent`"), "{}", denied.message());
    assert!(denied.message().contains("admin"), "{}", denied.message());
    check_role(&agent, &[Role::Admin, Role::Agent]).unwrap();

    check_acts_as(&agent, "a1").unwrap();
    let other = check_acts_as(&agent, "a2").unwrap_err();
    assert_eq!(other.code(), tonic::Code::PermissionDenied);
    assert!(other.message().contains("a2"));
    let hostile = check_acts_as(&agent, "x\n\u{7f}").unwrap_err();
    assert!(!hostile.message().contains('\n'));
}

#[test]
fn identities_are_only_built_with_valid_names() {
    assert!(PeerIdentity::new(Role::Admin, "ops").is_ok());
    assert!(matches!(
        PeerIdentity::new(Role::Admin, "ops/root"),
        Err(IdentityError::InvalidName { .. })
    ));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Every valid identity survives the trip through its URI unchanged.
        #[test]
        fn valid_identities_round_trip(
            role in prop::sample::select(Role::ALL.to_vec()),
            name in "[A-Za-z0-9._-]{1,128}",
            trust_domain in "[a-z0-9._-]{1,40}",
        ) {
            prop_assume!(name != "." && name != "..");
            let identity = PeerIdentity::new(role, name).unwrap();
            let parsed = parse_identity_uri(&identity.to_uri(&trust_domain)).unwrap();
            prop_assert_eq!(parsed.identity, identity);
            prop_assert_eq!(parsed.trust_domain, trust_domain);
        }

        /// The parser is canonical: whatever it accepts is exactly the URI of what it
        /// returned, so no two spellings name the same peer. It never panics.
        #[test]
        fn accepted_uris_are_canonical(
            uri in "spiffe://[a-zA-Z0-9./_%:@-]{0,12}/(admin|allocator|agent|Agent|x)?/[A-Za-z0-9./_ %-]{0,12}",
        ) {
            if let Ok(parsed) = parse_identity_uri(&uri) {
                prop_assert_eq!(parsed.identity.to_uri(&parsed.trust_domain), uri);
            }
        }

        /// A name with any byte outside the charset is refused.
        #[test]
        fn names_outside_the_charset_are_refused(
            prefix in "[A-Za-z0-9._-]{0,8}",
            bad in "[^A-Za-z0-9._-]",
            suffix in "[A-Za-z0-9._-]{0,8}",
        ) {
            let name = format!("{prefix}{bad}{suffix}");
            let refused = matches!(
                parse_identity_uri(&format!("spiffe://leasehold/agent/{name}")),
                Err(IdentityError::InvalidName { .. } | IdentityError::WrongPathShape { .. })
            );
            prop_assert!(refused);
        }
    }
}
