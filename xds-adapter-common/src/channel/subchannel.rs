//! Subchannels: one HTTP/2 connection per endpoint address the load balancer asks for.
//!
//! A `Connect` action starts one attempt here, with the adapters' one connection
//! attempt (`transport::connect`, as ADS connections): CONNECTING, then TCP and the
//! HTTP/2 handshake until the server's SETTINGS frame has been read, then READY with
//! the connection; a failure, or the connect timeout, is TRANSIENT_FAILURE. So a
//! backend that accepts TCP and never speaks HTTP/2 stays CONNECTING (the pickers skip
//! it, the priority policy's failover timer runs) until the connect deadline.
//!
//! A READY connection is reported IDLE when it stops taking new streams: at the
//! server's GOAWAY (the RPCs on it finish there) or when it ends (keepalive, the
//! server's close). The core owns the reconnect backoff and asks again when it wants
//! another attempt; `Disconnect` drops the channel's handle, and the connection closes
//! once the RPCs still on it finish. Each attempt is numbered, and only the attempt a
//! subchannel's slot holds may report for it: a connection retired earlier cannot
//! touch its successor.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Weak};

use xds_proto_core::lb::{ConnectivityState, SubchannelId};
use xds_proto_core::{Code, Status};

use super::balancer::Shared;
use super::connections::Attempt;
use super::security::{EndpointCredentials, EndpointSecurity};
use crate::runtime::{BoxFuture, Runtime};
use crate::security::{self, FallbackCredentials};
use crate::transport::{self, Peer};

/// Starts connection attempt `attempt` of `subchannel` on the runtime.
pub(crate) fn spawn_connect<R: Runtime>(
    shared: &Arc<Shared<R>>,
    subchannel: SubchannelId,
    attempt: Attempt,
    address: SocketAddr,
    security: EndpointSecurity,
) {
    let rt = shared.rt.clone();
    // Weak: a connection's tasks do not keep a dropped channel alive.
    let shared = Arc::downgrade(shared);
    let task: BoxFuture<()> = Box::pin(async move {
        let Some(conn) = connect(&shared, subchannel, attempt, address, security).await else {
            return;
        };
        let state = conn.state();
        if let Some(shared) = shared.upgrade() {
            tracing::debug!(%address, "subchannel ready: the server's SETTINGS arrived");
            shared.attempt_state(subchannel, attempt, ConnectivityState::Ready, Some(conn));
        }
        let retired = state.retired().await;
        tracing::debug!(%address, ?retired, "subchannel connection retired");
        if let Some(shared) = shared.upgrade() {
            shared.attempt_state(subchannel, attempt, ConnectivityState::Idle, None);
        }
    });
    rt.spawn(task);
}

/// Reports CONNECTING and makes the attempt; a failure is reported
/// TRANSIENT_FAILURE (with its error) and gives `None`, as does a channel gone
/// meanwhile.
async fn connect<R: Runtime>(
    shared: &Weak<Shared<R>>,
    subchannel: SubchannelId,
    attempt: Attempt,
    address: SocketAddr,
    security: EndpointSecurity,
) -> Option<transport::Connection> {
    let (rt, settings, peer) = {
        let shared = shared.upgrade()?;
        shared.attempt_state(subchannel, attempt, ConnectivityState::Connecting, None);
        let peer = peer(&shared.settings.credentials, address, security);
        (shared.rt.clone(), shared.settings.transport.clone(), peer)
    };
    let result = match peer {
        Ok(peer) => transport::connect(&rt, &peer, &settings, |_| {}).await,
        Err(error) => Err(format!("{address}: {error}")),
    };
    match result {
        Ok(conn) => Some(conn),
        Err(error) => {
            tracing::info!(%address, %error, "subchannel TRANSIENT_FAILURE: the connection attempt failed");
            if let Some(shared) = shared.upgrade() {
                shared.attempt_failed(subchannel, attempt, address, error);
            }
            None
        }
    }
}

/// Where and how to dial `address`: plaintext without xDS credentials; with them, the
/// cluster's TLS (identity and roots asked of the providers now), else the fallback.
fn peer(
    credentials: &EndpointCredentials,
    address: SocketAddr,
    security: EndpointSecurity,
) -> Result<Peer, String> {
    let EndpointCredentials::Xds {
        providers,
        fallback,
    } = credentials
    else {
        return Ok(Peer::endpoint(address));
    };
    match (security, fallback) {
        (EndpointSecurity::Tls(tls, host), _) => {
            let tls = security::connection_tls(&tls, providers, host.as_deref(), address)?;
            Ok(Peer::endpoint_xds_tls(address, tls))
        }
        (EndpointSecurity::Conflict(why), _) => Err(why),
        (EndpointSecurity::Fallback, FallbackCredentials::Tls(config)) => {
            Ok(Peer::endpoint_tls(address, config.clone()))
        }
        (EndpointSecurity::Fallback, _) => Ok(Peer::endpoint(address)),
    }
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
