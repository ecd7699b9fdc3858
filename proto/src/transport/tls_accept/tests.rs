use super::*;
use crate::transport::{
    rustls_client_config, rustls_server_config, DevPki, ListenerLimits, PkiSpec, Role, TlsPem,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_rustls::TlsConnector;

fn pki() -> DevPki {
    DevPki::generate(
        &PkiSpec::local(&[], &["gw-1", "edge"], &[]),
        SystemTime::now(),
    )
    .unwrap()
}

/// A client trusting `ca`, presenting `identity`'s certificate if given.
fn connector(ca: &str, identity: Option<&TlsPem>) -> TlsConnector {
    let config = match identity {
        Some(id) => rustls_client_config(id).unwrap(),
        None => {
            let mut roots = RootCertStore::empty();
            for der in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(der.unwrap()).unwrap();
            }
            let builder = ClientConfig::builder().with_root_certificates(roots);
            Arc::new(builder.with_no_client_auth())
        }
    };
    TlsConnector::from(config)
}

type Established = ReceiverStream<io::Result<PeerCounted<TlsStream<DuplexStream>>>>;

/// Bounds with 4 handshakes at once and `per_peer` connections per certificate.
fn bounds(per_peer: Option<usize>) -> ListenerLimits {
    ListenerLimits {
        connections_max: 16,
        connections_per_peer_max: per_peer,
        ..ListenerLimits::default()
    }
}

/// A listener fed by hand: each `connect` hands the server half of a pipe to
/// [`tls_established`] and returns the client half.
struct Pipes {
    tx: mpsc::UnboundedSender<io::Result<DuplexStream>>,
}

impl Pipes {
    fn serve(config: Arc<ServerConfig>, limits: ListenerLimits) -> (Self, Established) {
        let (tx, rx) = mpsc::unbounded_channel();
        let incoming = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        (Pipes { tx }, tls_established(incoming, config, limits))
    }

    fn connect(&self) -> DuplexStream {
        let (client, server) = duplex(64 * 1024);
        self.tx.send(Ok(server)).unwrap();
        client
    }
}

/// The client's TLS session over a fresh pipe, and the server's end of it once established.
async fn honest(
    pipes: &Pipes,
    established: &mut Established,
    client: &TlsConnector,
) -> io::Result<(
    tokio_rustls::client::TlsStream<DuplexStream>,
    PeerCounted<TlsStream<DuplexStream>>,
)> {
    let io = pipes.connect();
    let name = ServerName::try_from("localhost").unwrap();
    let (client, server) = tokio::join!(client.connect(name, io), established.next());
    Ok((client?, server.expect("the listener is open")?))
}

#[tokio::test]
async fn silent_connections_past_the_bound_are_evicted_and_an_honest_client_gets_through() {
    let pki = pki();
    let server = rustls_server_config(&pki.tls_pem(Role::Agent, "gw-1").unwrap(), &[]).unwrap();
    let (pipes, mut established) = Pipes::serve(server, bounds(None));
    let before = handshake_stats();

    // Ten times as many silent clients as handshakes may run: with handshakes that wait for
    // their timeout, the honest client below would wait 10 s behind them.
    let silent: Vec<DuplexStream> = (0..40).map(|_| pipes.connect()).collect();
    let started = Instant::now();
    let client = connector(
        &pki.ca_cert_pem,
        Some(&pki.tls_pem(Role::Agent, "edge").unwrap()),
    );
    let (mut c, mut s) = tokio::time::timeout(
        Duration::from_secs(5),
        honest(&pipes, &mut established, &client),
    )
    .await
    .expect("the honest handshake completed")
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));

    // The established connection carries data both ways.
    c.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");

    let after = handshake_stats();
    assert!(
        after.evicted - before.evicted >= 36,
        "{before:?} → {after:?}"
    );
    assert!(after.completed > before.completed, "{before:?} → {after:?}");
    // The evicted clients' connections were closed: they read end of file.
    let mut closed = 0;
    for mut io in silent {
        let mut buf = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(200), io.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert!(
        closed >= 36,
        "{closed} of 40 silent clients were disconnected"
    );
}

#[tokio::test]
async fn a_client_without_a_certificate_of_the_ca_is_refused_and_counted() {
    let pki = pki();
    let other = pki_other();
    let server = rustls_server_config(&pki.tls_pem(Role::Agent, "gw-1").unwrap(), &[]).unwrap();
    let (pipes, mut established) = Pipes::serve(server, bounds(None));
    let before = handshake_stats();
    for client in [
        connector(&pki.ca_cert_pem, None),
        connector(
            &pki.ca_cert_pem,
            Some(&other.tls_pem(Role::Agent, "edge").unwrap()),
        ),
    ] {
        let io = pipes.connect();
        let name = ServerName::try_from("localhost").unwrap();
        // TLS 1.3 clients learn of the refusal on their first read.
        if let Ok(mut tls) = client.connect(name, io).await {
            let mut buf = [0u8; 1];
            assert!(!matches!(tls.read(&mut buf).await, Ok(n) if n > 0));
        }
    }
    // Nothing was established; an honest client still is.
    let client = connector(
        &pki.ca_cert_pem,
        Some(&pki.tls_pem(Role::Agent, "edge").unwrap()),
    );
    honest(&pipes, &mut established, &client).await.unwrap();
    let after = handshake_stats();
    assert!(after.failed - before.failed >= 2, "{before:?} → {after:?}");
}

fn pki_other() -> DevPki {
    pki()
}

#[test]
fn a_quarter_of_the_slots_handshake_at_most() {
    assert_eq!(handshakes_max_for(1_024), 256);
    assert_eq!(handshakes_max_for(100_000), TLS_HANDSHAKES_MAX);
    assert_eq!(handshakes_max_for(64), 16);
    assert_eq!(handshakes_max_for(2), 1);
}

/// A client that sent its ClientHello and then stalls (a slow honest client, to the server)
/// keeps its slot while silent connections come and go.
#[tokio::test]
async fn a_client_that_sent_its_hello_outlasts_silent_ones() {
    let pki = pki();
    let server = rustls_server_config(&pki.tls_pem(Role::Agent, "gw-1").unwrap(), &[]).unwrap();
    let (pipes, _established) = Pipes::serve(server, bounds(None));
    let mut slow = pipes.connect();
    let mut roots = RootCertStore::empty();
    roots
        .add(
            CertificateDer::pem_slice_iter(pki.ca_cert_pem.as_bytes())
                .next()
                .unwrap()
                .unwrap(),
        )
        .unwrap();
    let config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let mut hello = Vec::new();
    rustls::ClientConnection::new(Arc::new(config), name)
        .unwrap()
        .write_tls(&mut hello)
        .unwrap();
    slow.write_all(&hello).await.unwrap();
    // The server's answer to the hello: its handshake is under way.
    let mut answer = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 1);

    let _silent: Vec<DuplexStream> = (0..40).map(|_| pipes.connect()).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Still open: reads find the rest of the server's flight, never the end of the stream.
    let mut rest = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout(Duration::from_millis(300), slow.read(&mut rest)).await {
            Ok(Ok(0)) => panic!("the client that sent its hello was evicted"),
            Ok(Err(e)) => panic!("{e}"),
            Ok(Ok(_)) => continue,
            Err(_) => break,
        }
    }
}

/// Whether the server closed the client's connection: its first read finds the end.
async fn cut_off(tls: &mut tokio_rustls::client::TlsStream<DuplexStream>) -> bool {
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(500), tls.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn a_certificate_keeps_at_most_its_share_of_connections() {
    let pki = pki();
    let server = rustls_server_config(&pki.tls_pem(Role::Agent, "gw-1").unwrap(), &[]).unwrap();
    let (pipes, mut established) = Pipes::serve(server, bounds(Some(2)));
    let edge = connector(
        &pki.ca_cert_pem,
        Some(&pki.tls_pem(Role::Agent, "edge").unwrap()),
    );
    let before = handshake_stats();
    let first = honest(&pipes, &mut established, &edge).await.unwrap();
    let second = honest(&pipes, &mut established, &edge).await.unwrap();

    // A third from the same certificate completes its handshake and is closed.
    let name = ServerName::try_from("localhost").unwrap();
    let mut third = edge.connect(name.clone(), pipes.connect()).await.unwrap();
    assert!(
        cut_off(&mut third).await,
        "a third connection of one certificate stayed open"
    );
    let after = handshake_stats();
    assert!(
        after.over_peer_limit > before.over_peer_limit,
        "{before:?} → {after:?}"
    );

    // Another certificate is not held back by the first's.
    let other = connector(
        &pki.ca_cert_pem,
        Some(&pki.tls_pem(Role::Agent, "gw-1").unwrap()),
    );
    let _other = honest(&pipes, &mut established, &other).await.unwrap();

    // A closed connection gives its place back.
    drop(first);
    let _again = honest(&pipes, &mut established, &edge).await.unwrap();
    drop(second);
}
