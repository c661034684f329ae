//! The small trait through which the shared code uses a runtime: spawning a task,
//! reading the clock, sleeping, and opening a TCP connection. Everything else (TLS,
//! HTTP/2, gRPC, the drive loop) is written once on top of it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use futures::io::{AsyncRead, AsyncWrite};
use xds_proto_core::Instant;

/// A boxed, sendable future, as the runtime trait passes them around.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What an adapter implements to run the shared client on its runtime.
///
/// The clock is the runtime's own (so a runtime with virtual time, such as tokio's
/// paused clock, drives the core's timers virtually); `now` maps it onto the core's
/// [`Instant`], counted from an origin the implementation picks once.
pub trait Runtime: Clone + Send + Sync + Unpin + 'static {
    /// A connected TCP stream.
    type TcpStream: AsyncRead + AsyncWrite + Send + Unpin + 'static;

    /// The runtime of the calling context, or why there is none (for example: not
    /// called from inside a tokio runtime).
    fn current() -> Result<Self, String>;

    /// Runs a task in the background until it completes.
    fn spawn(&self, task: BoxFuture<()>);

    /// The current time on the runtime's clock.
    fn now(&self) -> Instant;

    /// A future that completes after `duration` on the runtime's clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<()>;

    /// Opens a TCP connection to `host:port`, resolving `host` if it is a name.
    fn connect_tcp(&self, host: &str, port: u16) -> BoxFuture<io::Result<Self::TcpStream>>;
}

/// Lets hyper spawn its connection tasks on a [`Runtime`].
#[derive(Clone, Debug)]
pub(crate) struct HyperExecutor<R>(pub(crate) R);

impl<R: Runtime, F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F>
    for HyperExecutor<R>
{
    fn execute(&self, fut: F) {
        self.0.spawn(Box::pin(fut));
    }
}
