//! Lease signatures: a canonical encoding, Ed25519 signing and a rotating key ring.
//!
//! The grantor signs every lease version with its cluster key, so any downstream node or
//! auditor can tell where credit came from. The signed bytes are [`canonical_bytes`]: a
//! domain-separation prefix, a format version, then every field in a fixed order with
//! fixed-width integers and length-prefixed strings, so two different leases can never
//! encode to the same bytes (and a lease signature can never be replayed as some other
//! signed object of the product).
//!
//! Keys rotate without a flag day: verifiers trust the new key next to the old one, the
//! grantor switches to the new key, and the old key is retired once every lease it signed
//! has expired.

use std::collections::{BTreeMap, VecDeque};

use ring::digest::{digest, SHA256};
use ring::rand::SecureRandom;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use thiserror::Error;

use super::Lease;

/// Prefix of every encoding, so lease signatures cannot be confused with other signed data.
pub const LEASE_DOMAIN: &[u8] = b"leasehold.lease";
/// Version of the layout produced by [`canonical_bytes`].
pub const LEASE_FORMAT_VERSION: u16 = 1;
/// Length of an Ed25519 public key, in bytes.
pub const PUBLIC_KEY_LEN: usize = 32;
/// Length of an Ed25519 signature, in bytes.
pub const SIGNATURE_LEN: usize = 64;
/// Most keys a [`LeaseVerifier`] trusts at once (rotation needs two or three).
pub const TRUSTED_KEYS_MAX: usize = 16;
/// Most retired key ids remembered to explain a rejection.
pub const RETIRED_KEYS_MAX: usize = 64;
/// Longest key id quoted back in an error; longer ids are cut, so a hostile lease cannot
/// make error messages large.
const KEY_ID_QUOTE_LEN_MAX: usize = 64;
/// Prefix of every key id made by [`key_id_for`].
const KEY_ID_PREFIX: &str = "ed25519:";
/// Bytes of SHA-256(public key) shown in a key id.
const KEY_ID_DIGEST_LEN: usize = 8;

/// Why a key could not be made or trusted, or why a lease failed verification.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SignatureError {
    #[error("lease {lease_id}: key_id {key_id:?} is not a trusted signing key")]
    UnknownKeyId { lease_id: u64, key_id: String },
    #[error("lease {lease_id}: key_id {key_id:?} was retired and is no longer trusted")]
    RetiredKey { lease_id: u64, key_id: String },
    #[error("lease {lease_id}: signature does not match the lease under key_id {key_id:?}")]
    BadSignature { lease_id: u64, key_id: String },
    #[error("lease {lease_id}: signature is {len} bytes, an Ed25519 signature is 64")]
    MalformedSignature { lease_id: u64, len: usize },
    #[error("malformed key: {reason}")]
    MalformedKey { reason: String },
    #[error("key ring already trusts {keys_max} keys (keys_max); retire one first")]
    TooManyKeys { keys_max: usize },
    #[error("key generation failed: the random source is unavailable")]
    KeyGeneration,
}

/// The bytes a lease signature covers: every field except `signature`.
///
/// Layout: `u16` length + [`LEASE_DOMAIN`], `u16` [`LEASE_FORMAT_VERSION`], then the fields
/// in declaration order; integers as big-endian `u64`, strings as a big-endian `u64` length
/// followed by their UTF-8 bytes, `parent_lease_id` as a tag byte (0 none, 1 some) followed
/// by the id when present.
pub fn canonical_bytes(lease: &Lease) -> Vec<u8> {
    let strings = lease.grantor_id.len()
        + lease.policy_id.len()
        + lease.key.len()
        + lease.holder_id.len()
        + lease.key_id.len();
    let mut out = Vec::with_capacity(2 + LEASE_DOMAIN.len() + 2 + 8 * 14 + 1 + strings);
    out.extend_from_slice(&(LEASE_DOMAIN.len() as u16).to_be_bytes());
    out.extend_from_slice(LEASE_DOMAIN);
    out.extend_from_slice(&LEASE_FORMAT_VERSION.to_be_bytes());
    put_u64(&mut out, lease.lease_id);
    put_str(&mut out, &lease.grantor_id);
    put_str(&mut out, &lease.policy_id);
    put_u64(&mut out, lease.policy_version);
    put_str(&mut out, &lease.key);
    put_str(&mut out, &lease.holder_id);
    put_u64(&mut out, lease.credit);
    put_u64(&mut out, lease.epoch);
    put_u64(&mut out, lease.issued_at_ns);
    put_u64(&mut out, lease.ttl_ms);
    put_u64(&mut out, lease.generation);
    match lease.parent_lease_id {
        None => out.push(0),
        Some(parent) => {
            out.push(1);
            put_u64(&mut out, parent);
        }
    }
    put_str(&mut out, &lease.key_id);
    out
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// The key id of an Ed25519 public key: `ed25519:` and the hex of the first 8 bytes of its
/// SHA-256, so the id follows from the key and cannot be attached to a different one.
pub fn key_id_for(public_key: &[u8]) -> String {
    let hash = digest(&SHA256, public_key);
    let mut id = String::with_capacity(KEY_ID_PREFIX.len() + 2 * KEY_ID_DIGEST_LEN);
    id.push_str(KEY_ID_PREFIX);
    for b in &hash.as_ref()[..KEY_ID_DIGEST_LEN] {
        id.push(hex_digit(b >> 4));
        id.push(hex_digit(b & 0x0f));
    }
    id
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(nibble)])
}

fn quote_key_id(key_id: &str) -> String {
    key_id.chars().take(KEY_ID_QUOTE_LEN_MAX).collect()
}

/// A grantor's Ed25519 signing key.
pub struct LeaseSigner {
    pair: Ed25519KeyPair,
    /// Kept so the key can be stored again; `ring` does not re-export it.
    pkcs8: Vec<u8>,
    key_id: String,
}

impl std::fmt::Debug for LeaseSigner {
    // Never prints the private key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseSigner")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl LeaseSigner {
    /// A fresh key pair from `rng`.
    pub fn generate(rng: &dyn SecureRandom) -> Result<LeaseSigner, SignatureError> {
        let doc = Ed25519KeyPair::generate_pkcs8(rng).map_err(|_| SignatureError::KeyGeneration)?;
        LeaseSigner::from_pkcs8(doc.as_ref())
    }

    /// Loads an unencrypted PKCS#8 Ed25519 private key (v2 as written by [`Self::to_pkcs8`],
    /// or v1 as written by `openssl genpkey -algorithm ED25519`).
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<LeaseSigner, SignatureError> {
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8).map_err(|e| {
            SignatureError::MalformedKey {
                reason: format!("pkcs8 Ed25519 private key rejected: {e}"),
            }
        })?;
        let key_id = key_id_for(pair.public_key().as_ref());
        Ok(LeaseSigner {
            pair,
            pkcs8: pkcs8.to_vec(),
            key_id,
        })
    }

    /// The private key as PKCS#8, for storing it.
    pub fn to_pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// Identifier of this key, derived from its public key (see [`key_id_for`]).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The 32-byte Ed25519 public key, for verifiers' key rings.
    pub fn public_key(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    /// Sets `lease.key_id` to this key and `lease.signature` to the signature over
    /// [`canonical_bytes`] (which covers the new key id).
    pub fn sign(&self, lease: &mut Lease) {
        lease.key_id.clone_from(&self.key_id);
        let sig = self.pair.sign(&canonical_bytes(lease));
        lease.signature = sig.as_ref().to_vec();
    }
}

/// The public keys a node trusts to sign leases, by key id.
#[derive(Clone, Debug, Default)]
pub struct LeaseVerifier {
    trusted: BTreeMap<String, [u8; PUBLIC_KEY_LEN]>,
    /// Most recently retired last; only used to give a clearer error.
    retired: VecDeque<String>,
}

impl LeaseVerifier {
    /// An empty ring that trusts nothing.
    pub fn new() -> LeaseVerifier {
        LeaseVerifier::default()
    }

    /// Trusts `public_key` (32 raw Ed25519 bytes) and returns its key id. Trusting a key
    /// already trusted is a no-op; trusting a retired key reinstates it.
    pub fn trust(&mut self, public_key: &[u8]) -> Result<String, SignatureError> {
        let key: [u8; PUBLIC_KEY_LEN] =
            public_key
                .try_into()
                .map_err(|_| SignatureError::MalformedKey {
                    reason: format!(
                        "public key is {} bytes, an Ed25519 public key is {PUBLIC_KEY_LEN}",
                        public_key.len()
                    ),
                })?;
        let key_id = key_id_for(&key);
        if !self.trusted.contains_key(&key_id) && self.trusted.len() >= TRUSTED_KEYS_MAX {
            return Err(SignatureError::TooManyKeys {
                keys_max: TRUSTED_KEYS_MAX,
            });
        }
        self.retired.retain(|id| id != &key_id);
        self.trusted.insert(key_id.clone(), key);
        Ok(key_id)
    }

    /// Stops trusting `key_id`; leases it signed fail verification from now on. Returns
    /// whether the key was trusted.
    pub fn retire(&mut self, key_id: &str) -> bool {
        if self.trusted.remove(key_id).is_none() {
            return false;
        }
        if self.retired.len() >= RETIRED_KEYS_MAX {
            self.retired.pop_front();
        }
        self.retired.push_back(key_id.to_owned());
        true
    }

    /// Whether leases signed by `key_id` currently verify.
    pub fn is_trusted(&self, key_id: &str) -> bool {
        self.trusted.contains_key(key_id)
    }

    /// The trusted key ids, in order.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.trusted.keys().map(String::as_str)
    }

    /// Checks that `lease` was signed, exactly as it is, by a trusted key.
    pub fn verify(&self, lease: &Lease) -> Result<(), SignatureError> {
        let Some(key) = self.trusted.get(&lease.key_id) else {
            let key_id = quote_key_id(&lease.key_id);
            let lease_id = lease.lease_id;
            return Err(if self.retired.iter().any(|id| id == &lease.key_id) {
                SignatureError::RetiredKey { lease_id, key_id }
            } else {
                SignatureError::UnknownKeyId { lease_id, key_id }
            });
        };
        if lease.signature.len() != SIGNATURE_LEN {
            return Err(SignatureError::MalformedSignature {
                lease_id: lease.lease_id,
                len: lease.signature.len(),
            });
        }
        UnparsedPublicKey::new(&ED25519, key)
            .verify(&canonical_bytes(lease), &lease.signature)
            .map_err(|_| SignatureError::BadSignature {
                lease_id: lease.lease_id,
                key_id: quote_key_id(&lease.key_id),
            })
    }
}
