//! Serving CSDS on tokio: [`CsdsServer`] listens on a TCP address and serves the
//! `envoy.service.status.v3.ClientStatusDiscoveryService` gRPC service (plaintext
//! HTTP/2) of a [`ClientPool`]. A connection that has not sent its HTTP/2 preface
//! within [`DEFAULT_HANDSHAKE_TIMEOUT`] (120 s, gRPC's default) is closed.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::compat::TokioAsyncReadCompatExt;
use xds_adapter_common::handshake::{DEFAULT_HANDSHAKE_TIMEOUT, HandshakeDeadline, PrefaceWatch};
use xds_adapter_common::{CsdsService, HyperIo, Runtime};

use crate::{ClientPool, TokioRuntime};

/// How long [`CsdsServer::shutdown`] lets open calls finish after telling their
/// connections to go away (`StreamClientStatus` calls never finish by themselves).
pub const CSDS_SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// A running CSDS server. Stops on [`shutdown`](Self::shutdown), or when dropped.
#[derive(Debug)]
pub struct CsdsServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl CsdsServer {
    /// Binds `addr` (for example `127.0.0.1:0` for a free port) and serves the CSDS
    /// service of `pool` on it, on the calling tokio runtime.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub async fn serve(pool: ClientPool, addr: impl ToSocketAddrs) -> io::Result<CsdsServer> {
        let listener = TcpListener::bind(addr).await?;
        CsdsServer::serve_listener(CsdsService::new(pool), listener)
    }

    /// Serves `service` on an already bound listener.
    ///
    /// # Errors
    /// When the listener's address cannot be read.
    pub fn serve_listener(
        service: CsdsService<TokioRuntime>,
        listener: TcpListener,
    ) -> io::Result<CsdsServer> {
        CsdsServer::serve_with(service, listener, DEFAULT_HANDSHAKE_TIMEOUT)
    }

    fn serve_with(
        service: CsdsService<TokioRuntime>,
        listener: TcpListener,
        handshake_timeout: Duration,
    ) -> io::Result<CsdsServer> {
        let addr = listener.local_addr()?;
        let rt = TokioRuntime::current().map_err(io::Error::other)?;
        let (stop, stopped) = watch::channel(false);
        let handshake = (rt, handshake_timeout);
        let task = tokio::spawn(accept_loop(service, listener, stopped, handshake));
        tracing::debug!(%addr, "CSDS server listening");
        Ok(CsdsServer {
            addr,
            stop,
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening, tells every connection to go away (HTTP/2 GOAWAY), lets open
    /// calls finish for at most [`CSDS_SHUTDOWN_GRACE`], and returns once every
    /// connection is closed.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for CsdsServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn accept_loop(
    service: CsdsService<TokioRuntime>,
    listener: TcpListener,
    mut stopped: watch::Receiver<bool>,
    (rt, handshake_timeout): (TokioRuntime, Duration),
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = until_stopped(&mut stopped) => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    tracing::debug!(%peer, "CSDS connection");
                    let deadline = HandshakeDeadline::starting(&rt, handshake_timeout);
                    let connection = serve_connection(tcp, service.clone(), stopped.clone(), (rt.clone(), deadline));
                    connections.spawn(connection);
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "CSDS server: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
    tracing::debug!("CSDS server stopped");
}

/// Resolves once the server is told to stop (or its handle is gone).
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

async fn serve_connection(
    tcp: tokio::net::TcpStream,
    service: CsdsService<TokioRuntime>,
    mut stopped: watch::Receiver<bool>,
    (rt, deadline): (TokioRuntime, HandshakeDeadline),
) {
    let (io, preface) = PrefaceWatch::new(tcp.compat());
    let builder = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    let connection = builder.serve_connection(
        HyperIo::new(io),
        hyper_util::service::TowerToHyperService::new(service),
    );
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = deadline.expired_before(&rt, &preface) => {
            tracing::debug!("CSDS connection: no HTTP/2 preface within the handshake timeout; closing");
            Ok(())
        }
        _ = until_stopped(&mut stopped) => {
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(CSDS_SHUTDOWN_GRACE, connection.as_mut()).await {
                Ok(result) => result,
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "CSDS connection ended");
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Instant;

    use super::*;

    /// How long a connection to `addr` that sends `first` stays open, up to `limit`.
    fn lifetime(addr: SocketAddr, first: &'static [u8], limit: Duration) -> Option<Duration> {
        let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
        let start = Instant::now();
        tcp.write_all(first).expect("write");
        let mut buf = [0u8; 256];
        loop {
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                return None;
            }
            tcp.set_read_timeout(Some(left)).expect("a timeout");
            match tcp.read(&mut buf) {
                Ok(0) => return Some(start.elapsed()),
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return None;
                }
                Err(_) => return Some(start.elapsed()),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_without_its_preface_is_closed_at_the_handshake_timeout() {
        let bootstrap = xds_adapter_common::exports::Bootstrap::from_json_str(
            r#"{"xds_servers": [{"server_uri": "127.0.0.1:1", "channel_creds": [{"type": "insecure"}]}],
                "node": {"id": "csds-handshake"}}"#,
        )
        .expect("a bootstrap");
        let pool = ClientPool::builder(bootstrap).build_pool().expect("a pool");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let timeout = Duration::from_millis(300);
        let server =
            CsdsServer::serve_with(CsdsService::new(pool), listener, timeout).expect("serve");
        let addr = server.local_addr();
        let silent =
            tokio::task::spawn_blocking(move || lifetime(addr, b"", Duration::from_secs(5)))
                .await
                .expect("the silent connection")
                .expect("closed");
        assert!(
            silent >= timeout.mul_f32(0.9) && silent < Duration::from_secs(3),
            "{silent:?}"
        );
        // The preface and an empty SETTINGS frame: the connection outlives the deadline.
        let greeted = tokio::task::spawn_blocking(move || {
            let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
            lifetime(addr, preface, timeout * 3)
        })
        .await
        .expect("the greeted connection");
        assert_eq!(greeted, None);
        server.shutdown().await;
    }
}
