//! An adapter from `futures-io` byte streams to hyper's I/O traits, so that HTTP/2 and
//! TLS run the same way over any runtime's sockets. The bytes read and written can be
//! shown to a [`FrameWatcher`], which follows the connection's HTTP/2 frames.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::io::{AsyncRead, AsyncWrite};

use crate::frames::FrameWatcher;

const READ_CHUNK: usize = 16 * 1024;

/// Wraps a `futures-io` stream (`AsyncRead + AsyncWrite`) as a hyper
/// `rt::Read + rt::Write`.
///
/// Reads go through a small owned buffer, so no uninitialised memory is ever exposed.
#[derive(Debug)]
pub struct HyperIo<T> {
    inner: T,
    buf: Box<[u8]>,
    watcher: Option<FrameWatcher>,
}

impl<T> HyperIo<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> HyperIo<T> {
        HyperIo {
            inner,
            buf: vec![0; READ_CHUNK].into_boxed_slice(),
            watcher: None,
        }
    }

    /// Wraps `inner`, showing every byte read and written to `watcher`.
    pub(crate) fn watched(inner: T, watcher: FrameWatcher) -> HyperIo<T> {
        HyperIo {
            watcher: Some(watcher),
            ..HyperIo::new(inner)
        }
    }

    /// The wrapped stream.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: AsyncRead + Unpin> hyper::rt::Read for HyperIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut cursor: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let want = cursor.remaining().min(this.buf.len());
        match Pin::new(&mut this.inner).poll_read(cx, &mut this.buf[..want]) {
            Poll::Ready(Ok(n)) => {
                if let Some(watcher) = &mut this.watcher {
                    watcher.observe(&this.buf[..n]);
                    if n == 0 && want > 0 {
                        watcher.read_ended();
                    }
                }
                cursor.put_slice(&this.buf[..n]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                if let Some(watcher) = &this.watcher {
                    watcher.read_ended();
                }
                Poll::Ready(Err(e))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> hyper::rt::Write for HyperIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let (Poll::Ready(Ok(n)), Some(watcher)) = (&written, &mut this.watcher) {
            watcher.observe_written(&buf[..*n]);
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let (Poll::Ready(Ok(n)), Some(watcher)) = (&written, &mut this.watcher) {
            let mut left = *n;
            for buf in bufs {
                if left == 0 {
                    break;
                }
                let taken = left.min(buf.len());
                watcher.observe_written(&buf[..taken]);
                left -= taken;
            }
        }
        written
    }
}
