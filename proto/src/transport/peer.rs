//! Who is at the other end of a connection, as far as the transport can tell: the client
//! certificate under mutual TLS, else the remote IP address. Servers put it on each
//! request so that handlers can tell callers apart (an agent shares out first leases per
//! caller) without knowing which listener the request came in on.

use std::net::IpAddr;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

/// The caller of a request, as its connection identifies it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// The client certificate (DER) the TLS handshake verified.
    pub cert: Option<Vec<u8>>,
    /// The remote IP address of a TCP connection.
    pub ip: Option<IpAddr>,
}

impl Peer {
    /// The bytes that best tell this caller apart: its certificate, else its address.
    pub fn identity(&self) -> Option<Vec<u8>> {
        self.cert
            .clone()
            .or_else(|| self.ip.map(|ip| ip.to_string().into_bytes()))
    }
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
                .and_then(|certs| certs.first().map(|c| c.as_ref().to_vec())),
            ..self.get_ref().peer()
        }
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
