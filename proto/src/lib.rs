//! Every wire protocol of Leasehold, generated from the `.proto` files under `proto/`.
//!
//! | Rust module | Protobuf package | What it is |
//! |---|---|---|
//! | [`leasehold::v1`] | `leasehold.v1` | Leasehold's own services: `LeaseService` (holders ↔ grantors), `AdminService` (`leasectl`), `AdmitService` (gateways ↔ agents) |
//! | [`envoy::service::ratelimit::v3`] | `envoy.service.ratelimit.v3` | Envoy's rate-limit service, `RateLimitService/ShouldRateLimit` |
//! | [`envoy::extensions::common::ratelimit::v3`] | `envoy.extensions.common.ratelimit.v3` | `RateLimitDescriptor`, sent by Envoy |
//! | [`envoy::config::core::v3`] | `envoy.config.core.v3` | `HeaderValue` |
//! | [`envoy::r#type::v3`](envoy/type/v3/index.html) | `envoy.type.v3` | `RateLimitUnit` |
//!
//! The Envoy packages are wire-exact copies of envoyproxy/data-plane-api (same packages,
//! message names, nesting, field numbers and types, minus validation annotations), so an
//! unchanged Envoy gateway can call a Leasehold agent. Well-known Google types map to
//! [`prost_types`].
//!
//! Each service comes with a tonic client (`*_client`) and server (`*_server`) module.
//! [`FILE_DESCRIPTOR_SET`] holds the encoded descriptors of all of the above (imports
//! included) for gRPC server reflection.

#![deny(missing_docs)]

/// Encoded `google.protobuf.FileDescriptorSet` of every Leasehold and Envoy `.proto` file,
/// with the well-known types they import and with source info (comments).
///
/// Feed it to a reflection service, or decode it with [`prost_types::FileDescriptorSet`].
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/leasehold_descriptor.bin"));

/// GRPC metadata key under which a follower names the current leader (`host:port`) when it
/// answers UNAVAILABLE, so the caller can retry there.
pub const LEADER_METADATA_KEY: &str = "leasehold-leader";

/// Largest backup of a cluster's state, in bytes: a restore travels as one Raft entry,
/// and Raft messages are at most 64 MiB.
pub const BACKUP_LEN_MAX: usize = 48 * 1024 * 1024;

/// Largest admin-service message, in bytes, both ways: a backup and its envelope.
pub const ADMIN_MESSAGE_LEN_MAX: usize = BACKUP_LEN_MAX + 1024 * 1024;

/// Metadata key on a lease request refused as stale: the highest request id the grantor
/// has seen from the holder for that key, so the holder can continue above it.
pub const LAST_REQUEST_ID_METADATA_KEY: &str = "leasehold-last-request-id";

pub mod heap;
pub mod transport;

/// Leasehold's own protocols.
pub mod leasehold {
    /// Version 1 of the lease, admin and admit protocols.
    #[allow(missing_docs, clippy::all, clippy::pedantic)]
    pub mod v1 {
        tonic::include_proto!("leasehold.v1");
    }
}

/// Envoy's rate-limit service protocol and the Envoy types it uses.
pub mod envoy {
    /// Envoy service APIs.
    pub mod service {
        /// Envoy's rate-limit service.
        pub mod ratelimit {
            /// Rate-limit service v3: `RateLimitService/ShouldRateLimit`.
            #[allow(missing_docs, clippy::all, clippy::pedantic)]
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
    }

    /// Envoy extension types.
    pub mod extensions {
        /// Types shared by several Envoy extensions.
        pub mod common {
            /// Rate-limit types shared by Envoy's rate-limit filters.
            pub mod ratelimit {
                /// `RateLimitDescriptor` v3.
                #[allow(missing_docs, clippy::all, clippy::pedantic)]
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }

    /// Envoy configuration types.
    pub mod config {
        /// Envoy core configuration types.
        pub mod core {
            /// `HeaderValue` v3.
            #[allow(missing_docs, clippy::all, clippy::pedantic)]
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }

    /// Envoy's shared value types.
    pub mod r#type {
        /// `RateLimitUnit` v3.
        #[allow(missing_docs, clippy::all, clippy::pedantic)]
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
}
