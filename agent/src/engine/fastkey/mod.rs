//! The common case of key building, prepared per policy version.
//!
//! Most descriptor values are already canonical: present once, short, no surrounding
//! blanks, only bytes the key format writes as they are, and no upper case where the
//! dimension lowercases. For those the canonical key is the policy's fixed text with the
//! values copied in between, so the hot path copies a few slices instead of running the
//! general builder byte by byte. Anything else (absent, blank, needing encoding, lowercasing,
//! overflow or refusal) falls back to [`KeyBuilder`](leasehold_common::key::KeyBuilder),
//! which stays the one definition of the key format: this path only ever produces a key
//! that the builder would produce for the same input (a property test holds it to that).

use super::bytes::{same, same_bytes};
use leasehold_common::key::{KeySchema, ENTRIES_MAX};
use leasehold_common::policy::{Policy, DIMENSIONS_MAX};
use std::mem::MaybeUninit;

/// The values of a key's dimensions, in the policy's order: a fixed array, as a policy
/// has at most [`DIMENSIONS_MAX`] of them (a growable vector checks where its items live
/// on every access), left uninitialised past `len` (made for every decision).
pub(crate) struct PlainValues<'e> {
    len: usize,
    items: [MaybeUninit<&'e str>; DIMENSIONS_MAX],
}

impl<'e> PlainValues<'e> {
    #[inline]
    pub(crate) fn new() -> Self {
        PlainValues {
            len: 0,
            // SAFETY: an array of `MaybeUninit` needs no initialisation (written out, the
            // array is filled with zeros on every decision).
            items: unsafe { MaybeUninit::uninit().assume_init() },
        }
    }

    /// Appends `value`; false when already full.
    #[inline]
    fn push(&mut self, value: &'e str) -> bool {
        let Some(item) = self.items.get_mut(self.len) else {
            return false;
        };
        item.write(value);
        self.len += 1;
        true
    }
}

impl<'e> std::ops::Deref for PlainValues<'e> {
    type Target = [&'e str];
    #[inline]
    fn deref(&self) -> &[&'e str] {
        // SAFETY: `push` wrote the first `len` items before counting them.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast(), self.len) }
    }
}

#[derive(Clone, Debug)]
struct Part {
    /// `<id>:<name>=` for the first dimension, `/<name>=` for the others.
    prefix: Box<str>,
    name: Box<str>,
    /// Byte classes ([`class`]) that take a value off the fast path.
    reject: u8,
    max_len: usize,
    /// Sorted allow-list; empty means any value.
    values: Vec<String>,
}

/// A policy's key layout for the fast path.
#[derive(Clone, Debug)]
pub(crate) struct FastKey {
    /// `<id>:` when the policy has no key dimensions.
    head: Box<str>,
    parts: Vec<Part>,
    /// Bytes of the key that are not values: the head alone, or every part's prefix.
    fixed_len: usize,
    key_len_max: usize,
}

/// A byte the key format encodes (see `leasehold_common::key`).
const ENCODED: u8 = 1;
/// An upper-case letter, which a lowercasing dimension changes.
const UPPER: u8 = 2;

/// The classes of every byte, so that a value is checked with one lookup per byte.
static CLASSES: [u8; 256] = {
    let mut table = [ENCODED; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let raw = c.is_ascii_alphanumeric()
            || matches!(c, b'-' | b'.' | b'_' | b':' | b'@' | b'+' | b'*');
        if raw {
            table[b] = if c.is_ascii_uppercase() { UPPER } else { 0 };
        }
        b += 1;
    }
    table
};

/// The classes of `value`'s bytes, or-ed together.
#[inline]
fn classes(value: &str) -> u8 {
    value
        .bytes()
        .fold(0, |all, b| all | CLASSES[usize::from(b)])
}

impl FastKey {
    pub(crate) fn new(policy: &Policy, schema: &KeySchema) -> FastKey {
        let parts = policy
            .key_dimensions()
            .enumerate()
            .map(|(i, d)| {
                let mut values = d.values.clone();
                values.sort_unstable();
                let prefix = if i == 0 {
                    format!("{}:{}=", policy.id, d.name)
                } else {
                    format!("/{}=", d.name)
                };
                Part {
                    prefix: prefix.into(),
                    name: d.name.as_str().into(),
                    reject: if d.lowercase {
                        ENCODED | UPPER
                    } else {
                        ENCODED
                    },
                    max_len: d.max_len as usize,
                    values,
                }
            })
            .collect::<Vec<Part>>();
        let head: Box<str> = format!("{}:", policy.id).into();
        let fixed_len = if parts.is_empty() {
            head.len()
        } else {
            parts.iter().map(|p| p.prefix.len()).sum()
        };
        FastKey {
            head,
            parts,
            fixed_len,
            key_len_max: schema.key_len_max(),
        }
    }

    /// Puts the values of the key dimensions, in the policy's order, into `values` if
    /// `entries` take the common case; false (with `values` in any state) when the general
    /// builder must decide. Filled in place: returned by value, the values would be
    /// written and read back in differently sized pieces, and the read would wait.
    #[cfg(test)]
    pub(crate) fn plain_values<'e>(
        &self,
        entries: &[(&str, &'e str)],
        values: &mut PlainValues<'e>,
    ) -> bool {
        self.find_values(entries, values) && self.are_plain(values)
    }

    /// Puts the value of each key dimension into `values`, unchecked; false when one is
    /// absent or given twice (or there are too many entries): then only the general
    /// builder decides. The most common dimension of all, one entry for a policy keyed on
    /// one dimension, is found with one comparison of the entry's name.
    #[inline(always)]
    pub(crate) fn find_values<'e>(
        &self,
        entries: &[(&str, &'e str)],
        values: &mut PlainValues<'e>,
    ) -> bool {
        if let ([part], [(name, value)]) = (&self.parts[..], entries) {
            values.len = 0;
            return same(name, &part.name) && values.push(value);
        }
        self.search_values(entries, values)
    }

    /// [`find_values`](Self::find_values) by searching the entries for each dimension.
    #[inline(always)]
    pub(crate) fn search_values<'e>(
        &self,
        entries: &[(&str, &'e str)],
        values: &mut PlainValues<'e>,
    ) -> bool {
        values.len = 0;
        if entries.len() > ENTRIES_MAX {
            return false;
        }
        for part in &self.parts {
            let Some(value) = single_value(&part.name, entries) else {
                return false;
            };
            if !values.push(value) {
                return false;
            }
        }
        true
    }

    /// Whether the values [`find_values`](Self::find_values) found are their own canonical
    /// form: non-empty, short enough, only bytes written as they are (and no upper case
    /// where the dimension lowercases), allowed, and the key within its length limit.
    #[inline]
    pub(crate) fn are_plain(&self, values: &[&str]) -> bool {
        let mut len = self.fixed_len;
        for (part, value) in self.parts.iter().zip(values) {
            let plain = !value.is_empty()
                && value.len() <= part.max_len
                && classes(value) & part.reject == 0;
            let allowed = part.values.is_empty()
                || part
                    .values
                    .binary_search_by(|v| v.as_str().cmp(value))
                    .is_ok();
            if !plain || !allowed {
                return false;
            }
            len += value.len();
        }
        len <= self.key_len_max
    }

    /// Writes the canonical key of plain `values` into `out`.
    #[inline]
    pub(crate) fn write(&self, values: &[&str], out: &mut String) {
        out.clear();
        if self.parts.is_empty() {
            out.push_str(&self.head);
            return;
        }
        for (part, value) in self.parts.iter().zip(values) {
            out.push_str(&part.prefix);
            out.push_str(value);
        }
    }

    /// Whether `key`, a key of this policy version, is the key of `values` (one per part,
    /// as [`find_values`](Self::find_values) gives them), compared in place.
    ///
    /// When `key` is the canonical key of plain values, a match means `values` are those
    /// very values, so they need no checking of their own: a plain value holds no `/`,
    /// which starts every later part's prefix, and no dimension name is a prefix of
    /// another followed by `=`; so the value boundaries cannot shift. The first prefix
    /// begins every key of the version and is not compared.
    #[inline(always)]
    pub(crate) fn is_key_of(&self, values: &[&str], key: &str) -> bool {
        debug_assert_eq!(values.len(), self.parts.len(), "one value per part");
        if let [value] = values {
            // One part: the key is its prefix (all of the fixed bytes) and the value.
            // Bytes rather than `str` slices: byte ranges need no boundary checks.
            let rest = key.as_bytes().get(self.fixed_len..);
            return rest.is_some_and(|rest| same_bytes(rest, value.as_bytes()));
        }
        let Some((first, later)) = self.parts.split_first() else {
            return same(key, &self.head);
        };
        // Walked once, each piece bounds-checked, and a match must end where the key
        // does (summing the values' lengths first cost more than the comparisons).
        let key = key.as_bytes();
        let mut at = first.prefix.len();
        let mut values = values.iter();
        if !values.next().is_some_and(|v| value_at(key, &mut at, v)) {
            return false;
        }
        for (part, value) in later.iter().zip(values) {
            let Some(prefix) = key.get(at..at + part.prefix.len()) else {
                return false;
            };
            at += part.prefix.len();
            if !same_bytes(prefix, part.prefix.as_bytes()) || !value_at(key, &mut at, value) {
                return false;
            }
        }
        at == key.len()
    }

    /// Writes the canonical key of `entries` into `out` if they take the common case;
    /// false (with `out` in any state) when the general builder must decide.
    #[cfg(test)]
    pub(crate) fn build(&self, entries: &[(&str, &str)], out: &mut String) -> bool {
        let mut values = PlainValues::new();
        if !self.plain_values(entries, &mut values) {
            return false;
        }
        self.write(&values, out);
        true
    }
}

/// A cheap hash of plain values for a thread's own key cache, mixed with `seed` (the
/// policy's generation). Collisions only cost a cache miss, so no keyed hash is needed.
#[inline(always)]
pub(crate) fn values_hash(values: &[&str], seed: u64) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, v: &str| {
        let h = (h ^ super::bytes::sample(v)).wrapping_mul(K);
        h ^ (h >> 29)
    };
    let seeded = seed.wrapping_mul(K);
    // Most keys have one dimension: their hash is straight code, without a loop.
    if let [value] = values {
        return mix(seeded, value);
    }
    values.iter().fold(seeded, |h, v| mix(h, v))
}

/// Whether `key` holds `value` at `at`, which moves past it.
#[inline(always)]
fn value_at(key: &[u8], at: &mut usize, value: &str) -> bool {
    let found = key.get(*at..*at + value.len());
    *at += value.len();
    found.is_some_and(|found| same_bytes(found, value.as_bytes()))
}

/// The value of `name` if it is given exactly once.
#[inline(always)]
fn single_value<'e>(name: &str, entries: &[(&str, &'e str)]) -> Option<&'e str> {
    let mut found = None;
    for (k, v) in entries {
        if same(k, name) {
            if found.is_some() {
                return None;
            }
            found = Some(*v);
        }
    }
    found
}

#[cfg(test)]
mod tests;
