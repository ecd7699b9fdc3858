//! Who may hold leases under which holder id.
//!
//! An agent certificate acts only as the holder its certificate names. An allocator acts
//! upstream for its whole cluster, whichever node leads it, so allocator holder ids are
//! `alloc:<cluster>`, and only the certificates of that cluster's nodes (named
//! `<cluster>-<node id>`, or `<cluster>` for a certificate its nodes share) may use them. Admins hold no leases.

use leasehold_proto::transport::{
    check_acts_as, is_cluster_allocator, AuthMode, PeerIdentity, Role,
};
use tonic::{Request, Status};

/// Prefix of holder ids that name an allocator cluster acting as a holder upstream.
pub const ALLOCATOR_HOLDER_PREFIX: &str = "alloc:";

/// The caller, if it may act as `holder_id`.
pub fn holder_caller<T>(
    auth: &AuthMode,
    req: &Request<T>,
    holder_id: &str,
) -> Result<PeerIdentity, Status> {
    // Without certificates there is no identity to hold anyone to: development only.
    if let AuthMode::Insecure { assumed } = auth {
        return Ok(assumed.clone());
    }
    let caller = auth.authorize(req, &[Role::Agent, Role::Allocator])?;
    match caller.role {
        Role::Allocator => match holder_id.strip_prefix(ALLOCATOR_HOLDER_PREFIX) {
            Some(cluster) if is_cluster_allocator(&caller, cluster) => Ok(caller),
            _ => Err(Status::permission_denied(format!(
                "allocator `{caller}` holds leases only as `{ALLOCATOR_HOLDER_PREFIX}<cluster>` \
                 of its own cluster (certificates are named `<cluster>-<node id>`)"
            ))),
        },
        _ if holder_id.starts_with(ALLOCATOR_HOLDER_PREFIX) => Err(Status::permission_denied(
            format!("`{caller}` may not act as an allocator holder"),
        )),
        _ => check_acts_as(&caller, holder_id).map(|()| caller),
    }
}

/// The caller, if it is an admin; its identity names the author in the audit trail.
pub fn admin_caller<T>(auth: &AuthMode, req: &Request<T>) -> Result<String, Status> {
    auth.authorize(req, &[Role::Admin]).map(|c| c.to_string())
}
