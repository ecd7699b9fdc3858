use super::*;

const FULL: &str = "\
grpc_addr: unix:/run/leasehold/grpc.sock
http_addr: 127.0.0.1:9080
ratelimit_config: /etc/ratelimit/config
policies: [/etc/leasehold/a.yaml, /etc/leasehold/b.yaml]
standalone: false
allocators: [global-1:7400, global-2:7400]
holder_id: gw-7
allocator_tls: {ca: ca.pem, cert: gw.pem, key: gw-key.pem}
insecure: false
response_headers: true
listen_tls: {ca: gw-ca.pem, cert: listen.pem, key: listen-key.pem}
listen_insecure: false
state_file: /var/lib/leasehold/agent.state
allocator_keys: [00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff]
unknown_policy: allow
decide_timeout_ms: 250
policy_stale_after_ms: 60000
connections_max: 64
connections_per_peer_max: 16
idle_timeout_ms: 30000
connection_age_max_ms: 60000
header_timeout_ms: 2000
ratelimit_key_len_max: 8192
keys_max: 65536
ratelimit_count_denied: false
acquire_rate_max_per_s: 500
acquire_waiting_max: 1024
shaped_waiting_max: 64
request_bytes_buffered_max: 8388608
request_body_timeout_ms: 3000
";

fn parse(text: &str) -> Result<AgentConfig, ConfigError> {
    AgentConfig::from_yaml(Path::new("agent.yaml"), text)
}

fn files(prefix: &str) -> TlsFiles {
    TlsFiles {
        ca: format!("{prefix}ca.pem").into(),
        cert: format!("{prefix}cert.pem").into(),
        key: format!("{prefix}key.pem").into(),
    }
}

#[test]
fn every_field_is_read_from_the_file() {
    let c = parse(FULL).unwrap();
    let expected = AgentConfig {
        grpc_addr: "unix:/run/leasehold/grpc.sock".into(),
        http_addr: "127.0.0.1:9080".into(),
        ratelimit_config: Some("/etc/ratelimit/config".into()),
        policies: vec![
            "/etc/leasehold/a.yaml".into(),
            "/etc/leasehold/b.yaml".into(),
        ],
        standalone: false,
        allocators: vec!["global-1:7400".into(), "global-2:7400".into()],
        holder_id: "gw-7".into(),
        allocator_tls: Some(TlsFiles {
            ca: "ca.pem".into(),
            cert: "gw.pem".into(),
            key: "gw-key.pem".into(),
        }),
        insecure: false,
        response_headers: true,
        listen_tls: Some(TlsFiles {
            ca: "gw-ca.pem".into(),
            cert: "listen.pem".into(),
            key: "listen-key.pem".into(),
        }),
        listen_insecure: false,
        state_file: Some("/var/lib/leasehold/agent.state".into()),
        allocator_keys: vec![
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff".into(),
        ],
        unknown_policy: UnknownPolicy::Allow,
        decide_timeout_ms: 250,
        policy_stale_after_ms: 60_000,
        connections_max: Some(64),
        connections_per_peer_max: Some(16),
        idle_timeout_ms: 30_000,
        connection_age_max_ms: 60_000,
        header_timeout_ms: 2_000,
        ratelimit_key_len_max: 8192,
        keys_max: 65_536,
        ratelimit_count_denied: false,
        acquire_rate_max_per_s: 500,
        acquire_waiting_max: 1024,
        shaped_waiting_max: 64,
        request_bytes_buffered_max: 8 << 20,
        request_body_timeout_ms: 3_000,
    };
    assert_eq!(c, expected);
    assert!(c.lease_verifier().unwrap().is_some());
    // A local envoyproxy/ratelimit file is for standalone agents only.
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("ratelimit_config") && e.contains("leasectl policy apply -f"),
        "{e}"
    );
    let mut leasing = c.clone();
    leasing.ratelimit_config = None;
    leasing.validate().unwrap();
    let standalone = AgentConfig {
        standalone: true,
        ratelimit_config: c.ratelimit_config.clone(),
        ..AgentConfig::default()
    };
    standalone.validate().unwrap();
}

#[test]
fn an_empty_file_means_the_defaults() {
    for text in ["", "# nothing set\n", "---\n"] {
        assert_eq!(parse(text).unwrap(), AgentConfig::default(), "{text:?}");
    }
    let d = AgentConfig::default();
    assert_eq!(d.grpc_listen().unwrap().to_string(), GRPC_ADDR_DEFAULT);
    assert!(d.grpc_listen().unwrap().is_local() && d.http_listen().unwrap().is_local());
}

#[test]
fn unknown_fields_are_refused_by_name() {
    for (text, field) in [
        ("grpc_adr: 127.0.0.1:1\n", "grpc_adr"),
        ("listen_tls: {ca: a, cert: b, key: c, kee: d}\n", "kee"),
        (
            "allocator_tls: {ca: a, cert: b, key: c, verify: no}\n",
            "verify",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains("agent.yaml") && e.contains(&format!("unknown field `{field}`")),
            "{e}"
        );
    }
}

#[test]
fn values_of_the_wrong_type_are_refused_by_field() {
    for (text, field) in [
        ("standalone: maybe\n", "standalone"),
        ("policies: /one/file.yaml\n", "policies"),
        ("listen_tls: {ca: a, cert: b}\n", "key"),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(field), "{text}: {e}");
    }
}

#[test]
fn flags_replace_the_files_values_and_leave_the_rest() {
    let mut c = parse(FULL).unwrap();
    c.apply(Overrides {
        grpc_addr: Some("127.0.0.1:7081".into()),
        policies: vec!["/tmp/only.yaml".into()],
        standalone: Some(true),
        insecure: Some(false),
        response_headers: Some(false),
        listen_tls: Some(files("flag-")),
        state_file: Some("/tmp/agent.state".into()),
        shaped_waiting_max: Some(0),
        request_body_timeout_ms: Some(500),
        ..Overrides::default()
    });
    assert_eq!(c.grpc_addr, "127.0.0.1:7081");
    assert_eq!(c.request_body_timeout_ms, 500);
    assert_eq!(c.request_bytes_buffered_max, 8 << 20, "the file's");
    assert_eq!(c.shaped_waiting_max, 0);
    assert_eq!(c.policies, [PathBuf::from("/tmp/only.yaml")]);
    assert!(c.standalone && !c.response_headers);
    assert_eq!(c.listen_tls, Some(files("flag-")));
    assert_eq!(c.state_file, Some(PathBuf::from("/tmp/agent.state")));
    // Untouched by flags: still the file's.
    assert_eq!(c.http_addr, "127.0.0.1:9080");
    assert_eq!(c.allocators, ["global-1:7400", "global-2:7400"]);
    assert_eq!(c.holder_id, "gw-7");
    assert_eq!(
        c.ratelimit_config,
        Some(PathBuf::from("/etc/ratelimit/config"))
    );

    let before = c.clone();
    c.apply(Overrides::default());
    assert_eq!(c, before, "no flags, no change");
}

/// A valid base to break one field at a time.
fn valid() -> AgentConfig {
    AgentConfig {
        allocators: vec!["global-1:7400".into()],
        allocator_tls: Some(files("")),
        ..AgentConfig::default()
    }
}

#[test]
fn invalid_values_name_the_field_and_the_reason() {
    type Break = fn(&mut AgentConfig);
    let cases: &[(Break, &str, &str)] = &[
        (
            |c| c.grpc_addr = "localhost:1".into(),
            "grpc_addr",
            "IP address",
        ),
        (|c| c.http_addr = "unix:".into(), "http_addr", "socket path"),
        (
            |c| c.http_addr = c.grpc_addr.clone(),
            "http_addr",
            "same address",
        ),
        (|c| c.holder_id = "gw/7".into(), "holder_id", "only A-Z"),
        (|c| c.holder_id = String::new(), "holder_id", "empty"),
        (
            |c| c.acquire_rate_max_per_s = 0,
            "acquire_rate_max_per_s",
            "positive",
        ),
        (
            |c| c.acquire_waiting_max = 0,
            "acquire_waiting_max",
            "1 to 1048576",
        ),
        (
            |c| c.decide_timeout_ms = 0,
            "decide_timeout_ms",
            "1 to 60000",
        ),
        (
            |c| c.decide_timeout_ms = 60_001,
            "decide_timeout_ms",
            "1 to 60000",
        ),
        (
            |c| c.policy_stale_after_ms = 9_999,
            "policy_stale_after_ms",
            "10000 to 86400000",
        ),
        (
            |c| c.connections_max = Some(0),
            "connections_max",
            "1 to 1000000",
        ),
        (
            |c| c.connections_per_peer_max = Some(0),
            "connections_per_peer_max",
            "1 to 1000000",
        ),
        (
            |c| c.idle_timeout_ms = 0,
            "idle_timeout_ms",
            "1 to 86400000",
        ),
        (
            |c| c.header_timeout_ms = 86_400_001,
            "header_timeout_ms",
            "1 to 86400000",
        ),
        (|c| c.keys_max = 1_000, "keys_max", "1024 to 16777216"),
        (
            |c| c.request_bytes_buffered_max = 1024,
            "request_bytes_buffered_max",
            "262144 to 1099511627776 bytes",
        ),
        (
            |c| c.request_body_timeout_ms = 0,
            "request_body_timeout_ms",
            "1 to 60000",
        ),
        (
            |c| c.ratelimit_key_len_max = 100_000,
            "ratelimit_key_len_max",
            "128 to 65536 bytes",
        ),
        (
            |c| c.shaped_waiting_max = 65_537,
            "shaped_waiting_max",
            "0 to 65536",
        ),
        (|c| c.allocators.clear(), "allocators", "at least one"),
        (
            |c| c.allocators = vec!["a".into()],
            "allocators",
            "host:port",
        ),
        (
            |c| c.allocators = vec!["a:0".into()],
            "allocators",
            "1-65535",
        ),
        (
            |c| c.allocators = vec!["http://a:1".into()],
            "allocators",
            "scheme",
        ),
        (
            |c| c.allocators = vec!["a:1".into(), "a:1".into()],
            "allocators",
            "twice",
        ),
        (
            |c| c.allocators = (0..17).map(|i| format!("a{i}:1")).collect(),
            "allocators",
            "at most 16",
        ),
        (|c| c.allocator_tls = None, "allocator_tls", "required"),
        (|c| c.insecure = true, "insecure", "cannot be combined"),
        (
            |c| c.standalone = true,
            "allocators",
            "not used with `standalone",
        ),
        (
            |c| c.policies = vec![PathBuf::new()],
            "policies",
            "empty path",
        ),
        (
            |c| c.policies = vec!["p".into(); POLICY_FILES_MAX + 1],
            "policies",
            "at most",
        ),
        (
            |c| c.state_file = Some(PathBuf::new()),
            "state_file",
            "empty path",
        ),
        (
            |c| c.allocator_keys = vec!["zz".into()],
            "allocator_keys",
            "not hex",
        ),
        (
            |c| c.allocator_keys = vec!["0011".into()],
            "allocator_keys",
            "32",
        ),
        (
            |c| c.ratelimit_config = Some("x".repeat(PATH_LEN_MAX + 1).into()),
            "ratelimit_config",
            "at most",
        ),
        (
            |c| c.ratelimit_config = Some("/etc/ratelimit/config".into()),
            "ratelimit_config",
            "only with `standalone: true`",
        ),
        (
            |c| {
                c.listen_tls = Some(TlsFiles {
                    key: PathBuf::new(),
                    ..files("")
                })
            },
            "listen_tls.key",
            "empty path",
        ),
        (
            |c| c.grpc_addr = "0.0.0.0:8081".into(),
            "grpc_addr",
            "other hosts can connect",
        ),
        (
            |c| {
                c.listen_tls = Some(files(""));
                c.listen_insecure = true;
            },
            "listen_insecure",
            "cannot be combined",
        ),
    ];
    for (i, (break_it, field, reason)) in cases.iter().enumerate() {
        let mut c = valid();
        break_it(&mut c);
        let e = c.validate().expect_err(&format!("case {i} must fail"));
        let text = e.to_string();
        assert!(
            matches!(&e, ConfigError::Invalid { field: f, .. } if f == field),
            "case {i}: wrong field in {text}"
        );
        assert!(text.contains(reason), "case {i}: {text}");
    }
}

#[test]
fn public_listeners_need_tls_or_an_explicit_plaintext_choice() {
    let mut c = valid();
    c.grpc_addr = "0.0.0.0:8081".into();
    assert!(c.validate().is_err());
    c.listen_tls = Some(files("listen-"));
    c.validate().unwrap();
    c.listen_tls = None;
    c.listen_insecure = true;
    c.validate().unwrap();
    let mut local = valid();
    local.grpc_addr = "unix:/run/a.sock".into();
    local.validate().unwrap();
}

#[test]
fn standalone_needs_no_allocator_and_plaintext_allocators_need_insecure() {
    let standalone = AgentConfig {
        standalone: true,
        ..AgentConfig::default()
    };
    standalone.validate().unwrap();
    let insecure = AgentConfig {
        allocators: vec!["127.0.0.1:7400".into()],
        insecure: true,
        ..AgentConfig::default()
    };
    insecure.validate().unwrap();
    assert!(matches!(
        insecure.allocator_transport().unwrap(),
        ClientTransport::Plaintext
    ));
}

#[test]
fn missing_tls_files_are_named_with_their_field() {
    let c = AgentConfig {
        listen_tls: Some(files("/nonexistent/")),
        ..AgentConfig::default()
    };
    let e = c.listen_tls_pem().unwrap_err().to_string();
    assert!(
        e.contains("listen_tls") && e.contains("/nonexistent/"),
        "{e}"
    );
    assert!(AgentConfig::default().listen_tls_pem().unwrap().is_none());
}

#[test]
fn oversized_and_missing_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    let line = "# padding padding padding padding padding padding padding padding\n";
    let text = line.repeat(CONFIG_FILE_LEN_MAX as usize / line.len() + 1);
    std::fs::write(&big, text).unwrap();
    assert!(matches!(
        AgentConfig::load(&big),
        Err(ConfigError::TooLarge { .. })
    ));
    let missing = dir.path().join("missing.yaml");
    let e = AgentConfig::resolve(Some(&missing), Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("missing.yaml"), "{e}");
}

#[test]
fn resolve_validates_after_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    // Invalid alone (no grantor), valid once the flags make it standalone.
    std::fs::write(&path, "grpc_addr: 127.0.0.1:18081\n").unwrap();
    assert!(AgentConfig::resolve(Some(&path), Overrides::default()).is_err());
    let c = AgentConfig::resolve(
        Some(&path),
        Overrides {
            standalone: Some(true),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(c.grpc_addr, "127.0.0.1:18081");
    assert!(c.standalone);
}

#[test]
fn unknown_policy_ids_are_denied_unless_allowed_and_bad_settings_are_named() {
    assert_eq!(parse("").unwrap().unknown_policy, UnknownPolicy::Deny);
    assert_eq!(
        parse("unknown_policy: deny\n").unwrap().unknown_policy,
        UnknownPolicy::Deny
    );
    let e = parse("unknown_policy: maybe\n").unwrap_err().to_string();
    assert!(
        e.contains("unknown_policy") && e.contains("maybe"),
        "names the field and the value: {e}"
    );
    let mut c = parse("unknown_policy: allow\n").unwrap();
    c.apply(Overrides {
        unknown_policy: Some(UnknownPolicy::Deny),
        ..Overrides::default()
    });
    assert_eq!(c.unknown_policy, UnknownPolicy::Deny, "the flag wins");
    let e = "sometimes"
        .parse::<UnknownPolicy>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown_policy") && e.contains("sometimes"),
        "{e}"
    );
}
