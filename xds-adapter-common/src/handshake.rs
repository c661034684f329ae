//! The handshake deadline of a connection a server accepted: from the accept, the TLS
//! handshake (an `XdsServer` filter chain with a `DownstreamTlsContext`) and the
//! client's HTTP/2 preface with the header of its first frame must arrive within the
//! server's handshake timeout, or the connection is closed. `XdsServer` and the tokio
//! adapter's CSDS server use it. Without it a peer that connects and says
//! nothing holds a task and a socket for as long as it likes. gRPC-Go's server
//! (`ConnectionTimeout`) and C-core's (`GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS`) give
//! 120 s by default, as [`DEFAULT_HANDSHAKE_TIMEOUT`] does.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::io::{AsyncRead, AsyncWrite};
use xds_proto_core::Instant;

use crate::runtime::Runtime;

/// gRPC-Go's and C-core's default time from accepting a connection to its handshake's
/// end.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

/// The client's connection preface (RFC 9113 §3.4) and one frame header: the bytes
/// that end the HTTP/2 handshake as this server counts it.
const HANDSHAKE_BYTES: u64 = 24 + 9;

/// When one connection's handshake must be over.
#[derive(Clone, Copy, Debug)]
pub struct HandshakeDeadline {
    at: Instant,
}

impl HandshakeDeadline {
    /// The deadline of a connection accepted now.
    pub fn starting<R: Runtime>(rt: &R, timeout: Duration) -> HandshakeDeadline {
        HandshakeDeadline {
            at: rt.now() + timeout,
        }
    }

    /// Runs `step` (the TLS handshake) until the deadline; `None` when it passed first.
    pub async fn run<R: Runtime, T>(
        self,
        rt: &R,
        step: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let step = std::pin::pin!(step);
        let expired = rt.sleep(self.at.saturating_duration_since(rt.now()));
        match futures::future::select(step, expired).await {
            futures::future::Either::Left((out, _)) => Some(out),
            futures::future::Either::Right(_) => None,
        }
    }

    /// Resolves when the deadline passes before `preface` has seen the client's
    /// preface; never resolves once it has.
    pub async fn expired_before<R: Runtime>(self, rt: &R, preface: &PrefaceSeen) {
        rt.sleep(self.at.saturating_duration_since(rt.now())).await;
        if preface.seen() {
            futures::future::pending::<()>().await;
        }
    }
}

/// Whether the client's preface and first frame header have been read.
#[derive(Clone, Debug, Default)]
pub struct PrefaceSeen(Arc<AtomicBool>);

impl PrefaceSeen {
    /// Whether the preface and the first frame header have been read.
    pub fn seen(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A connection's byte stream (above TLS), counting what is read until the handshake's
/// bytes are in; then it only passes through.
pub struct PrefaceWatch<T> {
    inner: T,
    read: u64,
    seen: PrefaceSeen,
}

impl<T> PrefaceWatch<T> {
    /// Wraps `inner`, with the flag that tells when the handshake's bytes are in.
    pub fn new(inner: T) -> (PrefaceWatch<T>, PrefaceSeen) {
        let seen = PrefaceSeen::default();
        let watch = PrefaceWatch {
            inner,
            read: 0,
            seen: seen.clone(),
        };
        (watch, seen)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for PrefaceWatch<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(n)) = polled
            && this.read < HANDSHAKE_BYTES
        {
            this.read += n as u64;
            if this.read >= HANDSHAKE_BYTES {
                this.seen.0.store(true, Ordering::Release);
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for PrefaceWatch<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}
