//! `XdsServer` on async-std: binds the listening port and hands its connections to the
//! shared [`xds_adapter_common::XdsServerBuilder`].

use std::net::SocketAddr;

use xds_adapter_common::server::{ServedBody, ServedService};

use crate::{AsyncStdRuntime, Client};

pub use xds_adapter_common::server::{
    AuditSink, DEFAULT_DRAIN_GRACE, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_SERVER_KEEPALIVE_INTERVAL,
    PeerIdentity, ServerRpc, ServerRpcHook, StdoutAuditLogger, XdsServer,
};
pub use xds_proto_core::server::ServingMode;

/// Configures an [`XdsServer`] on async-std: see
/// [`xds_adapter_common::XdsServerBuilder`].
pub type XdsServerBuilder = xds_adapter_common::XdsServerBuilder<AsyncStdRuntime>;

/// Binds `addr` (a fixed port: A36 has no ephemeral ports) and serves `service` as an
/// xDS-enabled server configured by `builder`.
///
/// # Errors
/// The port cannot be bound, or [`XdsServerBuilder::serve_incoming`]'s errors.
pub async fn serve<S, B>(
    builder: XdsServerBuilder,
    addr: SocketAddr,
    service: S,
) -> Result<XdsServer, Box<dyn std::error::Error + Send + Sync>>
where
    S: ServedService<B>,
    B: ServedBody,
{
    let listener = async_std::net::TcpListener::bind(addr).await?;
    let listening = listener.local_addr()?;
    let incoming = Box::pin(futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.and_then(|(tcp, peer)| {
            tcp.set_nodelay(true)?;
            let local = tcp.local_addr()?;
            Ok((tcp, local, peer))
        });
        Some((accepted, listener))
    }));
    Ok(builder.serve_incoming(listening, incoming, service).await?)
}

/// [`XdsServerBuilder::new`] for a client.
pub fn builder(client: Client) -> XdsServerBuilder {
    XdsServerBuilder::new(client)
}
