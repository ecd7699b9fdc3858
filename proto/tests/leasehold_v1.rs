//! The `leasehold.v1` protocol: a lease survives the wire bit for bit, optional fields keep
//! their presence, and every service, method, message, field, enum and enum value carries a
//! doc comment (the protocol's only reference for field meanings and units).

mod support;

use leasehold_proto::leasehold::v1::{
    lease_service_server::SERVICE_NAME as LEASE_SERVICE, watch_event::Event, AcquireResponse,
    DenyReason, Heartbeat, Lease, WatchEvent,
};
use prost::Message;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorProto};
use support::Descriptors;

fn lease(parent_lease_id: Option<u64>) -> Lease {
    Lease {
        lease_id: u64::MAX,
        grantor_id: "global-1".into(),
        policy_id: "tenant-search".into(),
        policy_version: 7,
        key: "tenant=acme".into(),
        holder_id: "agent-eu-3".into(),
        credit: 1 << 40,
        epoch: 12,
        issued_at_ns: 1_700_000_000_123_456_789,
        ttl_ms: 30_000,
        generation: 3,
        parent_lease_id,
        key_id: "k1".into(),
        signature: (0..64).collect(),
    }
}

#[test]
fn lease_round_trips() {
    for parent in [None, Some(0), Some(41)] {
        let original = lease(parent);
        let decoded = Lease::decode(original.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded, original);
    }
}

#[test]
fn parent_lease_id_zero_is_distinguishable_from_unset() {
    // Field 12, varint 0: tag 12<<3|0 = 0x60.
    let with_zero = lease(Some(0)).encode_to_vec();
    let without = lease(None).encode_to_vec();
    assert_eq!(with_zero.len(), without.len() + 2);
    assert!(with_zero.windows(2).any(|w| w == [0x60, 0x00]));
}

#[test]
fn denial_is_a_response_without_lease() {
    let denial = AcquireResponse {
        lease: None,
        policy: None,
        retry_after_ms: 250,
        deny_reason: DenyReason::FairShare as i32,
    };
    let decoded = AcquireResponse::decode(denial.encode_to_vec().as_slice()).unwrap();
    assert!(decoded.lease.is_none());
    assert_eq!(decoded.deny_reason(), DenyReason::FairShare);
    assert_eq!(decoded.retry_after_ms, 250);
}

#[test]
fn watch_event_oneof_round_trips() {
    let event = WatchEvent {
        seq: 9,
        event: Some(Event::Heartbeat(Heartbeat { interval_ms: 5_000 })),
    };
    assert_eq!(
        WatchEvent::decode(event.encode_to_vec().as_slice()).unwrap(),
        event
    );
}

/// Methods of each service: (service, method, server-streaming).
#[rustfmt::skip]
const METHODS: &[(&str, &[(&str, bool)])] = &[
    ("leasehold.v1.LeaseService", &[
        ("Acquire", false), ("Report", false), ("Release", false), ("Watch", true),
        ("Decide", false), ("Refund", false), ("DecideBatch", false),
        ("LeaseBatch", false),
    ]),
    ("leasehold.v1.AdmitService", &[("Admit", false)]),
    ("leasehold.v1.AdminService", &[
        ("ApplyPolicy", false), ("ListPolicies", false), ("GetPolicy", false),
        ("DiffPolicy", false), ("RollbackPolicy", false), ("ShowBudget", false),
        ("SetBudget", false), ("SplitBudget", false), ("RebalanceBudget", false),
        ("ListLeases", false), ("RevokeLease", false), ("ClusterStatus", false),
        ("AddLearner", false), ("PromoteVoter", false), ("RemoveNode", false),
        ("SetEmergency", false), ("TailAudit", true), ("Backup", false), ("Restore", false),
        ("Usage", false),
    ]),
];

#[test]
fn services_have_exactly_these_methods() {
    assert_eq!(LEASE_SERVICE, "leasehold.v1.LeaseService");
    let d = Descriptors::load();
    for &(service, methods) in METHODS {
        let (package, name) = service.rsplit_once('.').unwrap();
        let found = d
            .files()
            .iter()
            .filter(|f| f.package() == package)
            .flat_map(|f| &f.service)
            .find(|s| s.name() == name)
            .unwrap_or_else(|| panic!("no service {service}"));
        let got: Vec<(&str, bool)> = found
            .method
            .iter()
            .map(|m| (m.name(), m.server_streaming()))
            .collect();
        assert_eq!(got, methods, "{service}");
        assert!(found.method.iter().all(|m| !m.client_streaming()));
    }
}

fn leasehold_files(d: &Descriptors) -> Vec<&FileDescriptorProto> {
    let files: Vec<_> = d
        .files()
        .iter()
        .filter(|f| f.package() == "leasehold.v1")
        .collect();
    assert_eq!(
        files.len(),
        10,
        "common, lease, decide, admit, raft, admin and its four message files"
    );
    files
}

/// Source-info paths (field numbers of `FileDescriptorProto` and friends) of every
/// declaration in a file, with a readable name for failure messages.
fn declarations(file: &FileDescriptorProto) -> Vec<(Vec<i32>, String)> {
    const MESSAGE_TYPE: i32 = 4;
    const ENUM_TYPE: i32 = 5;
    const SERVICE: i32 = 6;
    const METHOD: i32 = 2;
    let mut out = Vec::new();
    for (i, m) in file.message_type.iter().enumerate() {
        message_declarations(m, vec![MESSAGE_TYPE, index(i)], m.name().into(), &mut out);
    }
    for (i, e) in file.enum_type.iter().enumerate() {
        enum_declarations(e, vec![ENUM_TYPE, index(i)], e.name().into(), &mut out);
    }
    for (i, s) in file.service.iter().enumerate() {
        let path = vec![SERVICE, index(i)];
        for (j, m) in s.method.iter().enumerate() {
            let mut at = path.clone();
            at.extend([METHOD, index(j)]);
            out.push((at, format!("{}.{}", s.name(), m.name())));
        }
        out.push((path, s.name().into()));
    }
    out
}

fn message_declarations(
    m: &DescriptorProto,
    path: Vec<i32>,
    name: String,
    out: &mut Vec<(Vec<i32>, String)>,
) {
    const FIELD: i32 = 2;
    const NESTED_TYPE: i32 = 3;
    const ENUM_TYPE: i32 = 4;
    for (i, f) in m.field.iter().enumerate() {
        let mut at = path.clone();
        at.extend([FIELD, index(i)]);
        out.push((at, format!("{name}.{}", f.name())));
    }
    for (i, nested) in m.nested_type.iter().enumerate() {
        let mut at = path.clone();
        at.extend([NESTED_TYPE, index(i)]);
        message_declarations(nested, at, format!("{name}.{}", nested.name()), out);
    }
    for (i, e) in m.enum_type.iter().enumerate() {
        let mut at = path.clone();
        at.extend([ENUM_TYPE, index(i)]);
        enum_declarations(e, at, format!("{name}.{}", e.name()), out);
    }
    out.push((path, name));
}

fn enum_declarations(
    e: &EnumDescriptorProto,
    path: Vec<i32>,
    name: String,
    out: &mut Vec<(Vec<i32>, String)>,
) {
    const VALUE: i32 = 2;
    for (i, v) in e.value.iter().enumerate() {
        let mut at = path.clone();
        at.extend([VALUE, index(i)]);
        out.push((at, format!("{name}.{}", v.name())));
    }
    out.push((path, name));
}

fn index(i: usize) -> i32 {
    i32::try_from(i).unwrap()
}

#[test]
fn every_declaration_is_documented() {
    let d = Descriptors::load();
    let mut undocumented = Vec::new();
    let mut checked = 0;
    for file in leasehold_files(&d) {
        let info = file.source_code_info.as_ref().expect("source info kept");
        for (path, name) in declarations(file) {
            checked += 1;
            let documented = info
                .location
                .iter()
                .any(|l| l.path == path && !l.leading_comments().trim().is_empty());
            if !documented {
                undocumented.push(format!("{}: {name}", file.name()));
            }
        }
    }
    assert!(checked > 300, "only {checked} declarations found");
    assert!(undocumented.is_empty(), "undocumented: {undocumented:#?}");
}

#[test]
fn enums_reserve_zero_for_unspecified() {
    let d = Descriptors::load();
    for file in leasehold_files(&d) {
        let nested = file.message_type.iter().flat_map(|m| &m.enum_type);
        for e in file.enum_type.iter().chain(nested) {
            let zero = e.value.iter().find(|v| v.number() == 0).unwrap();
            assert!(
                zero.name().ends_with("_UNSPECIFIED"),
                "{}: zero is {}",
                e.name(),
                zero.name()
            );
        }
    }
}

#[test]
fn descriptor_set_is_self_contained_for_reflection() {
    // A reflection client resolves every import from the same set, well-known types included.
    let d = Descriptors::load();
    let names: Vec<&str> = d.files().iter().map(|f| f.name()).collect();
    for file in d.files() {
        for import in &file.dependency {
            assert!(
                names.contains(&import.as_str()),
                "{} imports {import}",
                file.name()
            );
        }
    }
    assert!(names.contains(&"google/protobuf/duration.proto"));
}
