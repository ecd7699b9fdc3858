//! Lease signatures: round trip, tamper detection on every field, key rotation and the
//! injectivity of the canonical encoding.

use leasehold_common::lease::sign::{
    canonical_bytes, key_id_for, LeaseSigner, LeaseVerifier, SignatureError, LEASE_DOMAIN,
    LEASE_FORMAT_VERSION, TRUSTED_KEYS_MAX,
};
use leasehold_common::lease::Lease;
use proptest::prelude::*;
use ring::rand::SystemRandom;

fn lease() -> Lease {
    Lease {
        lease_id: 42,
        grantor_id: "global".into(),
        policy_id: "api-tenant".into(),
        policy_version: 3,
        key: "tenant=acme".into(),
        holder_id: "agent-7".into(),
        credit: 500,
        epoch: 9,
        issued_at_ns: 1_000_000_000,
        ttl_ms: 10_000,
        generation: 2,
        parent_lease_id: Some(17),
        key_id: String::new(),
        signature: Vec::new(),
    }
}

fn signer() -> LeaseSigner {
    LeaseSigner::generate(&SystemRandom::new()).expect("key generation")
}

fn ring_of(signers: &[&LeaseSigner]) -> LeaseVerifier {
    let mut ring = LeaseVerifier::new();
    for s in signers {
        ring.trust(s.public_key()).expect("trust");
    }
    ring
}

#[test]
fn signed_lease_verifies_and_carries_the_key_id() {
    let s = signer();
    let mut l = lease();
    s.sign(&mut l);
    assert_eq!(l.key_id, s.key_id());
    assert_eq!(l.signature.len(), 64);
    ring_of(&[&s]).verify(&l).expect("verifies");
}

#[test]
fn key_id_is_prefixed_hex_of_the_public_key_digest() {
    let s = signer();
    let id = s.key_id();
    assert_eq!(id, key_id_for(s.public_key()));
    let hex = id.strip_prefix("ed25519:").expect("prefix");
    assert_eq!(hex.len(), 16);
    assert!(hex
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_ne!(id, signer().key_id(), "different keys, different ids");
}

type Edit = fn(&mut Lease);
type Tamper = (&'static str, Edit);

/// One mutation per field (`key_id` is covered by
/// `key_id_swapped_to_another_trusted_key_fails`, since pointing it at an unknown key is a
/// different error). The destructuring below stops compiling when a field is added,
/// so the table cannot silently fall behind the struct.
fn tampers() -> Vec<Tamper> {
    let Lease {
        lease_id: _,
        grantor_id: _,
        policy_id: _,
        policy_version: _,
        key: _,
        holder_id: _,
        credit: _,
        epoch: _,
        issued_at_ns: _,
        ttl_ms: _,
        generation: _,
        parent_lease_id: _,
        key_id: _,
        signature: _,
    } = lease();
    vec![
        ("lease_id", |l| l.lease_id += 1),
        ("grantor_id", |l| l.grantor_id.push('x')),
        ("policy_id", |l| l.policy_id = "api-tenanT".into()),
        ("policy_version", |l| l.policy_version += 1),
        ("key", |l| l.key = "tenant=acmf".into()),
        ("holder_id", |l| l.holder_id.clear()),
        ("credit", |l| l.credit += 1),
        ("epoch", |l| l.epoch -= 1),
        ("issued_at_ns", |l| l.issued_at_ns ^= 1),
        ("ttl_ms", |l| l.ttl_ms *= 2),
        ("generation", |l| l.generation += 1),
        ("parent_lease_id=None", |l| l.parent_lease_id = None),
        ("parent_lease_id=other", |l| l.parent_lease_id = Some(18)),
        ("signature", |l| l.signature[10] ^= 0x40),
    ]
}

#[test]
fn tampering_with_any_field_fails_verification() {
    let s = signer();
    let ring = ring_of(&[&s]);
    let mut signed = lease();
    s.sign(&mut signed);
    for (field, tamper) in tampers() {
        let mut l = signed.clone();
        tamper(&mut l);
        assert_ne!(l, signed, "{field}: the tamper must change the lease");
        match ring.verify(&l) {
            Err(SignatureError::BadSignature { lease_id, .. }) => {
                assert_eq!(lease_id, l.lease_id, "{field}")
            }
            other => panic!("{field}: expected BadSignature, got {other:?}"),
        }
    }
}

#[test]
fn parent_lease_absent_then_added_fails_verification() {
    let s = signer();
    let mut l = lease();
    l.parent_lease_id = None;
    s.sign(&mut l);
    l.parent_lease_id = Some(0);
    assert!(matches!(
        ring_of(&[&s]).verify(&l),
        Err(SignatureError::BadSignature { .. })
    ));
}

#[test]
fn key_id_swapped_to_another_trusted_key_fails() {
    let (a, b) = (signer(), signer());
    let ring = ring_of(&[&a, &b]);
    let mut l = lease();
    a.sign(&mut l);
    l.key_id = b.key_id().to_owned();
    assert!(matches!(
        ring.verify(&l),
        Err(SignatureError::BadSignature { .. })
    ));
    l.key_id = "ed25519:0000000000000000".into();
    assert_eq!(
        ring.verify(&l),
        Err(SignatureError::UnknownKeyId {
            lease_id: 42,
            key_id: "ed25519:0000000000000000".into()
        })
    );
}

#[test]
fn malformed_signature_and_key_are_typed_errors() {
    let s = signer();
    let mut ring = ring_of(&[&s]);
    let mut l = lease();
    s.sign(&mut l);
    l.signature.truncate(63);
    assert_eq!(
        ring.verify(&l),
        Err(SignatureError::MalformedSignature {
            lease_id: 42,
            len: 63
        })
    );
    let err = ring.trust(&[7u8; 31]).unwrap_err();
    assert!(matches!(err, SignatureError::MalformedKey { .. }));
    assert!(err.to_string().contains("31 bytes"), "{err}");
    let err = LeaseSigner::from_pkcs8(b"not a key").unwrap_err();
    assert!(matches!(err, SignatureError::MalformedKey { .. }));
}

#[test]
fn a_hostile_key_id_is_cut_in_errors() {
    let ring = ring_of(&[&signer()]);
    let mut l = lease();
    l.key_id = "k".repeat(10_000);
    match ring.verify(&l) {
        Err(SignatureError::UnknownKeyId { key_id, .. }) => assert_eq!(key_id.len(), 64),
        other => panic!("expected UnknownKeyId, got {other:?}"),
    }
}

#[test]
fn key_rotation_keeps_old_leases_valid_until_retirement() {
    let (old, new) = (signer(), signer());
    let mut ring = ring_of(&[&old]);
    let mut old_lease = lease();
    old.sign(&mut old_lease);
    ring.verify(&old_lease).expect("old key trusted");

    // Rotation: trust the new key first, then sign with it; both verify meanwhile.
    assert_eq!(ring.trust(new.public_key()).unwrap(), new.key_id());
    let mut new_lease = lease();
    new_lease.generation = 3;
    new.sign(&mut new_lease);
    ring.verify(&old_lease).expect("old key still trusted");
    ring.verify(&new_lease).expect("new key trusted");

    assert!(ring.retire(old.key_id()));
    assert!(!ring.retire(old.key_id()), "already retired");
    assert_eq!(
        ring.verify(&old_lease),
        Err(SignatureError::RetiredKey {
            lease_id: 42,
            key_id: old.key_id().to_owned()
        })
    );
    ring.verify(&new_lease).expect("new key unaffected");
    assert_eq!(ring.key_ids().collect::<Vec<_>>(), vec![new.key_id()]);

    // Reinstating a retired key is an explicit operator act and works.
    ring.trust(old.public_key()).unwrap();
    ring.verify(&old_lease).expect("reinstated");
}

#[test]
fn key_ring_is_bounded() {
    let mut ring = LeaseVerifier::new();
    let mut first = None;
    for _ in 0..TRUSTED_KEYS_MAX {
        let id = ring.trust(signer().public_key()).unwrap();
        first.get_or_insert(id);
    }
    let extra = signer();
    assert_eq!(
        ring.trust(extra.public_key()),
        Err(SignatureError::TooManyKeys {
            keys_max: TRUSTED_KEYS_MAX
        })
    );
    assert!(ring.retire(&first.unwrap()));
    ring.trust(extra.public_key()).expect("room after retiring");
}

#[test]
fn pkcs8_round_trip_keeps_the_key() {
    let s = signer();
    let again = LeaseSigner::from_pkcs8(s.to_pkcs8()).unwrap();
    assert_eq!(again.key_id(), s.key_id());
    assert_eq!(again.public_key(), s.public_key());
    let mut l = lease();
    again.sign(&mut l);
    ring_of(&[&s]).verify(&l).expect("same key");
    let shown = format!("{s:?}");
    assert!(
        shown.contains(s.key_id()) && !shown.contains("pkcs8"),
        "{shown}"
    );
}

#[test]
fn encoding_starts_with_domain_and_version() {
    let bytes = canonical_bytes(&lease());
    let mut prefix = (LEASE_DOMAIN.len() as u16).to_be_bytes().to_vec();
    prefix.extend_from_slice(LEASE_DOMAIN);
    prefix.extend_from_slice(&LEASE_FORMAT_VERSION.to_be_bytes());
    assert!(bytes.starts_with(&prefix));
}

#[test]
fn encoding_ignores_only_the_signature() {
    let mut a = lease();
    let mut b = lease();
    a.signature = vec![1; 64];
    b.signature = vec![2; 64];
    assert_eq!(canonical_bytes(&a), canonical_bytes(&b));
}

#[test]
fn crafted_ambiguous_pairs_encode_differently() {
    let pairs: Vec<(Edit, Edit)> = vec![
        (
            |l| (l.key, l.holder_id) = ("ab".into(), "c".into()),
            |l| (l.key, l.holder_id) = ("a".into(), "bc".into()),
        ),
        (
            |l| (l.grantor_id, l.policy_id) = (String::new(), "x".into()),
            |l| (l.grantor_id, l.policy_id) = ("x".into(), String::new()),
        ),
        (
            |l| l.parent_lease_id = None,
            |l| l.parent_lease_id = Some(0),
        ),
        (
            // A string whose bytes look like a length prefix and the next field.
            |l| (l.holder_id, l.key_id) = ("\0\0\0\0\0\0\0\x01z".into(), String::new()),
            |l| (l.holder_id, l.key_id) = (String::new(), "z".into()),
        ),
        (
            |l| (l.credit, l.epoch) = (1 << 32, 0),
            |l| (l.credit, l.epoch) = (0, 1 << 32),
        ),
    ];
    for (i, (fa, fb)) in pairs.into_iter().enumerate() {
        let (mut a, mut b) = (lease(), lease());
        fa(&mut a);
        fb(&mut b);
        assert_ne!(a, b, "pair {i} must differ");
        assert_ne!(canonical_bytes(&a), canonical_bytes(&b), "pair {i}");
    }
}

/// Reads the encoding back; if every encoding decodes to its lease, no two leases share one.
fn decode(bytes: &[u8]) -> Lease {
    let mut rd = Reader { rest: bytes };
    let domain_len = u16::from_be_bytes(rd.take(2).try_into().unwrap());
    assert_eq!(rd.take(domain_len.into()), LEASE_DOMAIN);
    assert_eq!(rd.take(2), LEASE_FORMAT_VERSION.to_be_bytes());
    let mut out = lease();
    out.lease_id = rd.u64();
    out.grantor_id = rd.string();
    out.policy_id = rd.string();
    out.policy_version = rd.u64();
    out.key = rd.string();
    out.holder_id = rd.string();
    out.credit = rd.u64();
    out.epoch = rd.u64();
    out.issued_at_ns = rd.u64();
    out.ttl_ms = rd.u64();
    out.generation = rd.u64();
    out.parent_lease_id = match rd.take(1)[0] {
        0 => None,
        1 => Some(rd.u64()),
        tag => panic!("bad tag {tag}"),
    };
    out.key_id = rd.string();
    assert!(rd.rest.is_empty(), "trailing bytes");
    out
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        head
    }

    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take(8).try_into().unwrap())
    }

    fn string(&mut self) -> String {
        let len = usize::try_from(self.u64()).unwrap();
        String::from_utf8(self.take(len).to_vec()).unwrap()
    }
}

fn arb_lease() -> impl Strategy<Value = Lease> {
    // Tiny alphabets and values make near-collisions (shifted boundaries) likely.
    let s = || "[ab\\x00\\x01]{0,3}";
    let n = || prop_oneof![0u64..3, Just(u64::MAX), Just(1 << 32)];
    (
        (n(), s(), s(), n(), s(), s()),
        (n(), n(), n(), n(), n(), proptest::option::of(n()), s()),
    )
        .prop_map(
            |((id, g, p, pv, k, h), (c, e, at, ttl, gen, parent, kid))| Lease {
                lease_id: id,
                grantor_id: g,
                policy_id: p,
                policy_version: pv,
                key: k,
                holder_id: h,
                credit: c,
                epoch: e,
                issued_at_ns: at,
                ttl_ms: ttl,
                generation: gen,
                parent_lease_id: parent,
                key_id: kid,
                signature: Vec::new(),
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn encoding_decodes_back_to_the_lease(l in arb_lease()) {
        prop_assert_eq!(decode(&canonical_bytes(&l)), l);
    }

    #[test]
    fn different_leases_encode_differently(a in arb_lease(), b in arb_lease()) {
        prop_assert_eq!(a == b, canonical_bytes(&a) == canonical_bytes(&b));
    }
}
