//! A small blocking HTTP/1.1 client with keep-alive for the agents' admit API: one
//! connection per generator thread, re-made after any failure, every call bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Deadline of connecting, writing a request or reading its answer, in milliseconds.
const HTTP_IO_TIMEOUT_MS: u64 = 1_000;
/// Largest answer body read, in bytes.
const HTTP_BODY_LEN_MAX: usize = 64 * 1024;

/// What an admit call came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Admitted,
    Denied,
    /// No answer (agent down, stopped, or not ready).
    Failed,
}

/// A keep-alive connection to one agent's HTTP listener.
pub struct AdmitClient {
    addr: SocketAddr,
    conn: Option<BufReader<TcpStream>>,
}

impl AdmitClient {
    pub fn new(addr: SocketAddr) -> AdmitClient {
        AdmitClient { addr, conn: None }
    }

    /// One `POST /v1/admit` of one unit of `policy` for `tenant`.
    pub fn admit(&mut self, policy: &str, tenant: &str) -> Answer {
        let body = format!(
            r#"{{"dimensions":[{{"policy":"{policy}","entries":{{"tenant":"{tenant}"}}}}]}}"#
        );
        let req = format!(
            "POST /v1/admit HTTP/1.1\r\nhost: agent\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        match self.exchange(req.as_bytes()) {
            Some(text) if text.contains("\"allowed\":true") => Answer::Admitted,
            Some(text) if text.contains("\"allowed\":false") => Answer::Denied,
            _ => {
                self.conn = None;
                Answer::Failed
            }
        }
    }

    fn connect(&mut self) -> Option<&mut BufReader<TcpStream>> {
        if self.conn.is_none() {
            let timeout = Duration::from_millis(HTTP_IO_TIMEOUT_MS);
            let s = TcpStream::connect_timeout(&self.addr, timeout).ok()?;
            s.set_read_timeout(Some(timeout)).ok()?;
            s.set_write_timeout(Some(timeout)).ok()?;
            s.set_nodelay(true).ok()?;
            self.conn = Some(BufReader::new(s));
        }
        self.conn.as_mut()
    }

    /// Writes `req` and reads one answer's body.
    fn exchange(&mut self, req: &[u8]) -> Option<String> {
        let conn = self.connect()?;
        conn.get_mut().write_all(req).ok()?;
        let mut status = String::new();
        conn.read_line(&mut status).ok()?;
        if !status.starts_with("HTTP/1.1 ") {
            return None;
        }
        let mut len = 0usize;
        let mut close = false;
        loop {
            let mut line = String::new();
            if conn.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':')?;
            let name = name.trim().to_ascii_lowercase();
            if name == "content-length" {
                len = value.trim().parse().ok()?;
            } else if name == "connection" && value.trim().eq_ignore_ascii_case("close") {
                close = true;
            }
        }
        if len > HTTP_BODY_LEN_MAX {
            return None;
        }
        let mut body = vec![0; len];
        conn.read_exact(&mut body).ok()?;
        if close {
            self.conn = None;
        }
        String::from_utf8(body).ok()
    }
}

/// Whether the agent at `addr` answers `/readyz` with 200 (it has its policies).
pub fn ready(addr: SocketAddr) -> bool {
    let timeout = Duration::from_millis(HTTP_IO_TIMEOUT_MS);
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    if s.write_all(b"GET /readyz HTTP/1.1\r\nhost: agent\r\nconnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}
