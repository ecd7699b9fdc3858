//! Who is at the other end of a connection, as far as the transport can tell: the client
//! certificate under mutual TLS, else the remote IP address. Servers put it on each
//! request so that handlers can tell callers apart (an agent shares out first leases per
//! caller) without knowing which listener the request came in on.

use std::net::IpAddr;
use std::sync::Arc;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

/// The caller of a request, as its connection identifies it. Cheap to clone: it is put on
/// every request of its connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// The client certificate (DER) the TLS handshake verified.
    pub cert: Option<Arc<[u8]>>,
    /// The remote IP address of a TCP connection.
    pub ip: Option<IpAddr>,
}

impl Peer {
    /// A number telling this caller apart from others; 0 when nothing identifies it.
    pub fn source(&self) -> u32 {
        source_of(self.cert.as_deref(), self.ip)
    }
}

/// Bytes of a certificate's end read to tell it apart: its signature, which differs for
/// every certificate a CA issues, so the rest need not be read on each call.
const CERT_TAIL_BYTES: usize = 64;

/// A caller's number from its client certificate (DER) or, without one, its IP address:
/// never 0, which stands for a caller nothing identifies.
pub fn source_of(cert: Option<&[u8]>, ip: Option<IpAddr>) -> u32 {
    let hash = match (cert, ip) {
        (Some(der), _) => fnv(&der[der.len().saturating_sub(CERT_TAIL_BYTES)..]),
        (None, Some(IpAddr::V4(v4))) => fnv(&v4.octets()),
        (None, Some(IpAddr::V6(v6))) => fnv(&v6.octets()),
        (None, None) => return 0,
    };
    hash.max(1)
}

/// FNV-1a: stable across runs and cheap; sources only need to differ, not to be secret.
fn fnv(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// A connection's [`Peer`], from what the connection knows of its other end.
pub trait PeerOf {
    /// The caller at the other end.
    fn peer(&self) -> Peer;
}

impl PeerOf for TcpConnectInfo {
    fn peer(&self) -> Peer {
        Peer {
            cert: None,
            ip: self.remote_addr().map(|a| a.ip()),
        }
    }
}

impl<T: PeerOf> PeerOf for TlsConnectInfo<T> {
    fn peer(&self) -> Peer {
        Peer {
            cert: self
                .peer_certs()
                .and_then(|certs| certs.first().map(|c| Arc::from(c.as_ref()))),
            ..self.get_ref().peer()
        }
    }
}

/// An in-process pipe or a simulated network's stream: nothing tells its callers apart.
impl PeerOf for () {
    fn peer(&self) -> Peer {
        Peer::default()
    }
}

#[cfg(unix)]
impl PeerOf for tonic::transport::server::UdsConnectInfo {
    fn peer(&self) -> Peer {
        // File permissions decide who may connect to a socket file; nothing tells its
        // callers apart.
        Peer::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_told_apart_by_certificate_else_address() {
        let (a, b) = ([7u8; 300], [8u8; 300]);
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(source_of(None, None), 0);
        assert_ne!(source_of(Some(&a), None), source_of(Some(&b), None));
        assert_eq!(
            source_of(Some(&a), ip("10.0.0.1")),
            source_of(Some(&a), None)
        );
        assert_ne!(
            source_of(None, ip("10.0.0.1")),
            source_of(None, ip("10.0.0.2"))
        );
        assert_ne!(source_of(None, ip("10.0.0.1")), 0);
    }
}
