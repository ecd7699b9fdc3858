//! The simulated hosts' open TCP sockets, in the order each host opened them, so that a
//! crashed host's sockets close in an order the seed decides.
//!
//! turmoil crashes a host by dropping its tokio runtime. The runtime drops the tasks
//! spawned with `tokio::spawn` (hyper's and tonic's connection tasks among them) shard by
//! shard, and a task's shard is its task id modulo the shard count. Task ids come from one
//! counter for the whole process, so the order depends on how many tasks the process spawned
//! before the run, and on other threads spawning at the same time. Each turmoil socket
//! dropped sends its peer a FIN (an RST when it holds unread data), and turmoil draws that
//! message's delay from the run's one rng when it is sent: another drop order hands the
//! delays to other messages, and the run drifts from there.
//!
//! When a process dies, the operating system closes its sockets for it, whatever state its
//! tasks were in. The simulation does the same in a fixed order: while a host crashes, the
//! first of its sockets to be dropped closes every socket the host has open, in the order the
//! host opened them; the others are already closed when their turn comes. Nothing else a
//! crashed host drops reaches the network.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use turmoil::net::TcpStream;

/// A socket as its owner and the registry share it; `None` once closed.
type Shared = Arc<Mutex<Option<TcpStream>>>;

/// Every simulated host runs on the thread that steps its simulation, so the sockets are
/// kept per thread: runs on other threads (parallel tests) neither see nor disturb them.
#[derive(Default)]
struct OpenSockets {
    /// The number the next socket opened on this thread gets: the order of opening.
    next: u64,
    /// Each host's open sockets, by the order it opened them.
    hosts: BTreeMap<IpAddr, BTreeMap<u64, Shared>>,
    /// The host whose software is being torn down.
    crashing: Option<IpAddr>,
}

thread_local! {
    static OPEN: RefCell<OpenSockets> = RefCell::default();
}

/// Forgets every socket a previous run on this thread left behind (a run that failed
/// midway), so that a crash in this run closes only this run's sockets.
pub(super) fn reset() {
    let stale = OPEN.with(|open| {
        let mut open = open.borrow_mut();
        open.crashing = None;
        std::mem::take(&mut open.hosts)
    });
    // Outside a simulation a turmoil socket's drop touches nothing.
    drop(stale);
}

/// Crashes `host` as turmoil does, except that its sockets close in the order it opened them.
pub fn crash(sim: &mut turmoil::Sim<'_>, host: &str) {
    let _crashing = Crashing::begin(sim.lookup(host));
    sim.crash(host);
}

/// Restarts `host`'s software. A host still running is torn down as in [`crash`] first.
pub fn bounce(sim: &mut turmoil::Sim<'_>, host: &str) {
    let _crashing = Crashing::begin(sim.lookup(host));
    sim.bounce(host);
}

/// Marks a host as crashing for as long as it lives.
struct Crashing;

impl Crashing {
    fn begin(host: IpAddr) -> Self {
        OPEN.with(|open| open.borrow_mut().crashing = Some(host));
        Crashing
    }
}

impl Drop for Crashing {
    fn drop(&mut self) {
        let _ = OPEN.try_with(|open| open.borrow_mut().crashing = None);
    }
}

/// A turmoil TCP stream known to the registry of the thread that opened it.
#[derive(Debug)]
pub(super) struct OpenSocket {
    host: IpAddr,
    number: u64,
    socket: Shared,
}

impl OpenSocket {
    /// Registers `stream`, opened by the host of its local address (no simulated host opens
    /// a loopback socket, which a crash would miss).
    pub fn register(stream: TcpStream) -> io::Result<Self> {
        let host = stream.local_addr()?.ip();
        let socket: Shared = Arc::new(Mutex::new(Some(stream)));
        let number = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            let number = open.next;
            open.next += 1;
            let sockets = open.hosts.entry(host).or_default();
            sockets.insert(number, Arc::clone(&socket));
            number
        });
        Ok(OpenSocket {
            host,
            number,
            socket,
        })
    }

    /// Polls the stream, or fails as a reset connection once a crash closed it.
    pub fn poll_with<T>(
        &self,
        poll: impl FnOnce(&mut TcpStream) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match lock(&self.socket).as_mut() {
            Some(stream) => poll(stream),
            None => Poll::Ready(Err(io::ErrorKind::ConnectionReset.into())),
        }
    }
}

impl Drop for OpenSocket {
    fn drop(&mut self) {
        let closing = OPEN
            .try_with(|open| {
                let mut open = open.borrow_mut();
                if open.crashing == Some(self.host) {
                    let sockets = open.hosts.remove(&self.host).unwrap_or_default();
                    return sockets.into_values().collect();
                }
                if let Some(sockets) = open.hosts.get_mut(&self.host) {
                    sockets.remove(&self.number);
                }
                Vec::new()
            })
            .unwrap_or_default();
        // Closed outside the registry's borrow, in the order they were opened.
        for socket in closing {
            drop(lock(&socket).take());
        }
        drop(lock(&self.socket).take());
    }
}

fn lock(socket: &Shared) -> MutexGuard<'_, Option<TcpStream>> {
    socket.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::io::AsyncWrite;
    use turmoil::{Protocol, Segment};

    const SOCKETS: usize = 8;
    const PORT: u16 = 9000;
    const STEPS_MAX: usize = 1_000;

    /// Holds `value` until the host's runtime drops the task, as a connection task does.
    fn hold<T: Send + 'static>(value: T) {
        tokio::spawn(async move {
            let _held = value;
            std::future::pending::<()>().await
        });
    }

    /// The source ports of the FINs in flight, in the order they were sent.
    fn fins_in_flight(sim: &turmoil::Sim<'_>) -> Vec<u16> {
        let mut ports = Vec::new();
        sim.links(|links| {
            for link in links {
                for sent in link {
                    if matches!(sent.protocol(), Protocol::Tcp(Segment::Fin(_))) {
                        ports.push(sent.pair().0.port());
                    }
                }
            }
        });
        ports
    }

    /// A simulation whose host `server` accepts and holds every connection; every message
    /// spends one tick on its link.
    fn sim_with_server() -> turmoil::Sim<'static> {
        let mut sim = turmoil::Builder::new()
            .min_message_latency(Duration::from_millis(1))
            .max_message_latency(Duration::from_millis(1))
            .build();
        sim.host("server", || async {
            let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
            loop {
                hold(listener.accept().await?.0);
            }
        });
        sim
    }

    #[test]
    fn a_crashed_host_closes_its_sockets_in_the_order_it_opened_them() {
        reset();
        // Every message spends a tick on its link, so the FINs can be read there.
        let mut sim = sim_with_server();
        let opened = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&opened);
        sim.host("client", move || {
            let counter = Arc::clone(&counter);
            async move {
                for _ in 0..SOCKETS {
                    let stream = TcpStream::connect(("server", PORT)).await?;
                    hold(OpenSocket::register(stream)?);
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                std::future::pending().await
            }
        });
        for _ in 0..STEPS_MAX {
            if opened.load(Ordering::SeqCst) == SOCKETS {
                break;
            }
            sim.step().unwrap();
        }
        assert_eq!(
            opened.load(Ordering::SeqCst),
            SOCKETS,
            "the client never connected"
        );
        assert!(fins_in_flight(&sim).is_empty());

        crash(&mut sim, "client");

        // Ephemeral ports are handed out in increasing order: the order of opening.
        let ports = fins_in_flight(&sim);
        assert_eq!(ports.len(), SOCKETS, "one FIN per socket: {ports:?}");
        let mut opening_order = ports.clone();
        opening_order.sort_unstable();
        assert_eq!(ports, opening_order);
    }

    #[test]
    fn a_socket_dropped_outside_a_crash_closes_alone() {
        reset();
        let mut sim = sim_with_server();
        let closed = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&closed);
        sim.host("client", move || {
            let counter = Arc::clone(&counter);
            async move {
                let kept = OpenSocket::register(TcpStream::connect(("server", PORT)).await?)?;
                let dropped = OpenSocket::register(TcpStream::connect(("server", PORT)).await?)?;
                drop(dropped);
                // The socket still registered works; a closed one would fail as reset.
                let written = std::future::poll_fn(|cx| {
                    kept.poll_with(|s| std::pin::Pin::new(s).poll_write(cx, b"still open"))
                })
                .await?;
                assert_eq!(written, 10);
                counter.fetch_add(1, Ordering::SeqCst);
                std::future::pending().await
            }
        });
        for _ in 0..STEPS_MAX {
            if closed.load(Ordering::SeqCst) == 1 {
                break;
            }
            sim.step().unwrap();
        }
        assert_eq!(
            closed.load(Ordering::SeqCst),
            1,
            "the client never finished"
        );
    }
}
