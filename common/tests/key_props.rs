//! Properties of key building: injective over canonical inputs, bounded, never panics.

use leasehold_common::key::{KeyBuilder, KeySchema};
use leasehold_common::policy::Policy;
use proptest::prelude::*;

/// Three dimensions covering lowercasing, required and optional values.
fn schema(key_len_max: usize) -> KeySchema {
    let text = "id: p\nrate: {units: 1, per: 1s}\ndimensions:\n\
        - {name: a, required: true, lowercase: true}\n\
        - {name: b}\n\
        - {name: c, max_len: 6}\n";
    KeySchema::new(&Policy::from_yaml(text).unwrap())
        .unwrap()
        .with_key_len_max(key_len_max)
}

/// The canonical form, computed independently of the library: trimmed of spaces and
/// tabs, ASCII-lowercased where the dimension says so, empty meaning absent.
fn canonical(value: &Option<String>, lowercase: bool) -> Option<String> {
    let v = value.as_deref()?.trim_matches([' ', '\t']);
    if v.is_empty() {
        return None;
    }
    Some(if lowercase {
        v.to_ascii_lowercase()
    } else {
        v.to_owned()
    })
}

/// Pieces rich in separators, escapes and reserved tokens, so that near-collisions
/// (a value that looks like the next dimension, an escape written out, a reserved token)
/// are common.
const FRAGMENTS: [&str; 16] = [
    "a",
    "A",
    "/",
    "=",
    "%",
    "~",
    "~none",
    "~overflow",
    "%2F",
    "/b=",
    "/c=",
    "é",
    " ",
    "\t",
    "*",
    ":",
];

fn tricky_text() -> impl Strategy<Value = String> {
    let piece = proptest::sample::select(&FRAGMENTS[..]);
    proptest::collection::vec(piece, 0..4).prop_map(|p| p.concat())
}

fn tricky_value() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(tricky_text())
}

/// The documented encoding, written out independently of the library.
fn percent_encoded(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._:@+*".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Keys of `x` and `y` are equal exactly when their canonical forms are, whenever both
/// build.
fn assert_equivalence(
    x: &[Option<String>; 3],
    y: &[Option<String>; 3],
) -> Result<(), TestCaseError> {
    let s = schema(256);
    let mut bx = KeyBuilder::new();
    let mut by = KeyBuilder::new();
    if let (Ok(kx), Ok(ky)) = (bx.build(&s, &entries(x)), by.build(&s, &entries(y))) {
        let canon = |v: &[Option<String>; 3]| -> Vec<Option<String>> {
            v.iter()
                .enumerate()
                .map(|(i, v)| canonical(v, i == 0))
                .collect()
        };
        prop_assert_eq!(
            kx.key == ky.key,
            canon(x) == canon(y),
            "{} vs {}",
            kx.key,
            ky.key
        );
    }
    Ok(())
}

fn entries(values: &[Option<String>; 3]) -> Vec<(&str, &str)> {
    ["a", "b", "c"]
        .iter()
        .zip(values)
        .filter_map(|(name, v)| v.as_deref().map(|v| (*name, v)))
        .collect()
}

/// `x` padded with blanks, and with the lowercased dimension's value upper-cased.
fn restyled(x: &[Option<String>; 3]) -> [Option<String>; 3] {
    let pad = |v: &Option<String>| v.as_ref().map(|v| format!(" \t{v} "));
    [
        pad(&x[0]).map(|v| v.to_ascii_uppercase()),
        pad(&x[1]),
        pad(&x[2]),
    ]
}

fn inputs() -> impl Strategy<Value = [Option<String>; 3]> {
    [tricky_value(), tricky_value(), tricky_value()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    /// Same key exactly when the canonical (dimension, value) lists are the same.
    #[test]
    fn keys_are_injective_over_canonical_inputs(
        x in inputs(),
        other in inputs(),
        how in 0u8..3,
        dim in 0usize..3,
        replacement in tricky_value(),
    ) {
        // `y` is `x` restyled (canonically equal), `x` with one dimension changed (the
        // likeliest way to collide), or unrelated; all must keep the equivalence.
        let y = match how {
            0 => restyled(&x),
            1 => {
                let mut y = x.clone();
                y[dim] = replacement;
                y
            }
            _ => other,
        };
        assert_equivalence(&x, &y)?;
    }

    /// Moving text across a dimension boundary never yields the same key:
    /// `a = u + "/b=" + v, b = w` against `a = u, b = v + "/b=" + w`.
    #[test]
    fn text_cannot_move_between_dimensions(u in tricky_text(), v in tricky_text(), w in tricky_text()) {
        let x = [Some(format!("{u}/b={v}")), Some(w.clone()), None];
        let y = [Some(u), Some(format!("{v}/b={w}")), None];
        assert_equivalence(&x, &y)?;
    }

    /// A value never collides with its own percent-encoded spelling.
    #[test]
    fn escapes_differ_from_what_they_escape(v in tricky_text()) {
        let x = [Some("k".to_owned()), Some(v.clone()), None];
        let y = [Some("k".to_owned()), Some(percent_encoded(&v)), None];
        assert_equivalence(&x, &y)?;
    }

    /// Any input either fails cleanly or yields a key within the length limit.
    #[test]
    fn keys_never_exceed_the_limit_and_nothing_panics(
        values in proptest::collection::vec(any::<String>(), 0..6),
        names in proptest::collection::vec(prop_oneof![Just("a"), Just("b"), Just("c"), Just("z")], 0..6),
        key_len_max in 0usize..300,
    ) {
        let s = schema(key_len_max);
        let pairs: Vec<(&str, &str)> =
            names.iter().zip(&values).map(|(n, v)| (*n, v.as_str())).collect();
        let mut b = KeyBuilder::new();
        if let Ok(k) = b.build(&s, &pairs) {
            prop_assert!(k.key.len() <= s.key_len_max());
            prop_assert!(k.key.starts_with("p:"));
            prop_assert!(k.key.bytes().all(|c| c.is_ascii_graphic()));
        }
    }
}
