//! Who is calling, and may they: identity extraction and role checks for tonic services.

use tonic::{Request, Status};

use super::identity::{
    identity_from_cert_der, validate_name, IdentityError, PeerIdentity, Role, DEFAULT_TRUST_DOMAIN,
};

/// How a server learns who its callers are.
///
/// Service code asks [`AuthMode::authorize`] on every call and never looks at the transport,
/// so the same code runs behind mutual TLS and on a plaintext development server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// The caller's identity comes from its verified client certificate. A call without one
    /// is refused with UNAUTHENTICATED. This is the only mode for production.
    MutualTls,
    /// **INSECURE — development only.** No certificate is read: every caller is taken to be
    /// `assumed`, whoever it really is. Anyone who can reach the port gets that identity's
    /// permissions, and traffic is readable on the wire. Binaries must enable this only
    /// behind an explicit `--insecure` flag and should log a warning when they do.
    Insecure {
        /// The identity every caller is treated as.
        assumed: PeerIdentity,
    },
}

impl AuthMode {
    /// The caller's identity under this mode (see [`peer_identity`]).
    pub fn identify<T>(&self, req: &Request<T>) -> Result<PeerIdentity, Status> {
        match self {
            AuthMode::MutualTls => peer_identity(req),
            AuthMode::Insecure { assumed } => Ok(assumed.clone()),
        }
    }

    /// The caller's identity if its role is in `allowed` (see [`require_role`]).
    pub fn authorize<T>(&self, req: &Request<T>, allowed: &[Role]) -> Result<PeerIdentity, Status> {
        let identity = self.identify(req)?;
        check_role(&identity, allowed)?;
        Ok(identity)
    }
}

/// The identity in the caller's verified client certificate.
///
/// UNAUTHENTICATED when the connection carries no client certificate (plaintext, or TLS
/// without client auth) or the certificate names no valid identity. The certificate chain
/// itself was verified against the client CA during the TLS handshake. A certificate of
/// another SPIFFE trust domain than [`DEFAULT_TRUST_DOMAIN`] names no one here, even when
/// the same CA signed it.
pub fn peer_identity<T>(req: &Request<T>) -> Result<PeerIdentity, Status> {
    let certs = req
        .peer_certs()
        .ok_or_else(|| unauthenticated(&IdentityError::NoCertificate))?;
    // The end-entity certificate comes first; the rest of the chain names CAs, not the peer.
    let leaf = certs
        .first()
        .ok_or_else(|| unauthenticated(&IdentityError::NoCertificate))?;
    let uri = identity_from_cert_der(leaf).map_err(|err| unauthenticated(&err))?;
    if uri.trust_domain != DEFAULT_TRUST_DOMAIN {
        return Err(Status::unauthenticated(format!(
            "client identity: trust domain `{}` is not `{DEFAULT_TRUST_DOMAIN}`",
            uri.trust_domain.chars().take(64).collect::<String>()
        )));
    }
    Ok(uri.identity)
}

/// Whether `identity` is an allocator of cluster `cluster`: a node's own certificate
/// (`<cluster>-<node id>`) or one certificate shared by the cluster's nodes (`<cluster>`).
pub fn is_cluster_allocator(identity: &PeerIdentity, cluster: &str) -> bool {
    identity.role == Role::Allocator
        && (identity.name == cluster || cluster_member_id(identity, cluster).is_some())
}

/// The node id of `identity` as a member of allocator cluster `cluster`: a node's own
/// certificate is named `<cluster>-<node id>`. None for any other name.
pub fn cluster_member_id(identity: &PeerIdentity, cluster: &str) -> Option<u64> {
    if identity.role != Role::Allocator {
        return None;
    }
    let id = identity.name.strip_prefix(cluster)?.strip_prefix('-')?;
    // Digits only: `global-01` and `global-+1` are not node 1.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || id.starts_with('0') {
        return None;
    }
    id.parse().ok()
}

/// The caller's certificate identity if its role is one of `allowed`.
///
/// UNAUTHENTICATED as for [`peer_identity`]; PERMISSION_DENIED naming the caller's role and
/// the allowed roles otherwise.
pub fn require_role<T>(req: &Request<T>, allowed: &[Role]) -> Result<PeerIdentity, Status> {
    let identity = peer_identity(req)?;
    check_role(&identity, allowed)?;
    Ok(identity)
}

/// PERMISSION_DENIED unless `identity` has one of the `allowed` roles.
pub fn check_role(identity: &PeerIdentity, allowed: &[Role]) -> Result<(), Status> {
    if allowed.contains(&identity.role) {
        return Ok(());
    }
    let allowed: Vec<&str> = allowed.iter().map(|role| role.as_str()).collect();
    Err(Status::permission_denied(format!(
        "role `{}` (caller `{identity}`) may not call this method; allowed roles: [{}]",
        identity.role,
        allowed.join(", ")
    )))
}

/// PERMISSION_DENIED unless `identity` is named `holder_id`: a holder may act only as itself.
pub fn check_acts_as(identity: &PeerIdentity, holder_id: &str) -> Result<(), Status> {
    if identity.name == holder_id {
        return Ok(());
    }
    // Echo the requested id only when it is a valid name, so hostile input stays out of logs.
    let shown = match validate_name(holder_id) {
        Ok(()) => holder_id,
        Err(_) => "<invalid holder id>",
    };
    Err(Status::permission_denied(format!(
        "caller `{identity}` may not act as holder `{shown}`"
    )))
}

fn unauthenticated(err: &IdentityError) -> Status {
    Status::unauthenticated(format!("client identity: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator(name: &str) -> PeerIdentity {
        PeerIdentity::new(Role::Allocator, name).unwrap()
    }

    #[test]
    fn allocator_names_tie_a_certificate_to_one_cluster() {
        assert_eq!(cluster_member_id(&allocator("global-3"), "global"), Some(3));
        assert_eq!(cluster_member_id(&allocator("eu-1-2"), "eu-1"), Some(2));
        for (name, cluster) in [
            ("eu-1-2", "eu"),
            ("eu-12", "eu-1"),
            ("global-01", "global"),
            ("global-", "global"),
            ("global", "global"),
        ] {
            assert_eq!(
                cluster_member_id(&allocator(name), cluster),
                None,
                "{name} in {cluster}"
            );
        }
        assert!(is_cluster_allocator(&allocator("global"), "global"));
        assert!(!is_cluster_allocator(&allocator("globalx"), "global"));
        let agent = PeerIdentity::new(Role::Agent, "global-1").unwrap();
        assert!(!is_cluster_allocator(&agent, "global"));
    }
}
