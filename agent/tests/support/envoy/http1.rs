//! Just enough HTTP/1.1 for the Envoy tests: a client sending one GET per connection, and
//! an upstream answering every request with 200 `ok` and counting them.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest a client or the upstream waits on one read or write: a stuck peer fails the
/// test instead of hanging it.
pub const IO_TIMEOUT_MS: u64 = 10_000;
/// Largest request head the upstream reads.
const HEAD_LEN_MAX: usize = 64 * 1024;

/// A response as the client received it; header names are lowercase.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first value of header `name` (any letter case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` to `127.0.0.1:port` with `headers`, on a connection of its own that the
/// server closes after answering (so the whole response is what arrives before EOF).
pub fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    let timeout = Some(Duration::from_millis(IO_TIMEOUT_MS));
    s.set_read_timeout(timeout)?;
    s.set_write_timeout(timeout)?;
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse(&raw).map_err(|why| {
        let text = String::from_utf8_lossy(&raw);
        io::Error::new(io::ErrorKind::InvalidData, format!("{why}: {text:?}"))
    })
}

fn parse(raw: &[u8]) -> Result<Response, String> {
    let split = find(raw, b"\r\n\r\n").ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|e| e.to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// The payload of a chunked body (trailers ignored).
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let eol = find(rest, b"\r\n").ok_or("chunk size without end of line")?;
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|e| e.to_string())?;
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|e| format!("chunk size: {e}"))?;
        if size == 0 {
            return Ok(body);
        }
        let data = rest.get(eol + 2..eol + 2 + size).ok_or("chunk cut short")?;
        body.extend_from_slice(data);
        rest = rest
            .get(eol + 4 + size..)
            .ok_or("chunk without end of line")?;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// An upstream on a free loopback port answering every request with 200 `ok`, one
/// request per connection. Stops accepting when dropped.
pub struct Upstream {
    pub port: u16,
    served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the upstream");
        let port = listener.local_addr().expect("upstream address").port();
        let served = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopping) = (Arc::clone(&served), Arc::clone(&stop));
        let acceptor = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::Acquire) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let count = Arc::clone(&count);
                std::thread::spawn(move || answer(conn, &count));
            }
        });
        Upstream {
            port,
            served,
            stop,
            acceptor: Some(acceptor),
        }
    }

    /// Requests received so far.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::Acquire)
    }
}

/// Reads one request head and answers it, then closes the connection, which tells Envoy
/// not to reuse it. The requests carry no body.
fn answer(mut conn: TcpStream, served: &AtomicUsize) {
    let timeout = Some(Duration::from_millis(IO_TIMEOUT_MS));
    if conn.set_read_timeout(timeout).is_err() || conn.set_write_timeout(timeout).is_err() {
        return;
    }
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while find(&head, b"\r\n\r\n").is_none() {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) if head.len() + n > HEAD_LEN_MAX => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
    // Counted before the answer leaves, so a client holding the answer sees the count.
    served.fetch_add(1, Ordering::AcqRel);
    let _ = conn.write_all(reply);
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // The acceptor is blocked in accept: one connection wakes it to see the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}
