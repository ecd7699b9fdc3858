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
        self.find_values(entries, values, true) && self.are_plain(values)
    }

    /// Puts the value of each key dimension into `values`, unchecked; false when one is
    /// absent or given twice (or there are too many entries): then only the general
    /// builder decides.
    #[inline(always)]
    ///
    /// `lone_first`: look first for the most common request of all, one entry for a
    /// policy keyed on one dimension. Worth it for a request of one dimension; in the
    /// loop over several, the extra code measured slower than the search it saves.
    pub(crate) fn find_values<'e>(
        &self,
        entries: &[(&str, &'e str)],
        values: &mut PlainValues<'e>,
        lone_first: bool,
    ) -> bool {
        values.len = 0;
        if lone_first {
            if let ([part], [(name, value)]) = (&self.parts[..], entries) {
                return same(name, &part.name) && values.push(value);
            }
        }
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
        let Some((first, later)) = self.parts.split_first() else {
            return same(key, &self.head);
        };
        // Walked once, each piece bounds-checked, and a match must end where the key
        // does (summing the values' lengths first cost more than the comparisons). Bytes
        // rather than `str` slices: byte ranges need no character-boundary checks.
        let key = key.as_bytes();
        let mut at = first.prefix.len();
        let mut values = values.iter();
        if !values.next().is_some_and(|v| value_at(key, &mut at, v)) {
            return false;
        }
        // Most policies key on one dimension: no loop to set up for them.
        if !later.is_empty() {
            for (part, value) in later.iter().zip(values) {
                let Some(prefix) = key.get(at..at + part.prefix.len()) else {
                    return false;
                };
                at += part.prefix.len();
                if !same_bytes(prefix, part.prefix.as_bytes()) || !value_at(key, &mut at, value) {
                    return false;
                }
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
    let mut h = seed.wrapping_mul(K);
    for v in values {
        h = (h ^ super::bytes::sample(v)).wrapping_mul(K);
        h ^= h >> 29;
    }
    h
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
mod tests {
    use super::*;
    use leasehold_common::key::KeyBuilder;
    use proptest::prelude::*;

    fn policy() -> Policy {
        Policy::from_yaml(
            "id: api\ndimensions:\n\
             - {name: tenant, required: true, max_len: 8}\n\
             - {name: route, lowercase: true, overflow: true}\n\
             - {name: tier, values: [gold, silver]}\n\
             rate: {units: 1, per: 1s}\nburst: 1\n",
        )
        .unwrap()
    }

    #[test]
    fn plain_values_take_the_fast_path() {
        let p = policy();
        let schema = KeySchema::new(&p).unwrap();
        let fast = FastKey::new(&p, &schema);
        let mut out = String::new();
        let entries = [("route", "v1"), ("tier", "gold"), ("tenant", "acme")];
        assert!(fast.build(&entries, &mut out));
        assert_eq!(out, "api:tenant=acme/route=v1/tier=gold");
        assert!(
            !fast.build(&[("tenant", "acme")], &mut out),
            "absent values"
        );
        let upper = [("route", "V1"), ("tier", "gold"), ("tenant", "acme")];
        assert!(!fast.build(&upper, &mut out), "needs lowercasing");
    }

    /// A key of one dimension: the values are compared up to where the key ends.
    #[test]
    fn one_part_keys_match_only_their_whole_value() {
        let p = Policy::from_yaml(
            "id: api\ndimensions: [{name: tenant, required: true}]\n\
             rate: {units: 1, per: 1s}\nburst: 1\n",
        )
        .unwrap();
        let fast = FastKey::new(&p, &KeySchema::new(&p).unwrap());
        let key = "api:tenant=acme";
        assert!(fast.is_key_of(&["acme"], key));
        for other in ["acm", "acmex", "", "acmf", "api:tenant=acme"] {
            assert!(!fast.is_key_of(&[other], key), "{other:?}");
        }
    }

    /// The test policy's key schema and fast-path layout.
    fn layout() -> (KeySchema, FastKey) {
        let p = policy();
        let schema = KeySchema::new(&p).unwrap();
        let fast = FastKey::new(&p, &schema);
        (schema, fast)
    }

    fn pairs(entries: &[(String, String)]) -> Vec<(&str, &str)> {
        entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("gold".to_owned()),
            Just("silver".to_owned()),
            "[a-zA-Z0-9]{1,10}",
            "[ a-zA-Z/%~\t\u{7f}é:@+*._-]{0,12}",
        ]
    }

    fn entries() -> impl Strategy<Value = Vec<(String, String)>> {
        let key = prop_oneof![
            Just("tenant".to_owned()),
            Just("route".to_owned()),
            Just("tier".to_owned()),
            Just("other".to_owned()),
        ];
        proptest::collection::vec((key, value()), 0..6)
    }

    /// The fast path builds the general builder's key, and falls back (always allowed)
    /// only for input that is not plain: `plain` tells, beyond what the builder's key
    /// shows, whether the policy's dimensions were each given once and need no change.
    fn as_builder_builds(
        schema: &KeySchema,
        fast: &FastKey,
        pairs: &[(&str, &str)],
        plain: impl Fn(&[(&str, &str)]) -> bool,
    ) -> Result<(), TestCaseError> {
        let mut out = String::new();
        let mut builder = KeyBuilder::new();
        let built = builder.build(schema, pairs);
        if fast.build(pairs, &mut out) {
            let built = built.expect("the builder accepts what the fast path built");
            prop_assert_eq!(built.overflow, None);
            prop_assert_eq!(built.key, out.as_str());
        } else if let Ok(b) = built {
            let plain = b.overflow.is_none()
                && !b.key.contains('%')
                && !b.key.contains('~')
                && pairs.iter().all(|(_, v)| v.trim_matches([' ', '\t']) == *v)
                && plain(pairs);
            prop_assert!(!plain, "plain input {:?} fell back", pairs);
        }
        Ok(())
    }

    /// Entries whose values take the fast path, in any order.
    fn plain_entries() -> impl Strategy<Value = Vec<(String, String)>> {
        let tier = prop_oneof![Just("gold".to_owned()), Just("silver".to_owned())];
        ("[a-z0-9]{1,8}", "[a-z0-9]{1,10}", tier)
            .prop_map(|(tenant, route, tier)| {
                vec![
                    ("tenant".to_owned(), tenant),
                    ("route".to_owned(), route),
                    ("tier".to_owned(), tier),
                ]
            })
            .prop_shuffle()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        /// The fast path never disagrees with the general builder, under any key length
        /// limit.
        #[test]
        fn fast_keys_are_the_builders_keys(entries in entries(), key_len_max in 10usize..60) {
            let p = policy();
            let schema = KeySchema::new(&p).unwrap().with_key_len_max(key_len_max);
            let fast = FastKey::new(&p, &schema);
            as_builder_builds(&schema, &fast, &pairs(&entries), |pairs| {
                !pairs.iter().any(|(k, v)| *k == "route" && v.bytes().any(|c| c.is_ascii_uppercase()))
                    && ["tenant", "route", "tier"]
                        .iter()
                        .all(|n| pairs.iter().filter(|(k, _)| k == n).count() == 1)
            })?;
        }

        /// The same for a policy keyed on one dimension, whose one-entry requests take
        /// a shorter way to their value.
        #[test]
        fn one_dimension_fast_keys_are_the_builders_keys(
            entries in proptest::collection::vec(
                (prop_oneof![Just("tenant".to_owned()), Just("other".to_owned())], value()),
                0..3,
            ),
        ) {
            let p = Policy::from_yaml(
                "id: api\ndimensions: [{name: tenant, required: true, max_len: 8}]\n\
                 rate: {units: 1, per: 1s}\nburst: 1\n",
            )
            .unwrap();
            let schema = KeySchema::new(&p).unwrap();
            let fast = FastKey::new(&p, &schema);
            let pairs = pairs(&entries);
            let (mut lone, mut general) = (PlainValues::new(), PlainValues::new());
            let found = fast.find_values(&pairs, &mut lone, true);
            prop_assert_eq!(found, fast.find_values(&pairs, &mut general, false));
            if found {
                prop_assert_eq!(&lone[..], &general[..]);
            }
            as_builder_builds(&schema, &fast, &pairs, |pairs| {
                pairs.iter().filter(|(k, _)| *k == "tenant").count() == 1
            })?;
        }

        /// A key compared in place against plain values is equal exactly when the values'
        /// canonical key is that key.
        #[test]
        fn keys_match_in_place_exactly_when_equal(a in entries(), b in entries()) {
            let (schema, fast) = layout();
            let (a, b) = (pairs(&a), pairs(&b));
            let mut values = PlainValues::new();
            if !fast.plain_values(&a, &mut values) {
                return Ok(());
            }
            let mut own = String::new();
            fast.write(&values, &mut own);
            prop_assert!(fast.is_key_of(&values, &own));
            let mut builder = KeyBuilder::new();
            if let Ok(other) = builder.build(&schema, &b) {
                prop_assert_eq!(fast.is_key_of(&values, other.key), other.key == own);
            }
        }

        /// Values of any bytes match a plain canonical key in place only when they are
        /// that key's very values (what lets a cache hit skip checking them): here each
        /// value is cut from the key itself at any length, so that every shifted
        /// boundary is tried.
        #[test]
        fn only_the_keys_own_values_match_it(
            a in prop_oneof![entries(), plain_entries()],
            lens in proptest::collection::vec(0usize..40, 3),
            exact in any::<bool>(),
            (which, nudge) in (0usize..3, -3isize..=3),
        ) {
            let (_, fast) = layout();
            let a = pairs(&a);
            let mut own = PlainValues::new();
            if !fast.plain_values(&a, &mut own) {
                return Ok(());
            }
            let mut key = String::new();
            fast.write(&own, &mut key);
            let mut at = 0;
            let mut cut = Vec::new();
            // Half the cases cut at the values' own lengths, the match to find, but for
            // one length moved by a little (a value cut short or run on).
            let lens: Vec<usize> = if exact {
                let mut lens: Vec<usize> = own.iter().map(|v| v.len()).collect();
                lens[which] = lens[which].saturating_add_signed(nudge);
                lens
            } else {
                lens
            };
            for (part, len) in fast.parts.iter().zip(&lens) {
                at += part.prefix.len();
                let end = (at + len).min(key.len());
                cut.push(key.get(at.min(end)..end).unwrap_or(""));
                at = end;
            }
            prop_assert_eq!(fast.is_key_of(&cut, &key), cut[..] == own[..]);
        }
    }
}
