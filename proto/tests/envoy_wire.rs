//! Byte-level checks of the Envoy rate-limit messages against hand-computed protobuf
//! encodings. A protobuf tag byte is `field_number << 3 | wire_type`, with wire type 0 for
//! varints and 2 for length-delimited fields; every expected byte below is derived that way,
//! independently of the generated code.

use leasehold_proto::envoy::config::core::v3::HeaderValue;
use leasehold_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::{Entry, RateLimitOverride},
    RateLimitDescriptor,
};
use leasehold_proto::envoy::r#type::v3::RateLimitUnit;
use leasehold_proto::envoy::service::ratelimit::v3::{
    rate_limit_response::{
        quota::ExpirationSpecifier, rate_limit::Unit, Code, DescriptorStatus, Quota, RateLimit,
    },
    RateLimitRequest, RateLimitResponse,
};
use prost::Message;

/// `RateLimitRequest{domain:"d", descriptors:[{entries:[{k,v}], hits_addend:5}], hits_addend:3}`.
const REQUEST_BYTES: &[u8] = &[
    0x0a, 0x01, b'd', // 1: domain, LEN 1
    0x12, 0x0c, // 2: descriptors[0], LEN 12
    0x0a, 0x06, // . 1: entries[0], LEN 6
    0x0a, 0x01, b'k', // . . 1: key
    0x12, 0x01, b'v', // . . 2: value
    0x1a, 0x02, // . 3: hits_addend (UInt64Value), LEN 2
    0x08, 0x05, // . . 1: value = 5
    0x18, 0x03, // 3: hits_addend = 3 (varint)
];

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "v".into(),
            }],
            limit: None,
            hits_addend: Some(5),
        }],
        hits_addend: 3,
    }
}

#[test]
fn request_encodes_to_hand_computed_bytes() {
    assert_eq!(request().encode_to_vec(), REQUEST_BYTES);
}

#[test]
fn request_decodes_from_hand_computed_bytes() {
    assert_eq!(RateLimitRequest::decode(REQUEST_BYTES).unwrap(), request());
}

#[test]
fn request_decodes_fields_in_any_order_and_skips_unknown_fields() {
    // Another encoder may order fields differently and a newer Envoy may add fields; both
    // must decode to the same request.
    let bytes: &[u8] = &[
        0x18, 0x03, // 3: hits_addend = 3
        0xf8, 0x01, 0x2a, // 31 (unknown, varint) = 42: tag 31<<3|0 = 248 = 0xf8 0x01
        0x12, 0x0c, 0x0a, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v', 0x1a, 0x02, 0x08, 0x05, 0x0a,
        0x01, b'd', // 1: domain
    ];
    assert_eq!(RateLimitRequest::decode(bytes).unwrap(), request());
}

#[test]
fn zero_hits_addend_is_absent_but_explicit_zero_descriptor_hits_is_present() {
    // The request-level addend is a plain scalar: 0 (meaning 1) is not written at all. The
    // descriptor-level addend is a wrapper: an explicit 0 is written and survives decoding.
    let descriptor = RateLimitDescriptor {
        entries: vec![],
        limit: None,
        hits_addend: Some(0),
    };
    assert_eq!(descriptor.encode_to_vec(), [0x1a, 0x00]);
    assert_eq!(
        RateLimitDescriptor::decode(&[0x1a, 0x00][..])
            .unwrap()
            .hits_addend,
        Some(0)
    );
    let req = RateLimitRequest {
        domain: String::new(),
        descriptors: vec![],
        hits_addend: 0,
    };
    assert!(req.encode_to_vec().is_empty());
}

#[test]
fn descriptor_limit_override_uses_envoy_type_unit_numbers() {
    let descriptor = RateLimitDescriptor {
        entries: vec![],
        limit: Some(RateLimitOverride {
            requests_per_unit: 100,
            unit: RateLimitUnit::Minute as i32,
        }),
        hits_addend: None,
    };
    // 2: limit, LEN 4 { 1: requests_per_unit = 100, 2: unit = MINUTE (2) }
    let expected = [0x12, 0x04, 0x08, 0x64, 0x10, 0x02];
    assert_eq!(descriptor.encode_to_vec(), expected);
    assert_eq!(
        RateLimitDescriptor::decode(&expected[..]).unwrap(),
        descriptor
    );
}

/// A response exercising every field of `RateLimitResponse`, with a WEEK (= 7) limit.
const RESPONSE_BYTES: &[u8] = &[
    0x08, 0x02, // 1: overall_code = OVER_LIMIT
    0x12, 0x11, // 2: statuses[0], LEN 17
    0x08, 0x02, // . 1: code = OVER_LIMIT
    0x12, 0x07, // . 2: current_limit, LEN 7
    0x08, 0x0a, // . . 1: requests_per_unit = 10
    0x10, 0x07, // . . 2: unit = WEEK (7)
    0x1a, 0x01, b'n', // . . 3: name = "n"
    0x18, 0x04, // . 3: limit_remaining = 4
    0x22, 0x02, // . 4: duration_until_reset, LEN 2
    0x08, 0x1e, // . . 1: seconds = 30
    0x1a, 0x06, // 3: response_headers_to_add[0], LEN 6
    0x0a, 0x01, b'a', 0x12, 0x01, b'b', // . key "a", value "b"
    0x22, 0x05, // 4: request_headers_to_add[0], LEN 5
    0x0a, 0x01, b'c', 0x1a, 0x00, // . key "c", explicit empty raw_value (3, LEN 0)
    0x2a, 0x02, b'h', b'i', // 5: raw_body = "hi"
    0x32, 0x09, // 6: dynamic_metadata (Struct), LEN 9
    0x0a, 0x07, // . 1: fields map entry, LEN 7
    0x0a, 0x01, b'x', // . . 1: key = "x"
    0x12, 0x02, 0x20, 0x01, // . . 2: value = Value{4: bool_value = true}
    0x3a, 0x09, // 7: quota, LEN 9
    0x08, 0x09, // . 1: requests = 9
    0x12, 0x02, 0x08, 0x01, // . 2: valid_until = Timestamp{seconds: 1}
    0x1a, 0x01, b'q', // . 3: id = "q"
];

fn response() -> RateLimitResponse {
    let flag = prost_types::Value {
        kind: Some(prost_types::value::Kind::BoolValue(true)),
    };
    RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses: vec![DescriptorStatus {
            code: Code::OverLimit as i32,
            current_limit: Some(RateLimit {
                name: "n".into(),
                requests_per_unit: 10,
                unit: Unit::Week as i32,
            }),
            limit_remaining: 4,
            duration_until_reset: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
            quota: None,
        }],
        response_headers_to_add: vec![HeaderValue {
            key: "a".into(),
            value: "b".into(),
            raw_value: vec![],
        }],
        // proto3 does not write an empty `bytes` field, so this header encodes as its key
        // alone; RESPONSE_BYTES carries an explicit empty raw_value, which must decode to
        // the same message.
        request_headers_to_add: vec![HeaderValue {
            key: "c".into(),
            value: String::new(),
            raw_value: vec![],
        }],
        raw_body: b"hi".to_vec(),
        dynamic_metadata: Some(prost_types::Struct {
            fields: [("x".to_string(), flag)].into_iter().collect(),
        }),
        quota: Some(Quota {
            requests: 9,
            id: "q".into(),
            expiration_specifier: Some(ExpirationSpecifier::ValidUntil(prost_types::Timestamp {
                seconds: 1,
                nanos: 0,
            })),
        }),
    }
}

#[test]
fn response_decodes_from_hand_computed_bytes() {
    assert_eq!(
        RateLimitResponse::decode(RESPONSE_BYTES).unwrap(),
        response()
    );
}

#[test]
fn response_encodes_to_hand_computed_bytes() {
    // Identical to RESPONSE_BYTES except the canonical encoder omits the empty raw_value of
    // the request header: field 4 shrinks from LEN 5 to LEN 3.
    let mut expected = RESPONSE_BYTES.to_vec();
    let at = expected
        .windows(7)
        .position(|w| w == [0x22, 0x05, 0x0a, 0x01, b'c', 0x1a, 0x00])
        .unwrap();
    expected.splice(at..at + 7, [0x22, 0x03, 0x0a, 0x01, b'c']);
    assert_eq!(response().encode_to_vec(), expected);
}

#[test]
fn header_raw_value_is_field_three_bytes() {
    let header = HeaderValue {
        key: String::new(),
        value: String::new(),
        raw_value: vec![0xff, 0x00],
    };
    assert_eq!(header.encode_to_vec(), [0x1a, 0x02, 0xff, 0x00]);
}

#[test]
fn enum_numbers_match_envoy() {
    let units = [
        (Unit::Unknown, 0),
        (Unit::Second, 1),
        (Unit::Minute, 2),
        (Unit::Hour, 3),
        (Unit::Day, 4),
        (Unit::Month, 5),
        (Unit::Year, 6),
        (Unit::Week, 7),
    ];
    for (unit, number) in units {
        assert_eq!(unit as i32, number, "{unit:?}");
    }
    let type_units = [
        (RateLimitUnit::Unknown, 0),
        (RateLimitUnit::Second, 1),
        (RateLimitUnit::Minute, 2),
        (RateLimitUnit::Hour, 3),
        (RateLimitUnit::Day, 4),
        (RateLimitUnit::Month, 5),
        (RateLimitUnit::Year, 6),
    ];
    for (unit, number) in type_units {
        assert_eq!(unit as i32, number, "{unit:?}");
    }
    let codes = [(Code::Unknown, 0), (Code::Ok, 1), (Code::OverLimit, 2)];
    for (code, number) in codes {
        assert_eq!(code as i32, number, "{code:?}");
    }
}
