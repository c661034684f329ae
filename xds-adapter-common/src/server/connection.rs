//! One accepted connection of an xDS-enabled server: its filter chain chosen by its
//! addresses (A36; none: closed without a byte), its chain's `DownstreamTls` applied
//! with `XdsServerCredentials` (A29; a chain without one is plaintext), HTTP/2 served
//! with every RPC admitted by the chain's routes, and a drain when the listener it was
//! accepted under is replaced or the server stops serving: GOAWAY at once, then closed
//! after the drain grace time, RPCs in flight finishing meanwhile. A connection whose
//! handshake (TLS, then the client's HTTP/2 preface) is not over within the handshake
//! timeout is closed (see [`handshake`](crate::handshake)).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{Either, select};
use futures::io::{AsyncRead, AsyncWrite};
use rand_core::{RngCore, SeedableRng};
use xds_proto_core::server::ConnectionAddrs;

use super::Shared;
use super::audit::AuditSink;
use super::rpc::{ConnectionContext, PeerIdentity, ServerRpcHook, call_service};
use super::{ServedBody, ServedService};
use crate::handshake::{HandshakeDeadline, PrefaceWatch};
use crate::io::HyperIo;
use crate::runtime::{HyperExecutor, HyperTimer, Runtime};
use crate::security::{CertificateProviders, XdsServerCredentials};

/// What every connection of one server shares.
pub(crate) struct ConnectionSettings<R, S> {
    pub(crate) rt: R,
    pub(crate) shared: Arc<Shared>,
    pub(crate) service: S,
    pub(crate) providers: CertificateProviders,
    pub(crate) hook: Option<Arc<dyn ServerRpcHook>>,
    pub(crate) audit: Arc<dyn AuditSink>,
    pub(crate) drain_grace: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) keepalive: Option<crate::transport::KeepaliveSettings>,
}

/// Serves one accepted connection until it ends or has drained.
pub(crate) async fn serve_connection<R, S, B, IO>(
    settings: Arc<ConnectionSettings<R, S>>,
    io: IO,
    local: SocketAddr,
    peer: SocketAddr,
) where
    R: Runtime,
    S: ServedService<B>,
    B: ServedBody,
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let deadline = HandshakeDeadline::starting(&settings.rt, settings.handshake_timeout);
    // NOT_SERVING: close without sending a byte (A36).
    let Some((config, drained)) = settings.shared.admit_connection() else {
        return;
    };
    let Some((chain, chain_index)) = config
        .select_filter_chain(ConnectionAddrs { local, peer })
        .and_then(|chain| Some((chain.clone(), config.chain_index(chain)?)))
    else {
        tracing::debug!(%peer, "no filter chain matches the connection; closing it");
        return;
    };
    let tls = chain.tls.clone();
    let mut context = ConnectionContext {
        config,
        chain,
        chain_index,
        local,
        peer,
        tls: tls.is_some(),
        peer_identity: None,
        hook: settings.hook.clone(),
        audit: settings.audit.clone(),
    };
    match tls {
        None => serve_h2(settings, io, context, drained, deadline).await,
        Some(tls) => {
            let credentials = XdsServerCredentials::new(tls, settings.providers.clone());
            let config = match credentials.server_config() {
                Ok(config) => config,
                Err(error) => {
                    tracing::warn!(%peer, %error, "no TLS configuration for the filter chain");
                    return;
                }
            };
            let accept = futures_rustls::TlsAcceptor::from(config).accept(io);
            let stream = match deadline.run(&settings.rt, accept).await {
                Some(Ok(stream)) => stream,
                Some(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                None => {
                    tracing::debug!(%peer, "TLS handshake not over within the handshake timeout; closing");
                    return;
                }
            };
            context.peer_identity = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .map(peer_identity);
            serve_h2(settings, stream, context, drained, deadline).await;
        }
    }
}

fn peer_identity(leaf: &rustls::pki_types::CertificateDer<'_>) -> PeerIdentity {
    let sans = crate::security::leaf_sans(leaf).unwrap_or_default();
    let subject = x509_parser::parse_x509_certificate(leaf)
        .map(|(_, cert)| super::subject::rfc2253(cert.subject()))
        .unwrap_or_default();
    PeerIdentity { sans, subject }
}

async fn serve_h2<R, S, B, IO>(
    settings: Arc<ConnectionSettings<R, S>>,
    io: IO,
    context: ConnectionContext,
    drained: futures::channel::oneshot::Receiver<()>,
    deadline: HandshakeDeadline,
) where
    R: Runtime,
    S: ServedService<B>,
    B: ServedBody,
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let peer = context.peer;
    let context = Arc::new(context);
    let service_settings = settings.clone();
    // Route `runtime_fraction` draws; not security sensitive.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(context.peer.port());
    let random = Arc::new(std::sync::Mutex::new(
        rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed),
    ));
    let handler =
        hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let settings = service_settings.clone();
            let context = context.clone();
            let random = random.clone();
            let response: crate::runtime::BoxFuture<
                Result<http::Response<tonic::body::Body>, std::convert::Infallible>,
            > = Box::pin(async move {
                let latest = settings.shared.latest_config();
                let mut draw = || random.lock().unwrap_or_else(|e| e.into_inner()).next_u32();
                if let Some(refusal) = context.refusal(latest.as_ref(), &request, &mut draw) {
                    return Ok(refusal);
                }
                // A failed service is the RPC's failure, not the connection's.
                Ok(call_service(settings.service.clone(), request)
                    .await
                    .unwrap_or_else(|e| tonic::Status::unknown(e.to_string()).into_http()))
            });
            response
        });
    let (io, preface) = PrefaceWatch::new(io);
    let mut builder = hyper::server::conn::http2::Builder::new(HyperExecutor(settings.rt.clone()));
    builder.timer(HyperTimer::new(settings.rt.clone()));
    if let Some(keepalive) = settings.keepalive {
        builder
            .keep_alive_interval(keepalive.interval)
            .keep_alive_timeout(keepalive.timeout);
    }
    let connection = builder.serve_connection(HyperIo::new(io), handler);
    let mut connection = std::pin::pin!(connection);
    let expired = std::pin::pin!(deadline.expired_before(&settings.rt, &preface));
    match select(connection.as_mut(), select(drained, expired)).await {
        Either::Left(_) => {}
        Either::Right((Either::Right(_), _)) => {
            tracing::debug!(%peer, "no HTTP/2 preface within the handshake timeout; closing");
        }
        Either::Right((Either::Left(_), _)) => {
            // GOAWAY now; RPCs in flight finish within the grace time.
            connection.as_mut().graceful_shutdown();
            let grace = settings.rt.sleep(settings.drain_grace);
            let _ = select(connection, grace).await;
        }
    }
}
