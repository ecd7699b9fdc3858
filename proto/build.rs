//! Compiles every `.proto` under `proto/` with protox (a pure-Rust compiler, so no system
//! `protoc` is needed) and generates prost messages plus tonic clients and servers.
//!
//! The encoded descriptor set is also written to `OUT_DIR` so the crate can embed it for gRPC
//! server reflection.

use std::path::{Path, PathBuf};

use prost::Message as _;

/// Files handed to the compiler; their imports are resolved from `PROTO_ROOT` and from
/// protox's bundled well-known types.
const PROTO_FILES: &[&str] = &[
    "envoy/type/v3/ratelimit_unit.proto",
    "envoy/config/core/v3/base.proto",
    "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
    "envoy/service/ratelimit/v3/rls.proto",
    "leasehold/v1/common.proto",
    "leasehold/v1/decide.proto",
    "leasehold/v1/lease.proto",
    "leasehold/v1/admin_policy.proto",
    "leasehold/v1/admin_budget.proto",
    "leasehold/v1/admin_cluster.proto",
    "leasehold/v1/admin_usage.proto",
    "leasehold/v1/admin.proto",
    "leasehold/v1/admit.proto",
    "leasehold/v1/raft.proto",
];

const PROTO_ROOT: &str = "proto";

/// Name of the encoded `FileDescriptorSet` inside `OUT_DIR`; `src/lib.rs` embeds it.
const DESCRIPTOR_FILE: &str = "leasehold_descriptor.bin";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(PROTO_ROOT);
    // A directory makes cargo rescan everything under it, new files included.
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    println!("cargo:rerun-if-changed=build.rs");

    let files: Vec<PathBuf> = PROTO_FILES.iter().map(|f| root.join(f)).collect();
    // Source info is kept so proto comments become rustdoc on the generated items.
    let fds = protox::compile(&files, [root])?;

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join(DESCRIPTOR_FILE), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
