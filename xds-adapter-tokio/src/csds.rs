//! Serving CSDS on tokio: [`CsdsServer`] listens on a TCP address and serves the
//! `envoy.service.status.v3.ClientStatusDiscoveryService` gRPC service (plaintext
//! HTTP/2) of a [`ClientPool`].

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::watch;
use tokio::task::JoinSet;
use xds_adapter_common::CsdsService;

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
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(service, listener, stopped));
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
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = until_stopped(&mut stopped) => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    tracing::debug!(%peer, "CSDS connection");
                    connections.spawn(serve_connection(tcp, service.clone(), stopped.clone()));
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
) {
    let builder = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    let connection = builder.serve_connection(
        hyper_util::rt::TokioIo::new(tcp),
        hyper_util::service::TowerToHyperService::new(service),
    );
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
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
