//! One RPC on an xDS-enabled server: routed through its connection's filter chain's
//! route configuration (A36), through the route's server HTTP filters (RBAC, A41:
//! PERMISSION_DENIED) and the application's hook, then served by the application's
//! service or refused with UNAVAILABLE.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tower_service::Service;
use xds_proto_core::filter::rbac::{ConnectionSecurity, PeerCertificate, RbacRequest};
use xds_proto_core::filter::server::ServerFilters;
use xds_proto_core::resource::listener::FilterChain;
use xds_proto_core::security::SubjectAltName;
use xds_proto_core::selector::Metadata;
use xds_proto_core::server::{RoutedRpc, RpcRefusal, ServingConfig, route_rpc};

use super::audit::{AuditSink, SinkLogger};

/// A boxed error, as tower services return them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The peer's verified certificate, for authorization (A41's authenticated principal).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The leaf certificate's subject alternative names.
    pub sans: Vec<SubjectAltName>,
    /// The leaf certificate's subject as an RFC 2253 string without spaces after the
    /// commas, most significant RDN last (`CN=client,O=Example,C=US`), as gRPC-Go
    /// writes it.
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

/// The application's hook: called for every RPC after routing and after the route's
/// server HTTP filters (RBAC, which the server runs itself) allowed it, before the
/// route's action is checked (A36: filters run, then a route without
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
    /// The chain's index in `config`'s listener (and in any newer configuration of
    /// the same generation), for its per-route server filters.
    pub(crate) chain_index: usize,
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
    /// Whether the connection is TLS.
    pub(crate) tls: bool,
    /// The client's certificate, read once at the handshake.
    pub(crate) peer_identity: Option<PeerIdentity>,
    pub(crate) hook: Option<Arc<dyn ServerRpcHook>>,
    pub(crate) audit: Arc<dyn AuditSink>,
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
        if let Some(filters) = config.server_filters(self.chain_index, &routed) {
            self.authorize(filters, request, authority, path)?;
        }
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

impl ConnectionContext {
    /// Runs the route's RBAC filters (A41) on `request`.
    fn authorize<B>(
        &self,
        filters: &ServerFilters,
        request: &http::Request<B>,
        authority: &str,
        path: &str,
    ) -> Result<(), Box<tonic::Status>> {
        let headers = Headers(request.headers());
        let security = match (self.tls, &self.peer_identity) {
            (false, _) => ConnectionSecurity::Plaintext,
            (true, identity) => {
                ConnectionSecurity::Tls(identity.as_ref().map(|id| PeerCertificate {
                    sans: &id.sans,
                    subject: &id.subject,
                }))
            }
        };
        let rbac = RbacRequest {
            path,
            method: request.method().as_str(),
            authority: (!authority.is_empty()).then_some(authority),
            headers: &headers,
            local_addr: self.local,
            peer_addr: self.peer,
            security,
        };
        filters
            .authorize(&rbac, &mut SinkLogger(self.audit.as_ref()))
            .map_err(|message| Box::new(tonic::Status::permission_denied(message)))
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
