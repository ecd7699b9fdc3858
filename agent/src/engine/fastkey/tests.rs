//! The fast path against the general key builder, and in-place key comparison.

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
        let (mut shortcut, mut general) = (PlainValues::new(), PlainValues::new());
        let found = fast.find_values(&pairs, &mut shortcut);
        prop_assert_eq!(found, fast.search_values(&pairs, &mut general));
        if found {
            prop_assert_eq!(&shortcut[..], &general[..]);
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
