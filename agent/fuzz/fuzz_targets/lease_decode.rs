//! The lease decoder: lease bytes from the wire (a grant, a renewal, a delegated cluster's
//! lease) decoded and checked against the trusted keys. Whatever the bytes, decoding and
//! verifying return an answer without panicking, and a lease verifies only if it is, field
//! for field, one that the key signed: a changed byte anywhere in a signed lease (its
//! credit, its key, its signature, its key id) never verifies.
//!
//! The key is a fixed test key (`lease_key.der`); the two leases it signed are below and,
//! encoded, in the corpus, so mutations start from bytes that verify.
#![no_main]

use leasehold_client::wire::{lease_from_pb, lease_to_pb};
use leasehold_common::lease::sign::{LeaseSigner, LeaseVerifier};
use leasehold_common::lease::Lease;
use leasehold_proto::leasehold::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use std::sync::OnceLock;

struct Keys {
    verifier: LeaseVerifier,
    signed: Vec<Lease>,
}

fn lease(
    lease_id: u64,
    grantor_id: &str,
    policy_id: &str,
    policy_version: u64,
    key: &str,
    holder_id: &str,
    numbers: [u64; 5],
    parent_lease_id: Option<u64>,
) -> Lease {
    let [credit, epoch, issued_at_ns, ttl_ms, generation] = numbers;
    Lease {
        lease_id,
        grantor_id: grantor_id.into(),
        policy_id: policy_id.into(),
        policy_version,
        key: key.into(),
        holder_id: holder_id.into(),
        credit,
        epoch,
        issued_at_ns,
        ttl_ms,
        generation,
        parent_lease_id,
        key_id: String::new(),
        signature: Vec::new(),
    }
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let signer = LeaseSigner::from_pkcs8(include_bytes!("../lease_key.der")).expect("test key");
        let mut verifier = LeaseVerifier::new();
        verifier.trust(signer.public_key()).expect("trusted");
        let mut signed = vec![
            lease(
                7,
                "root",
                "api-per-tenant",
                3,
                "tenant=acme",
                "agent-1",
                [500, 2, 1_700_000_000_000_000_000, 10_000, 1],
                None,
            ),
            lease(
                8,
                "us-east",
                "egress",
                1,
                "tenant=acme,route=/v1",
                "alloc:us-east",
                [1_000_000, 9, 42, 2_000, 4],
                Some(7),
            ),
        ];
        for l in &mut signed {
            signer.sign(l);
            verifier.verify(l).expect("a signed lease verifies");
        }
        Keys { verifier, signed }
    })
}

fuzz_target!(|data: &[u8]| {
    let keys = keys();
    let Ok(wire) = pb::Lease::decode(data) else {
        return;
    };
    let lease = lease_from_pb(&wire);
    // The wire form carries every field: written back and read again, the same lease.
    let back =
        lease_from_pb(&pb::Lease::decode(lease_to_pb(&lease).encode_to_vec().as_slice()).unwrap());
    assert_eq!(back, lease, "the wire form lost a field");
    if keys.verifier.verify(&lease).is_ok() {
        assert!(
            keys.signed.contains(&lease),
            "a lease the key never signed verified: {lease:?}"
        );
    }
});
