//! The Envoy rate-limit contract, checked field by field against the compiled descriptors:
//! packages, files, message and enum names (with nesting), field numbers, types, labels and
//! referenced type names. Any drift from Envoy's wire contract fails here.

mod support;

use prost_types::field_descriptor_proto::{Label, Type};
use support::Descriptors;

const RLS: &str = "envoy.service.ratelimit.v3";
const REQ: &str = "envoy.service.ratelimit.v3.RateLimitRequest";
const RESP: &str = "envoy.service.ratelimit.v3.RateLimitResponse";
const RATE_LIMIT: &str = "envoy.service.ratelimit.v3.RateLimitResponse.RateLimit";
const STATUS: &str = "envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus";
const QUOTA: &str = "envoy.service.ratelimit.v3.RateLimitResponse.Quota";
const DESC: &str = "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor";
const ENTRY: &str = "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry";
const OVERRIDE: &str = "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.RateLimitOverride";
const HEADER: &str = "envoy.config.core.v3.HeaderValue";

/// One field of the contract: (message, field, number, type, label, referenced type).
type FieldRow = (&'static str, &'static str, i32, Type, Label, &'static str);

const ONE: Label = Label::Optional;
const MANY: Label = Label::Repeated;

#[rustfmt::skip]
const FIELDS: &[FieldRow] = &[
    (REQ, "domain", 1, Type::String, ONE, ""),
    (REQ, "descriptors", 2, Type::Message, MANY, ".envoy.extensions.common.ratelimit.v3.RateLimitDescriptor"),
    (REQ, "hits_addend", 3, Type::Uint32, ONE, ""),
    (DESC, "entries", 1, Type::Message, MANY, ".envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry"),
    (DESC, "limit", 2, Type::Message, ONE, ".envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.RateLimitOverride"),
    (DESC, "hits_addend", 3, Type::Message, ONE, ".google.protobuf.UInt64Value"),
    (ENTRY, "key", 1, Type::String, ONE, ""),
    (ENTRY, "value", 2, Type::String, ONE, ""),
    (OVERRIDE, "requests_per_unit", 1, Type::Uint32, ONE, ""),
    (OVERRIDE, "unit", 2, Type::Enum, ONE, ".envoy.type.v3.RateLimitUnit"),
    (RESP, "overall_code", 1, Type::Enum, ONE, ".envoy.service.ratelimit.v3.RateLimitResponse.Code"),
    (RESP, "statuses", 2, Type::Message, MANY, ".envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus"),
    (RESP, "response_headers_to_add", 3, Type::Message, MANY, ".envoy.config.core.v3.HeaderValue"),
    (RESP, "request_headers_to_add", 4, Type::Message, MANY, ".envoy.config.core.v3.HeaderValue"),
    (RESP, "raw_body", 5, Type::Bytes, ONE, ""),
    (RESP, "dynamic_metadata", 6, Type::Message, ONE, ".google.protobuf.Struct"),
    (RESP, "quota", 7, Type::Message, ONE, ".envoy.service.ratelimit.v3.RateLimitResponse.Quota"),
    (RATE_LIMIT, "name", 3, Type::String, ONE, ""),
    (RATE_LIMIT, "requests_per_unit", 1, Type::Uint32, ONE, ""),
    (RATE_LIMIT, "unit", 2, Type::Enum, ONE, ".envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit"),
    (STATUS, "code", 1, Type::Enum, ONE, ".envoy.service.ratelimit.v3.RateLimitResponse.Code"),
    (STATUS, "current_limit", 2, Type::Message, ONE, ".envoy.service.ratelimit.v3.RateLimitResponse.RateLimit"),
    (STATUS, "limit_remaining", 3, Type::Uint32, ONE, ""),
    (STATUS, "duration_until_reset", 4, Type::Message, ONE, ".google.protobuf.Duration"),
    (STATUS, "quota", 5, Type::Message, ONE, ".envoy.service.ratelimit.v3.RateLimitResponse.Quota"),
    (QUOTA, "requests", 1, Type::Uint32, ONE, ""),
    (QUOTA, "valid_until", 2, Type::Message, ONE, ".google.protobuf.Timestamp"),
    (QUOTA, "id", 3, Type::String, ONE, ""),
    (HEADER, "key", 1, Type::String, ONE, ""),
    (HEADER, "value", 2, Type::String, ONE, ""),
    (HEADER, "raw_value", 3, Type::Bytes, ONE, ""),
];

/// Every enum of the contract with all of its values.
#[rustfmt::skip]
const ENUMS: &[(&str, &[(&str, i32)])] = &[
    ("envoy.type.v3.RateLimitUnit", &[
        ("UNKNOWN", 0), ("SECOND", 1), ("MINUTE", 2), ("HOUR", 3), ("DAY", 4), ("MONTH", 5),
        ("YEAR", 6),
    ]),
    ("envoy.service.ratelimit.v3.RateLimitResponse.Code", &[
        ("UNKNOWN", 0), ("OK", 1), ("OVER_LIMIT", 2),
    ]),
    ("envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit", &[
        ("UNKNOWN", 0), ("SECOND", 1), ("MINUTE", 2), ("HOUR", 3), ("DAY", 4), ("WEEK", 7),
        ("MONTH", 5), ("YEAR", 6),
    ]),
];

/// Where each top-level Envoy type lives: (file, package, message or enum name).
#[rustfmt::skip]
const FILES: &[(&str, &str, &str)] = &[
    ("envoy/service/ratelimit/v3/rls.proto", RLS, "RateLimitRequest"),
    ("envoy/service/ratelimit/v3/rls.proto", RLS, "RateLimitResponse"),
    ("envoy/extensions/common/ratelimit/v3/ratelimit.proto", "envoy.extensions.common.ratelimit.v3", "RateLimitDescriptor"),
    ("envoy/config/core/v3/base.proto", "envoy.config.core.v3", "HeaderValue"),
    ("envoy/type/v3/ratelimit_unit.proto", "envoy.type.v3", "RateLimitUnit"),
];

#[test]
fn every_contract_field_has_its_number_type_and_label() {
    let d = Descriptors::load();
    for &(msg, name, number, ty, label, type_name) in FIELDS {
        let field = d.field(msg, name);
        let at = format!("{msg}.{name}");
        assert_eq!(field.number(), number, "{at}: number");
        assert_eq!(field.r#type(), ty, "{at}: type");
        assert_eq!(field.label(), label, "{at}: label");
        assert_eq!(field.type_name(), type_name, "{at}: type name");
        // proto3 `optional` would change presence in generated code; Envoy uses none.
        assert!(!field.proto3_optional(), "{at}: proto3 optional");
    }
}

#[test]
fn contract_messages_have_no_extra_fields() {
    let d = Descriptors::load();
    let mut messages: Vec<&str> = FIELDS.iter().map(|row| row.0).collect();
    messages.dedup();
    for msg in messages {
        let mut want: Vec<(&str, i32)> = FIELDS
            .iter()
            .filter(|row| row.0 == msg)
            .map(|row| (row.1, row.2))
            .collect();
        let mut got: Vec<(&str, i32)> = d
            .message(msg)
            .field
            .iter()
            .map(|f| (f.name(), f.number()))
            .collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "{msg}");
    }
}

#[test]
fn quota_expiry_is_the_expiration_specifier_oneof() {
    let d = Descriptors::load();
    let quota = d.message(QUOTA);
    let field = d.field(QUOTA, "valid_until");
    let index = usize::try_from(field.oneof_index.expect("valid_until is in a oneof")).unwrap();
    assert_eq!(quota.oneof_decl[index].name(), "expiration_specifier");
    for other in ["requests", "id"] {
        assert_eq!(d.field(QUOTA, other).oneof_index, None, "{other}");
    }
}

#[test]
fn contract_enums_have_exactly_these_values() {
    let d = Descriptors::load();
    for &(name, values) in ENUMS {
        let got: Vec<(&str, i32)> = d
            .enumeration(name)
            .value
            .iter()
            .map(|v| (v.name(), v.number()))
            .collect();
        assert_eq!(got, values, "{name}");
    }
}

#[test]
fn envoy_types_live_in_envoys_files_and_packages() {
    let d = Descriptors::load();
    for &(file, package, top_level) in FILES {
        let f = d.file(file);
        assert_eq!(f.package(), package, "{file}");
        let declared = f.message_type.iter().any(|m| m.name() == top_level)
            || f.enum_type.iter().any(|e| e.name() == top_level);
        assert!(declared, "{top_level} not declared in {file}");
    }
}

#[test]
fn rate_limit_service_is_unary_should_rate_limit() {
    let d = Descriptors::load();
    let file = d.file("envoy/service/ratelimit/v3/rls.proto");
    assert_eq!(file.service.len(), 1);
    let service = &file.service[0];
    assert_eq!(
        format!("{}.{}", file.package(), service.name()),
        "envoy.service.ratelimit.v3.RateLimitService"
    );
    assert_eq!(service.method.len(), 1);
    let method = &service.method[0];
    assert_eq!(method.name(), "ShouldRateLimit");
    assert_eq!(
        method.input_type(),
        ".envoy.service.ratelimit.v3.RateLimitRequest"
    );
    assert_eq!(
        method.output_type(),
        ".envoy.service.ratelimit.v3.RateLimitResponse"
    );
    assert!(!method.client_streaming() && !method.server_streaming());
}
