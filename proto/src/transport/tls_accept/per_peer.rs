//! Connections counted per client certificate, so that one holder of a certificate of the
//! deployment's CA cannot take every connection slot of a listener.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

use crate::transport::source_of;

/// Open connections per certificate (told apart as [`source_of`] tells callers apart).
#[derive(Debug, Default)]
pub(super) struct PeerCounts(Mutex<HashMap<u32, usize>>);

impl PeerCounts {
    /// A slot for a connection of the certificate `cert` (DER), unless that certificate
    /// already has `max` connections open.
    pub(super) fn admit(self: &Arc<Self>, cert: &[u8], max: usize) -> Option<PeerSlot> {
        let peer = source_of(Some(cert), None);
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let open = counts.entry(peer).or_default();
        if *open >= max {
            return None;
        }
        *open += 1;
        Some(PeerSlot {
            counts: Arc::clone(self),
            peer,
        })
    }
}

/// One connection's place in its certificate's count, given back when dropped.
#[derive(Debug)]
pub(super) struct PeerSlot {
    counts: Arc<PeerCounts>,
    peer: u32,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(open) = counts.get_mut(&self.peer) {
            *open -= 1;
            if *open == 0 {
                counts.remove(&self.peer);
            }
        }
    }
}

/// An established connection holding its place in its certificate's count.
#[derive(Debug)]
pub struct PeerCounted<IO> {
    io: IO,
    _slot: Option<PeerSlot>,
}

impl<IO> PeerCounted<IO> {
    pub(super) fn new(io: IO, slot: Option<PeerSlot>) -> Self {
        PeerCounted { io, _slot: slot }
    }

    /// The connection inside.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for PeerCounted<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for PeerCounted<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for PeerCounted<IO> {
    type ConnectInfo = IO::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}
