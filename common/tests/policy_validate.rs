//! Every validation rule, checked through the message an author reads.

use leasehold_common::policy::{Policy, PolicyError, Problem};

/// A valid base document; each case appends or replaces lines.
const BASE: &str = "id: base\nrate: { units: 100, per: 1s }\n";

fn messages(text: &str) -> Vec<String> {
    match Policy::from_yaml(text) {
        Err(PolicyError::Invalid(errors)) => errors.0.iter().map(ToString::to_string).collect(),
        Err(other) => panic!("expected validation errors, got {other}\n{text}"),
        Ok(_) => panic!("expected validation errors, document was accepted\n{text}"),
    }
}

fn assert_rejects(text: &str, expected: &str) {
    let all = messages(text);
    assert!(
        all.iter().any(|m| m == expected),
        "expected `{expected}` among {all:#?}\n{text}"
    );
}

#[test]
fn base_document_is_valid() {
    Policy::from_yaml(BASE).unwrap();
}

#[test]
fn identity_rules() {
    assert_rejects(
        "id: Tenant API\nrate: {units: 1, per: 1s}\n",
        "id: 'Tenant API' is not a valid name: use 1 to 64 of a-z, 0-9 and '-'",
    );
    let long = "a".repeat(65);
    assert_rejects(
        &format!("id: {long}\nrate: {{units: 1, per: 1s}}\n"),
        &format!("id: '{long}' is not a valid name: use 1 to 64 of a-z, 0-9 and '-'"),
    );
    let desc = "d".repeat(1025);
    assert_rejects(
        &format!("{BASE}description: {desc}\n"),
        "description: 1025 bytes, at most 1024 allowed",
    );
}

#[test]
fn rate_rules() {
    assert_rejects(
        "id: a\nrate: {units: 0, per: 1s}\n",
        "rate.units: must be positive",
    );
    assert_rejects(
        "id: a\nrate: {units: 5, per: 0s}\n",
        "rate.per: must be positive",
    );
    assert_rejects(
        "id: a\nrate: {units: 5, per: 400d}\n",
        "rate.per: 400d exceeds 366d (use calendar_quota for longer periods)",
    );
    assert_rejects("id: a\n", "rate: required when algorithm is token_bucket");
    assert_rejects(
        "id: a\nalgorithm: concurrency\nconcurrency: {max_in_flight: 5}\nrate: {units: 1, per: 1s}\n",
        "rate: not used when algorithm is concurrency",
    );
}

#[test]
fn burst_rules() {
    assert_rejects(&format!("{BASE}burst: 0\n"), "burst: must be positive");
    assert_rejects(
        "id: a\nalgorithm: fixed_window\nrate: {units: 10, per: 1m}\nburst: 20\n",
        "burst: not used when algorithm is fixed_window",
    );
    assert_rejects(
        &format!("{BASE}burst: 3\ncost: {{unit: weighted, routes: {{/v1/search: 5}}}}\n"),
        "burst: 3 is below the largest cost 5 (cost.routes./v1/search)",
    );
    assert_rejects(
        "id: a\nrate: {units: 2, per: 1s}\ncost: {default: 4}\n",
        "rate.units (the default burst): 2 is below the largest cost 4 (cost.default)",
    );
    assert_rejects(
        "id: a\nalgorithm: sliding_window\nrate: {units: 2, per: 1s}\ncost: {default: 4}\n",
        "rate.units: 2 is below the largest cost 4 (cost.default)",
    );
    assert_rejects(
        "id: a\nalgorithm: concurrency\nconcurrency: {max_in_flight: 2}\ncost: {default: 3}\n",
        "concurrency.max_in_flight: 2 is below the largest cost 3 (cost.default)",
    );
}

#[test]
fn algorithm_block_rules() {
    assert_rejects(
        "id: a\nalgorithm: calendar_quota\n",
        "calendar: required when algorithm is calendar_quota",
    );
    assert_rejects(
        &format!("{BASE}calendar: {{period: day, units: 5}}\n"),
        "calendar: not used when algorithm is token_bucket",
    );
    assert_rejects(
        "id: a\nalgorithm: calendar_quota\ncalendar: {period: day, time_zone: Europe/Berln, units: 0}\n",
        "calendar.time_zone: unknown time zone 'Europe/Berln'",
    );
    assert_rejects(
        "id: a\nalgorithm: calendar_quota\ncalendar: {period: day, units: 0}\n",
        "calendar.units: must be positive",
    );
    assert_rejects(
        "id: a\nalgorithm: concurrency\n",
        "concurrency: required when algorithm is concurrency",
    );
    assert_rejects(
        &format!("{BASE}concurrency: {{max_in_flight: 3}}\n"),
        "concurrency: not used when algorithm is token_bucket",
    );
    assert_rejects(
        "id: a\nalgorithm: concurrency\nconcurrency: {max_in_flight: 0}\n",
        "concurrency.max_in_flight: 0 is outside [1, 1000000]",
    );
}

#[test]
fn cost_rules() {
    assert_rejects(
        &format!("{BASE}cost: {{default: 0}}\n"),
        "cost.default: must be positive",
    );
    assert_rejects(
        &format!("{BASE}cost: {{unit: request, routes: {{/a: 2}}}}\n"),
        "cost.routes: not used when cost.unit is not weighted",
    );
    assert_rejects(
        &format!("{BASE}cost: {{unit: weighted, routes: {{/a: 0}}}}\n"),
        "cost.routes./a: must be positive",
    );
}

#[test]
fn dimension_and_key_rules() {
    let dims = |body: &str| format!("{BASE}dimensions:\n{body}");
    assert_rejects(
        &dims("  - name: ten/ant\n"),
        "dimensions[0].name: 'ten/ant' is not a valid name: use 1 to 64 of A-Z, a-z, 0-9, '_', '.' and '-'",
    );
    assert_rejects(
        &dims("  - name: t\n  - name: t\n"),
        "dimensions[1].name: 't' appears more than once",
    );
    assert_rejects(
        &dims("  - name: t\n    max_len: 0\n"),
        "dimensions[0].max_len: 0 is outside [1, 256]",
    );
    assert_rejects(
        &dims("  - name: t\n    max_len: 300\n"),
        "dimensions[0].max_len: 300 is outside [1, 256]",
    );
    assert_rejects(
        &dims("  - name: t\n    lowercase: true\n    values: [Acme]\n"),
        "dimensions[0].values[0]: 'Acme' is not canonical: it canonicalises to 'acme'",
    );
    assert_rejects(
        &dims("  - name: t\n    values: [' a']\n"),
        "dimensions[0].values[0]: ' a' is not canonical: it canonicalises to 'a'",
    );
    assert_rejects(
        &dims("  - name: t\n    values: [a, a]\n"),
        "dimensions[0].values[1]: 'a' appears more than once",
    );
    assert_rejects(
        &dims("  - name: t\n    max_len: 2\n    values: [abc]\n"),
        "dimensions[0].values[0]: 'abc' is not canonical: value is 3 bytes, longer than 2",
    );
    let nine: String = (0..9).map(|i| format!("  - name: d{i}\n")).collect();
    assert_rejects(&dims(&nine), "dimensions: 9 entries, at most 8 allowed");

    let keyed = |key: &str| format!("{BASE}dimensions: [{{name: a}}, {{name: b}}]\nkey: {key}\n");
    assert_rejects(
        &keyed("[a, c, b]"),
        "key[1]: 'c' is not a declared dimension",
    );
    assert_rejects(&keyed("[a, a, b]"), "key[1]: 'a' appears more than once");
    assert_rejects(
        &keyed("[b]"),
        "dimensions[0]: dimension 'a' is declared but not in key",
    );
}

#[test]
fn failure_rules() {
    assert_rejects(
        &format!("{BASE}failure: {{mode: restricted}}\n"),
        "failure.rate: required when failure.mode is restricted",
    );
    assert_rejects(
        &format!("{BASE}failure: {{mode: restricted}}\n"),
        "failure.min_priority: required when failure.mode is restricted",
    );
    assert_rejects(
        &format!("{BASE}failure: {{mode: fail_open, min_priority: 3}}\n"),
        "failure.min_priority: not used when failure.mode is not restricted",
    );
    assert_rejects(
        &format!("{BASE}failure: {{mode: fail_closed, rate: {{units: 1, per: 1s}}}}\n"),
        "failure.rate: not used when failure.mode is not restricted",
    );
    assert_rejects(
        &format!(
            "{BASE}failure: {{mode: restricted, min_priority: 1, rate: {{units: 7, per: 50ms}}}}\n"
        ),
        "failure.rate: 7/50ms exceeds the policy rate 100/1s",
    );
    assert_rejects(
        &format!(
            "{BASE}failure: {{mode: restricted, min_priority: 1, rate: {{units: 0, per: 1s}}}}\n"
        ),
        "failure.rate.units: must be positive",
    );
}

#[test]
fn lease_rules() {
    let lease = |body: &str| format!("{BASE}lease: {{{body}}}\n");
    assert_rejects(
        &lease("reserve_fraction: 1.5"),
        "lease.reserve_fraction: 1.5 is outside [0, 1)",
    );
    assert_rejects(
        &lease("reserve_fraction: 1"),
        "lease.reserve_fraction: 1 is outside [0, 1)",
    );
    assert_rejects(&lease("ttl: 5ms"), "lease.ttl: 5ms is outside [10ms, 1h]");
    assert_rejects(&lease("ttl: 2h"), "lease.ttl: 2h is outside [10ms, 1h]");
    assert_rejects(
        &lease("ttl: 10s, refresh_horizon: 20s"),
        "lease.refresh_horizon: 20s exceeds lease.ttl 10s (it must be shorter)",
    );
    assert_rejects(
        &lease("refresh_horizon: 0s"),
        "lease.refresh_horizon: must be positive",
    );
    assert_rejects(
        &lease("min_credit: 0"),
        "lease.min_credit: must be positive",
    );
    assert_rejects(
        &lease("min_credit: 10, max_credit: 5"),
        "lease.max_credit: 5 is outside [lease.min_credit 10, capacity]",
    );
    assert_rejects(
        &lease("max_credit: 5000"),
        "lease.max_credit: 5000 exceeds the policy's capacity 100",
    );
    assert_rejects(
        &lease("min_credit: 101"),
        "lease.min_credit: 101 exceeds the policy's capacity 100",
    );
}

#[test]
fn priority_class_rules() {
    let classes = |body: &str| format!("{BASE}priority_classes: {body}\n");
    assert_rejects(
        &classes("[{name: a, priority: 1}, {name: a, priority: 2}]"),
        "priority_classes[1].name: 'a' appears more than once",
    );
    assert_rejects(
        &classes("[{name: a, priority: 1}, {name: b, priority: 1}]"),
        "priority_classes[1].priority: '1' appears more than once",
    );
    assert_rejects(
        &classes("[{name: a, priority: 1, weight: 0}]"),
        "priority_classes[0].weight: 0 is outside [1, 1000]",
    );
    assert_rejects(
        &classes("[{name: Bad Name, priority: 1}]"),
        "priority_classes[0].name: 'Bad Name' is not a valid name: use 1 to 64 of a-z, 0-9 and '-'",
    );
    let many: Vec<String> = (0..17)
        .map(|i| format!("{{name: c{i}, priority: {i}}}"))
        .collect();
    assert_rejects(
        &classes(&format!("[{}]", many.join(", "))),
        "priority_classes: 17 entries, at most 16 allowed",
    );
}

#[test]
fn all_errors_are_reported_at_once_in_document_order() {
    let text = "id: BAD\nrate: {units: 0, per: 1s}\nburst: 0\n\
        calendar: {period: day, units: 1}\n\
        lease: {reserve_fraction: 2, min_credit: 0}\n";
    let all = messages(text);
    assert_eq!(
        all,
        [
            "id: 'BAD' is not a valid name: use 1 to 64 of a-z, 0-9 and '-'",
            "rate.units: must be positive",
            "burst: must be positive",
            "calendar: not used when algorithm is token_bucket",
            "lease.reserve_fraction: 2 is outside [0, 1)",
            "lease.min_credit: must be positive",
        ]
    );
}

#[test]
fn errors_are_typed() {
    let err = Policy::from_yaml("id: a\nrate: {units: 0, per: 1s}\n").unwrap_err();
    let fields = err.field_errors();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].path, "rate.units");
    assert_eq!(fields[0].problem, Problem::MustBePositive);
}

#[test]
fn shape_rules() {
    let ok = Policy::from_yaml(&format!(
        "{BASE}scope: process\nshape: {{ max_delay: 250ms }}\n"
    ))
    .unwrap();
    assert_eq!(ok.shape.unwrap().max_delay.as_ns(), 250_000_000);
    assert_rejects(
        &format!("{BASE}shape: {{ max_delay: 0ms }}\n"),
        "shape.max_delay: must be positive",
    );
    assert_rejects(
        &format!("{BASE}shape: {{ max_delay: 61s }}\n"),
        "shape.max_delay: 61s is outside (0, 1m]",
    );
    assert_rejects(
        "id: a\nalgorithm: concurrency\nconcurrency: {max_in_flight: 2}\nscope: process\nshape: {max_delay: 1s}\n",
        "shape: shape cannot be honoured for algorithm concurrency: units in flight come back \
         when requests end, not at a time a delay could wait for",
    );
    assert_rejects(
        "id: a\nalgorithm: calendar_quota\ncalendar: {period: day, units: 5}\nshape: {max_delay: 1s}\n",
        "shape: shape cannot be honoured for algorithm calendar_quota: a spent quota comes back \
         at the next calendar period, far beyond any delay",
    );
    assert_rejects(
        &format!("{BASE}enforcement: exact\nshape: {{ max_delay: 1s }}\n"),
        "shape: shape cannot be honoured with enforcement exact: the allocator decides each \
         request now; remove shape or use enforcement: leased",
    );
    // A field of `shape` other than `max_delay` is a YAML error naming it.
    match Policy::from_yaml(&format!("{BASE}shape: {{ max_wait: 1s }}\n")) {
        Err(PolicyError::Yaml(message)) => assert!(message.contains("max_wait"), "{message}"),
        other => panic!("expected a YAML error, got {other:?}"),
    }
}
