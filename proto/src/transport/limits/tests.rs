use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;

async fn listener() -> (TcpListener, std::net::SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

#[tokio::test]
async fn a_connection_beyond_the_maximum_waits_for_a_slot() {
    let (l, addr) = listener().await;
    let limits = ListenerLimits {
        connections_max: 2,
        idle_timeout_ms: 60_000,
        ..ListenerLimits::default()
    };
    let mut incoming = limited(l, limits);
    let _clients: Vec<TcpStream> = futures_join(addr, 3).await;
    let first = incoming.next().await.unwrap().unwrap();
    let _second = incoming.next().await.unwrap().unwrap();
    let third = tokio::time::timeout(Duration::from_millis(300), incoming.next()).await;
    assert!(
        third.is_err(),
        "a third connection was accepted while two were open"
    );
    drop(first);
    let third = tokio::time::timeout(Duration::from_secs(5), incoming.next()).await;
    assert!(third.unwrap().unwrap().is_ok(), "no slot was freed");
}

async fn futures_join(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(TcpStream::connect(addr).await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_silent_connection_times_out_and_an_active_one_does_not() {
    let (l, addr) = listener().await;
    let limits = ListenerLimits {
        connections_max: 8,
        idle_timeout_ms: 300,
        ..ListenerLimits::default()
    };
    let mut incoming = limited(l, limits);
    let _silent = TcpStream::connect(addr).await.unwrap();
    let mut talker = TcpStream::connect(addr).await.unwrap();
    let mut silent_side = incoming.next().await.unwrap().unwrap();
    let mut talker_side = incoming.next().await.unwrap().unwrap();
    assert!(
        silent_side.get_ref().nodelay().unwrap(),
        "TCP_NODELAY is off"
    );

    let started = Instant::now();
    let mut buf = [0u8; 1];
    let err = silent_side.read(&mut buf).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A byte every 100 ms for well over the idle timeout keeps the connection open.
    for _ in 0..10 {
        talker.write_all(b"x").await.unwrap();
        talker_side.read_exact(&mut buf).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_timed_out_connection_frees_its_slot() {
    let (l, addr) = listener().await;
    let limits = ListenerLimits {
        connections_max: 1,
        idle_timeout_ms: 200,
        ..ListenerLimits::default()
    };
    let mut incoming = limited(l, limits);
    let _a = TcpStream::connect(addr).await.unwrap();
    let mut a_side = incoming.next().await.unwrap().unwrap();
    let _b = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 1];
    assert!(a_side.read(&mut buf).await.is_err());
    drop(a_side);
    let b_side = tokio::time::timeout(Duration::from_secs(5), incoming.next()).await;
    assert!(b_side.unwrap().unwrap().is_ok());
}

#[test]
fn the_open_file_limit_is_raised_to_what_is_needed_or_refused_naming_the_hard_limit() {
    let now = ensure_open_files(1).unwrap();
    assert!(now >= 1);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let hard = lim.rlim_max;
    assert_eq!(ensure_open_files(hard).unwrap(), hard);
    let err = ensure_open_files(hard + 1).unwrap_err().to_string();
    assert!(
        err.contains("hard limit") && err.contains("connections_max"),
        "{err}"
    );
}

#[test]
fn a_default_connection_cap_is_lowered_to_fit_the_hard_limit_and_a_configured_one_is_not() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let hard = lim.rlim_max;
    let too_many = usize::try_from(hard).unwrap();
    let fitted = fit_connections(None, too_many, 2).unwrap();
    assert!(
        2 * fitted as u64 + OPEN_FILES_HEADROOM <= hard,
        "{fitted} with hard limit {hard}"
    );
    assert_eq!(fit_connections(None, 10, 2).unwrap(), 10);
    assert_eq!(fit_connections(Some(10), 1_000_000, 2).unwrap(), 10);
    let err = fit_connections(Some(too_many), 10, 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("hard limit"), "{err}");
}
