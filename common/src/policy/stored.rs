//! The stored form of a policy document inside replicated state and snapshots.
//!
//! A policy's serde form is made for people: optional fields are left out when unset and
//! fractions read as numbers or strings. A codec that does not describe its own contents
//! (postcard, which the allocator uses for its log and snapshots) writes that form but cannot
//! read it back. Inside such a codec a policy therefore travels as its JSON text, which names
//! every field it carries.
//!
//! Reading it back checks structure only: a stored policy was validated when it was applied,
//! and a later release with stricter checks must still restore what an earlier one accepted.
//! Fields added later with a default read old documents unchanged.

use super::Policy;
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// Writes `policy` as its JSON text (for `#[serde(with = "...")]`).
pub fn serialize<S: Serializer>(policy: &Policy, s: S) -> Result<S::Ok, S::Error> {
    let text = serde_json::to_string(policy)
        .map_err(|e| S::Error::custom(format!("policy '{}' cannot be stored: {e}", policy.id)))?;
    s.serialize_str(&text)
}

/// Reads a policy written by [`serialize`].
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Policy, D::Error> {
    let text = String::deserialize(d)?;
    serde_json::from_str(&text)
        .map_err(|e| D::Error::custom(format!("stored policy is not a policy document: {e}")))
}
