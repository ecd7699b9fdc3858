//! Policy keys: format, canonicalisation, refusals and overflow aggregation.

use leasehold_common::key::{
    KeyBuilder, KeyError, KeySchema, OverflowReason, ValueProblem, ENTRIES_MAX,
};
use leasehold_common::policy::Policy;
use std::collections::BTreeSet;

fn schema(yaml_dimensions: &str) -> KeySchema {
    let text = format!("id: api\nrate: {{units: 10, per: 1s}}\ndimensions:\n{yaml_dimensions}");
    KeySchema::new(&Policy::from_yaml(&text).unwrap()).unwrap()
}

fn tenant_route() -> KeySchema {
    schema("  - {name: tenant, required: true, lowercase: true}\n  - {name: route}\n")
}

fn build(schema: &KeySchema, entries: &[(&str, &str)]) -> Result<String, KeyError> {
    KeyBuilder::new()
        .build(schema, entries)
        .map(|k| k.key.to_owned())
}

#[test]
fn keys_list_dimensions_in_key_order_with_encoded_values() {
    let s = tenant_route();
    let key = build(
        &s,
        &[("route", "/v1/search"), ("tenant", "Acme"), ("other", "x")],
    );
    assert_eq!(key.unwrap(), "api:tenant=acme/route=%2Fv1%2Fsearch");
    let odd = build(&s, &[("tenant", "a b=c~d%e"), ("route", "é")]).unwrap();
    assert_eq!(odd, "api:tenant=a%20b%3Dc%7Ed%25e/route=%C3%A9");
    let raw = build(&s, &[("tenant", "user@example.com:+1.x_y-z*")]).unwrap();
    assert_eq!(raw, "api:tenant=user@example.com:+1.x_y-z*/route=~none");
}

#[test]
fn explicit_key_order_is_followed() {
    let text =
        "id: api\nrate: {units: 1, per: 1s}\ndimensions: [{name: a}, {name: b}]\nkey: [b, a]\n";
    let s = KeySchema::new(&Policy::from_yaml(text).unwrap()).unwrap();
    assert_eq!(build(&s, &[("a", "1"), ("b", "2")]).unwrap(), "api:b=2/a=1");
}

#[test]
fn values_are_trimmed_and_empty_means_absent() {
    let s = tenant_route();
    let trimmed = build(&s, &[("tenant", " \tacme \t"), ("route", "  ")]).unwrap();
    assert_eq!(trimmed, "api:tenant=acme/route=~none");
    assert_eq!(
        build(&s, &[("tenant", "acme")]).unwrap(),
        trimmed,
        "absent and blank optional values are the same"
    );
    let inner = build(&s, &[("tenant", "a  b")]).unwrap();
    assert_eq!(inner, "api:tenant=a%20%20b/route=~none");
}

#[test]
fn refusals_name_the_dimension() {
    let s = tenant_route();
    let cases: [(&[(&str, &str)], &str); 4] = [
        (
            &[("route", "/x")],
            "dimension 'tenant': required but missing",
        ),
        (
            &[("tenant", "   ")],
            "dimension 'tenant': required but missing",
        ),
        (
            &[("tenant", "a\nb")],
            "dimension 'tenant': value contains a control character",
        ),
        (
            &[("tenant", "a"), ("route", "x"), ("route", "y")],
            "dimension 'route': dimension is given more than once",
        ),
    ];
    for (entries, expected) in cases {
        assert_eq!(build(&s, entries).unwrap_err().to_string(), expected);
    }
    let long = "x".repeat(129);
    assert_eq!(
        build(&s, &[("tenant", &long)]).unwrap_err(),
        KeyError::Invalid {
            dimension: "tenant".into(),
            problem: ValueProblem::TooLong { len: 129, max: 128 },
        }
    );
    let many: Vec<(&str, &str)> = (0..=ENTRIES_MAX).map(|_| ("x", "y")).collect();
    assert!(matches!(
        build(&s, &many),
        Err(KeyError::TooManyEntries { .. })
    ));
}

#[test]
fn allow_lists_and_key_length_are_enforced() {
    let s = schema("  - {name: method, values: [GET, POST]}\n  - {name: user, max_len: 200}\n");
    assert_eq!(
        build(&s, &[("method", "GET"), ("user", "u")]).unwrap(),
        "api:method=GET/user=u"
    );
    assert_eq!(
        build(&s, &[("method", "PATCH")]).unwrap_err().to_string(),
        "dimension 'method': value is not one of the dimension's allowed values"
    );
    // 100 bytes of '/' encode to 300: within max_len, over the key length limit.
    let slashes = "/".repeat(100);
    assert_eq!(
        build(&s, &[("user", &slashes)]).unwrap_err().to_string(),
        "dimension 'user': key would be longer than 256 bytes"
    );
    let roomy = s.clone().with_key_len_max(400);
    assert_eq!(build(&roomy, &[("user", &slashes)]).unwrap().len(), 322);
}

#[test]
fn overflow_aggregates_unknown_identities_into_one_key() {
    let s = schema(
        "  - {name: tenant, required: true, overflow: true, values: [acme, globex]}\n  - {name: route}\n",
    );
    assert_eq!(s.overflow_key(), "api:~overflow");
    let mut builder = KeyBuilder::new();
    let mut keys = BTreeSet::new();
    for i in 0..1000 {
        let sprayed = format!("attacker-{i}");
        let route = format!("/r{i}");
        let k = builder
            .build(&s, &[("tenant", &sprayed), ("route", &route)])
            .unwrap();
        assert_eq!(
            k.overflow.map(|o| (o.dimension, o.reason)),
            Some(("tenant", OverflowReason::Invalid(ValueProblem::Unlisted)))
        );
        keys.insert(k.key.to_owned());
    }
    let missing = builder.build(&s, &[("route", "/x")]).unwrap();
    assert_eq!(missing.overflow.unwrap().reason, OverflowReason::Missing);
    keys.insert(missing.key.to_owned());
    let invalid = builder.build(&s, &[("tenant", "a\u{7}")]).unwrap();
    assert_eq!(
        invalid.overflow.unwrap().reason,
        OverflowReason::Invalid(ValueProblem::ControlCharacter)
    );
    keys.insert(invalid.key.to_owned());
    assert_eq!(keys.len(), 1, "one overflow key per policy: {keys:?}");

    let known = builder
        .build(&s, &[("tenant", "acme"), ("route", "/x")])
        .unwrap();
    assert_eq!(known.overflow, None);
    assert_eq!(known.key, "api:tenant=acme/route=%2Fx");
}

#[test]
fn different_policies_never_share_keys() {
    let a = KeySchema::new(
        &Policy::from_yaml("id: a\nrate: {units: 1, per: 1s}\ndimensions: [{name: x}]\n").unwrap(),
    )
    .unwrap();
    let ab = KeySchema::new(
        &Policy::from_yaml("id: a-b\nrate: {units: 1, per: 1s}\ndimensions: [{name: x}]\n")
            .unwrap(),
    )
    .unwrap();
    assert_ne!(
        build(&a, &[("x", "b")]).unwrap(),
        build(&ab, &[("x", "b")]).unwrap()
    );
    assert_ne!(a.overflow_key(), ab.overflow_key());
}

#[test]
fn the_builder_reuses_its_buffer() {
    let s = tenant_route();
    let mut builder = KeyBuilder::new();
    let first = builder
        .build(&s, &[("tenant", "ACME"), ("route", "/v1")])
        .unwrap()
        .key
        .as_ptr() as usize;
    for i in 0..100 {
        let tenant = format!("TENANT-{i}");
        let key = builder
            .build(&s, &[("tenant", &tenant), ("route", "/v1")])
            .unwrap();
        assert_eq!(key.key.as_ptr() as usize, first, "no reallocation");
    }
}

#[test]
fn invalid_policies_cannot_make_schemas() {
    let mut p =
        Policy::from_yaml("id: a\nrate: {units: 1, per: 1s}\ndimensions: [{name: x}]\n").unwrap();
    p.dimensions[0].name = "x/y".into();
    assert!(KeySchema::new(&p).is_err());
}

/// A verbatim schema (envoyproxy/ratelimit rules) keys every value as given.
#[test]
fn verbatim_values_are_keys_as_given() {
    let s = schema("  - {name: path, required: true, lowercase: true, max_len: 8}\n")
        .verbatim()
        .with_key_len_max(4096);
    let key = |v: &str| build(&s, &[("path", v)]).unwrap();
    assert_eq!(key(" a"), "api:path=%20a");
    assert_ne!(key(" a"), key("a"), "spaces are part of the value");
    assert_ne!(key("A"), key("a"), "no lowercasing");
    assert_eq!(key(""), "api:path=", "an empty value is a value");
    assert_eq!(key("a\tb"), "api:path=a%09b");
    let long = format!("/{}", "segment/".repeat(24));
    assert!(long.len() > 190);
    assert!(
        key(&long).ends_with("segment%2F"),
        "max_len does not apply, only the key length"
    );
    assert!(matches!(build(&s, &[]), Err(KeyError::Missing { .. })));
}
