//! One RPC on an xDS-enabled server: routed through its connection's filter chain's
//! route configuration (A36), past the server HTTP filters' hook, then served by the
//! application's service or refused with UNAVAILABLE.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tower_service::Service;
use xds_proto_core::resource::listener::FilterChain;
use xds_proto_core::security::SubjectAltName;
use xds_proto_core::selector::Metadata;
use xds_proto_core::server::{RoutedRpc, RpcRefusal, ServingConfig, route_rpc};

/// A boxed error, as tower services return them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The peer's verified certificate, for authorization (A41's authenticated principal).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The leaf certificate's subject alternative names.
    pub sans: Vec<SubjectAltName>,
    /// The leaf certificate's subject, RFC 4514 style.
    pub subject: String,
}

/// What the server HTTP filters (RBAC, A41) of one RPC see.
#[derive(Debug)]
pub struct ServerRpc<'a> {
    /// The connection's filter chain (its `http_connection_manager.http_filters`).
    pub chain: &'a FilterChain,
    /// The virtual host and route the RPC matched (their per-route filter overrides).
    pub routed: RoutedRpc<'a>,
    /// The RPC's path, `/service/method`.
    pub path: &'a str,
    /// The request headers.
    pub headers: &'a http::HeaderMap,
    /// The server's address of the connection.
    pub local: SocketAddr,
    /// The client's address.
    pub peer: SocketAddr,
    /// The client's certificate, when it presented one over TLS.
    pub peer_identity: Option<&'a PeerIdentity>,
}

/// Where the server HTTP filters run: called for every RPC after routing and before
/// the route's action is checked (A36: filters run, then a route without
/// `non_forwarding_action` fails UNAVAILABLE). An `Err` fails the RPC with that status.
pub trait ServerRpcHook: Send + Sync + 'static {
    /// Decides one RPC.
    ///
    /// # Errors
    /// The status the RPC fails with (PERMISSION_DENIED for an RBAC refusal).
    fn on_rpc(&self, rpc: &ServerRpc<'_>) -> Result<(), tonic::Status>;
}

/// A connection's view of the server, for its RPCs.
pub(crate) struct ConnectionContext {
    /// The configuration the connection was accepted under.
    pub(crate) config: Arc<ServingConfig>,
    /// Its filter chain.
    pub(crate) chain: FilterChain,
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) peer_identity: Option<PeerIdentity>,
    pub(crate) hook: Option<Arc<dyn ServerRpcHook>>,
}

/// Request headers as the core's matchers read them.
struct Headers<'a>(&'a http::HeaderMap);

impl Metadata for Headers<'_> {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        for value in self.0.get_all(name) {
            if let Ok(v) = value.to_str() {
                f(v);
            }
        }
    }
}

impl ConnectionContext {
    /// Decides `request` against `latest` (the newest configuration, for RDS updates;
    /// the connection's own when the server no longer has one): `None` to serve it, or
    /// the response refusing it.
    pub(crate) fn refusal<B>(
        &self,
        latest: Option<&Arc<ServingConfig>>,
        request: &http::Request<B>,
        random: &mut dyn FnMut() -> u32,
    ) -> Option<http::Response<tonic::body::Body>> {
        self.decide(latest, request, random)
            .err()
            .map(|s| s.into_http())
    }

    fn decide<B>(
        &self,
        latest: Option<&Arc<ServingConfig>>,
        request: &http::Request<B>,
        random: &mut dyn FnMut() -> u32,
    ) -> Result<(), Box<tonic::Status>> {
        let unavailable = |e: RpcRefusal| Box::new(tonic::Status::unavailable(e.to_string()));
        // RDS names are per configuration: a draining connection keeps its own.
        let config = latest
            .filter(|l| l.generation == self.config.generation)
            .unwrap_or(&self.config);
        let routes = config.routes_for(&self.chain).map_err(unavailable)?;
        let authority = request
            .uri()
            .authority()
            .map(|a| a.as_str())
            .or_else(|| request.headers().get(http::header::HOST)?.to_str().ok())
            .unwrap_or_default();
        let path = request.uri().path();
        let mut random = random;
        let routed = route_rpc(
            routes,
            authority,
            path,
            &Headers(request.headers()),
            &mut random,
        )
        .map_err(unavailable)?;
        if let Some(hook) = &self.hook {
            let rpc = ServerRpc {
                chain: &self.chain,
                routed,
                path,
                headers: request.headers(),
                local: self.local,
                peer: self.peer,
                peer_identity: self.peer_identity.as_ref(),
            };
            hook.on_rpc(&rpc).map_err(Box::new)?;
        }
        routed.finish().map_err(unavailable)
    }
}

/// Calls the application's service, its response body boxed as tonic's.
pub(crate) async fn call_service<S, B>(
    mut service: S,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<tonic::body::Body>, BoxError>
where
    S: Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    futures::future::poll_fn(|cx| service.poll_ready(cx))
        .await
        .map_err(|e| -> BoxError { e.into() })?;
    let response = service
        .call(request)
        .await
        .map_err(|e| -> BoxError { e.into() })?;
    Ok(response.map(tonic::body::Body::new))
}
