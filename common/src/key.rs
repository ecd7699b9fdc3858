//! Policy keys: which bucket a request spends from (P4).
//!
//! A key is built from a policy and the request's descriptor entries:
//!
//! ```text
//! <policy id>:<dimension>=<value>/<dimension>=<value>...
//! tenant-api:tenant=acme/route=%2Fv1%2Fsearch
//! ```
//!
//! Dimensions appear in the policy's key order, each once. Values are canonicalised, then
//! encoded:
//!
//! * **Trimming.** Leading and trailing spaces and tabs are removed (HTTP drops them from
//!   header values too, so `" acme"` and `"acme"` are the same identity). Inner
//!   whitespace is kept.
//! * **Lowercasing.** With `lowercase: true`, ASCII letters are lowercased. Non-ASCII
//!   letters are left alone: Unicode case mapping depends on locale and can change a
//!   value's length, which would make the length limit depend on it.
//! * **Refused values.** A value containing a control character (C0, DEL or C1, including
//!   CR and LF) is invalid. A value longer than the dimension's `max_len` bytes (default
//!   128) after trimming is invalid. With an allow-list (`values`), an unlisted value is
//!   invalid.
//! * **Encoding.** Bytes `A-Z a-z 0-9 - . _ : @ + *` are written as they are; every other
//!   byte (including `/`, `=`, `%`, `~`, space and each byte of non-ASCII UTF-8) is written
//!   as `%XX` with upper-case hex. Since `/` and `~` never appear raw in a value, policy
//!   ids have no `:` and dimension names have none of `:`, `/`, `=`, `~`, the key can be
//!   split back into exactly one list of (dimension, value): two different canonical
//!   inputs never share a key.
//! * **Reserved tokens.** An optional dimension that is absent (or empty after trimming)
//!   is written as `~none`. These tokens start with `~`, which an encoded value never
//!   does, so no value can forge them.
//! * **Length.** The whole key is at most `key_len_max` bytes (default 256); values are
//!   measured before encoding, the key after.
//!
//! **Verbatim schemas** ([`KeySchema::verbatim`], for envoyproxy/ratelimit rules) take
//! each value exactly as given, as that service does: no trimming or lowercasing, control
//! characters and an empty value are values like any other (encoded as above, so still
//! unambiguous), and only the whole key's length is bounded.
//!
//! **Overflow.** When a dimension says `overflow: true`, a request whose value for it is
//! missing (and required), invalid, unlisted or would make the key too long spends from
//! the policy's single overflow key `<policy id>:~overflow` instead of being refused. One
//! key per policy, whatever the other dimensions say, is what keeps an attacker spraying
//! identities from creating state: callers pass only authenticated identity values and
//! leave an unauthenticated identity out, so all such traffic lands in that one key.
//! Without `overflow`, the same cases are refused with a [`KeyError`] naming the dimension.
//! Dimensions are checked in key order and the first problem found decides.
//!
//! Descriptor entries whose keys are not dimensions of the policy are ignored; the same
//! dimension given twice is invalid (it would be ambiguous which value counts).

use crate::policy::{FieldErrors, Policy};
use std::sync::Arc;
use thiserror::Error;

/// Default longest key, in bytes.
pub const KEY_LEN_MAX_DEFAULT: usize = 256;
/// Most descriptor entries one build looks through.
pub const ENTRIES_MAX: usize = 64;
/// Written in place of the whole key body for overflowed requests.
pub const OVERFLOW_TOKEN: &str = "~overflow";
/// Written in place of an absent optional dimension's value.
pub const NONE_TOKEN: &str = "~none";

/// Why a dimension value cannot be used as given.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Error)]
pub enum ValueProblem {
    #[error("value is {len} bytes, longer than {max}")]
    TooLong { len: usize, max: usize },
    #[error("value contains a control character")]
    ControlCharacter,
    #[error("value is not one of the dimension's allowed values")]
    Unlisted,
    #[error("dimension is given more than once")]
    Duplicate,
    #[error("key would be longer than {max} bytes")]
    KeyTooLong { max: usize },
}

/// Why no key could be built. Names the dimension; cloning the name is a reference-count
/// bump, so refusing allocates nothing.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum KeyError {
    #[error("dimension '{dimension}': required but missing")]
    Missing { dimension: Arc<str> },
    #[error("dimension '{dimension}': {problem}")]
    Invalid {
        dimension: Arc<str>,
        problem: ValueProblem,
    },
    #[error("{found} descriptor entries, at most {max} allowed")]
    TooManyEntries { found: usize, max: usize },
}

/// Why a request was sent to the overflow key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OverflowReason {
    Missing,
    Invalid(ValueProblem),
}

/// The dimension that sent a request to the overflow key, and why.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Overflow<'a> {
    pub dimension: &'a str,
    pub reason: OverflowReason,
}

/// A built key, borrowed from the [`KeyBuilder`]'s buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BuiltKey<'a> {
    pub key: &'a str,
    /// Set when the request was aggregated into the overflow key.
    pub overflow: Option<Overflow<'a>>,
}

/// A policy's key rules, prepared once per policy version.
#[derive(Clone, Debug)]
pub struct KeySchema {
    policy_id: Box<str>,
    dims: Vec<DimRule>,
    key_len_max: usize,
    overflow_key: Box<str>,
    /// Values are used as given (see the module docs).
    verbatim: bool,
}

#[derive(Clone, Debug)]
struct DimRule {
    name: Arc<str>,
    required: bool,
    lowercase: bool,
    max_len: usize,
    overflow: bool,
    /// Sorted, for lookups without allocating.
    values: Vec<String>,
}

impl KeySchema {
    /// Prepares the key rules of `policy`, which must be valid: the key format's
    /// injectivity rests on the id and dimension-name rules validation enforces.
    pub fn new(policy: &Policy) -> Result<KeySchema, FieldErrors> {
        policy.validate()?;
        let dims = policy
            .key_dimensions()
            .map(|d| {
                let mut values = d.values.clone();
                values.sort_unstable();
                DimRule {
                    name: Arc::from(d.name.as_str()),
                    required: d.required,
                    lowercase: d.lowercase,
                    max_len: d.max_len as usize,
                    overflow: d.overflow,
                    values,
                }
            })
            .collect();
        Ok(KeySchema {
            policy_id: policy.id.as_str().into(),
            dims,
            key_len_max: KEY_LEN_MAX_DEFAULT,
            overflow_key: format!("{}:{OVERFLOW_TOKEN}", policy.id).into(),
            verbatim: false,
        })
    }

    /// Takes values exactly as given: two values that differ in any byte (a space, a
    /// tab, letter case) are two keys, and an empty value is a value.
    pub fn verbatim(mut self) -> KeySchema {
        self.verbatim = true;
        self
    }

    /// Sets the longest key. The overflow key always fits: the limit is raised to its
    /// length if needed.
    pub fn with_key_len_max(mut self, key_len_max: usize) -> KeySchema {
        self.key_len_max = key_len_max.max(self.overflow_key.len());
        self
    }

    pub fn policy_id(&self) -> &str {
        &self.policy_id
    }

    pub fn key_len_max(&self) -> usize {
        self.key_len_max
    }

    /// The one key all overflowed requests of this policy share.
    pub fn overflow_key(&self) -> &str {
        &self.overflow_key
    }
}

/// Builds keys into a reused buffer: after warm-up, building allocates nothing.
#[derive(Debug, Default)]
pub struct KeyBuilder {
    key: String,
    scratch: String,
}

impl KeyBuilder {
    pub fn new() -> KeyBuilder {
        KeyBuilder {
            key: String::with_capacity(KEY_LEN_MAX_DEFAULT),
            scratch: String::with_capacity(KEY_LEN_MAX_DEFAULT),
        }
    }

    /// Builds the key for `entries` (descriptor `(key, value)` pairs) under `schema`.
    pub fn build<'a>(
        &'a mut self,
        schema: &'a KeySchema,
        entries: &[(&str, &str)],
    ) -> Result<BuiltKey<'a>, KeyError> {
        if entries.len() > ENTRIES_MAX {
            return Err(KeyError::TooManyEntries {
                found: entries.len(),
                max: ENTRIES_MAX,
            });
        }
        self.key.clear();
        self.key.push_str(&schema.policy_id);
        self.key.push(':');
        for (i, dim) in schema.dims.iter().enumerate() {
            if i > 0 {
                self.key.push('/');
            }
            self.key.push_str(&dim.name);
            self.key.push('=');
            let appended = append_value(&mut self.key, &mut self.scratch, schema, dim, entries);
            if let Err(reason) = appended {
                if !dim.overflow {
                    return Err(refusal(dim, reason));
                }
                self.key.clear();
                self.key.push_str(&schema.overflow_key);
                let overflow = Overflow {
                    dimension: &dim.name,
                    reason,
                };
                return Ok(BuiltKey {
                    key: &self.key,
                    overflow: Some(overflow),
                });
            }
        }
        Ok(BuiltKey {
            key: &self.key,
            overflow: None,
        })
    }
}

fn refusal(dim: &DimRule, reason: OverflowReason) -> KeyError {
    let dimension = Arc::clone(&dim.name);
    match reason {
        OverflowReason::Missing => KeyError::Missing { dimension },
        OverflowReason::Invalid(problem) => KeyError::Invalid { dimension, problem },
    }
}

fn append_value(
    key: &mut String,
    scratch: &mut String,
    schema: &KeySchema,
    dim: &DimRule,
    entries: &[(&str, &str)],
) -> Result<(), OverflowReason> {
    let raw = find_entry(&dim.name, entries).map_err(OverflowReason::Invalid)?;
    let canonical = match raw {
        Some(raw) if schema.verbatim => Some(raw),
        Some(raw) => canonicalize(raw, dim.lowercase, dim.max_len, scratch)
            .map_err(OverflowReason::Invalid)?,
        None => None,
    };
    let too_long = OverflowReason::Invalid(ValueProblem::KeyTooLong {
        max: schema.key_len_max,
    });
    let Some(value) = canonical else {
        if dim.required {
            return Err(OverflowReason::Missing);
        }
        if key.len() + NONE_TOKEN.len() > schema.key_len_max {
            return Err(too_long);
        }
        key.push_str(NONE_TOKEN);
        return Ok(());
    };
    if !dim.values.is_empty()
        && dim
            .values
            .binary_search_by(|v| v.as_str().cmp(value))
            .is_err()
    {
        return Err(OverflowReason::Invalid(ValueProblem::Unlisted));
    }
    if key.len() + encoded_len(value) > schema.key_len_max {
        return Err(too_long);
    }
    encode_into(key, value);
    Ok(())
}

/// The value of dimension `name`, if given exactly once.
fn find_entry<'e>(
    name: &str,
    entries: &[(&str, &'e str)],
) -> Result<Option<&'e str>, ValueProblem> {
    let mut found = None;
    for (k, v) in entries {
        if *k == name {
            if found.is_some() {
                return Err(ValueProblem::Duplicate);
            }
            found = Some(*v);
        }
    }
    Ok(found)
}

/// Canonicalises one dimension value (see the module docs). Returns `None` for a value
/// that is empty after trimming. The result borrows `raw` when nothing needs rewriting,
/// else `scratch`.
pub fn canonicalize<'s>(
    raw: &'s str,
    lowercase: bool,
    max_len: usize,
    scratch: &'s mut String,
) -> Result<Option<&'s str>, ValueProblem> {
    let trimmed = raw.trim_matches([' ', '\t']);
    // Checked before any copy, so an oversized value costs one length comparison.
    if trimmed.len() > max_len {
        return Err(ValueProblem::TooLong {
            len: trimmed.len(),
            max: max_len,
        });
    }
    if trimmed.chars().any(char::is_control) {
        return Err(ValueProblem::ControlCharacter);
    }
    if trimmed.is_empty() {
        return Ok(None);
    }
    if !lowercase || !trimmed.bytes().any(|b| b.is_ascii_uppercase()) {
        return Ok(Some(trimmed));
    }
    scratch.clear();
    scratch.push_str(trimmed);
    scratch.make_ascii_lowercase();
    Ok(Some(scratch.as_str()))
}

fn is_raw(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'@' | b'+' | b'*')
}

/// Length of `value` once encoded.
pub fn encoded_len(value: &str) -> usize {
    value.bytes().map(|b| if is_raw(b) { 1 } else { 3 }).sum()
}

/// Appends `value` percent-encoded (see the module docs).
pub fn encode_into(out: &mut String, value: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in value.bytes() {
        if is_raw(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0F)]));
        }
    }
}
