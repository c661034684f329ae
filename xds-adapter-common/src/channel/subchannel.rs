//! Subchannels: one HTTP/2 connection per endpoint address the load balancer asks for.
//!
//! A `Connect` action starts one attempt here: CONNECTING, then TCP (the runtime's) and
//! the HTTP/2 handshake, then READY with the connection, or TRANSIENT_FAILURE. A READY
//! connection that closes is reported IDLE. The core owns the reconnect backoff and
//! asks again when it wants another attempt; `Disconnect` drops the channel's handle,
//! and the connection closes once the RPCs still on it finish.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use xds_proto_core::lb::{ConnectivityState, SubchannelId};
use xds_proto_core::{Code, Status};

use super::balancer::Shared;
use crate::io::HyperIo;
use crate::runtime::{BoxFuture, HyperExecutor, Runtime};
use crate::transport::error_chain;

/// Starts one connection attempt for `subchannel` on the runtime.
pub(crate) fn spawn_connect<R: Runtime>(
    shared: Arc<Shared<R>>,
    subchannel: SubchannelId,
    address: SocketAddr,
) {
    let rt = shared.rt.clone();
    let task: BoxFuture<()> = Box::pin(async move {
        shared.subchannel_state(subchannel, ConnectivityState::Connecting, None);
        let on_closed = {
            let shared = shared.clone();
            move |error: Option<String>| {
                tracing::debug!(%address, ?error, "subchannel connection closed");
                shared.subchannel_state(subchannel, ConnectivityState::Idle, None);
            }
        };
        match connect(&shared.rt, address, &shared.settings.transport, on_closed).await {
            Ok(send) => {
                tracing::debug!(%address, "subchannel ready");
                shared.subchannel_state(subchannel, ConnectivityState::Ready, Some(send));
            }
            Err(error) => {
                tracing::debug!(%address, %error, "subchannel connection failed");
                shared.subchannel_state(subchannel, ConnectivityState::TransientFailure, None);
            }
        }
    });
    rt.spawn(task);
}

/// TCP, then the HTTP/2 handshake, bounded by the connect timeout. The connection task
/// runs on the runtime; `on_closed` runs when it ends.
async fn connect<R: Runtime>(
    rt: &R,
    address: SocketAddr,
    settings: &crate::TransportSettings,
    on_closed: impl FnOnce(Option<String>) + Send + 'static,
) -> Result<hyper::client::conn::http2::SendRequest<tonic::body::Body>, String> {
    let attempt = async {
        let tcp = rt
            .connect_tcp(&address.ip().to_string(), address.port())
            .await
            .map_err(|e| format!("TCP connect to {address} failed: {e}"))?;
        hyper::client::conn::http2::Builder::new(HyperExecutor(rt.clone()))
            .initial_stream_window_size(settings.initial_stream_window_size)
            .initial_connection_window_size(settings.initial_connection_window_size)
            .handshake::<_, tonic::body::Body>(HyperIo::new(tcp))
            .await
            .map_err(|e| {
                format!(
                    "HTTP/2 handshake with {address} failed: {}",
                    error_chain(&e)
                )
            })
    };
    let timeout = rt.sleep(settings.connect_timeout);
    let (send, conn) = match futures::future::select(Box::pin(attempt), timeout).await {
        futures::future::Either::Left((result, _)) => result?,
        futures::future::Either::Right(((), _)) => {
            return Err(format!("connecting to {address} timed out"));
        }
    };
    rt.spawn(Box::pin(async move {
        let result = conn.await;
        on_closed(result.err().map(|e| error_chain(&e)));
    }));
    Ok(send)
}

/// Resolves a LOGICAL_DNS cluster's host (blocking: called on a thread of its own).
pub(crate) fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, Status> {
    match (host, port).to_socket_addrs() {
        Ok(addresses) => Ok(addresses.collect()),
        Err(e) => Err(Status::new(
            Code::UNAVAILABLE,
            format!("DNS resolution of {host}:{port} failed: {e}"),
        )),
    }
}
