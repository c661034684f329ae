//! `XdsServer`, gRPC's xDS-enabled server (gRFC A36) for tonic: it watches the Listener
//! named after its listening address through the `XdsClient`, keeps the core's
//! [`ServingState`] fed with it and its RDS resources, and serves the connections a
//! runtime accepts ([`XdsServerBuilder::serve_incoming`]; the tokio and async-std
//! adapters bind the port). Connections are closed without a byte while NOT_SERVING
//! or when no filter chain matches; each gets its chain's TLS and routes; a new
//! listener drains the older connections (GOAWAY, closed after the drain grace time);
//! a connection whose handshake is not over within the handshake timeout is closed.
//! Serving-mode changes reach a callback and [`XdsServer::mode`].

mod audit;
mod connection;
mod rpc;
mod subject;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::channel::oneshot;
use futures::future::Future;
use futures::stream::{Stream, StreamExt};
use tower_service::Service;
use xds_proto_core::Lds;
use xds_proto_core::resource::{Rds, ResourceTypeInfo};
use xds_proto_core::server::{ServingConfig, ServingEvent, ServingMode, ServingState};

pub use crate::handshake::DEFAULT_HANDSHAKE_TIMEOUT;
pub use audit::{AuditSink, StdoutAuditLogger};
pub use rpc::{BoxError, PeerIdentity, ServerRpc, ServerRpcHook};

/// What an [`XdsServer`] serves: a cloneable HTTP service (a tonic router, a generated
/// server) answering with bodies of type `B`. Implemented for every such service.
pub trait ServedService<B>:
    Service<
        http::Request<hyper::body::Incoming>,
        Response = http::Response<B>,
        Future: Send,
        Error: Into<BoxError>,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S, B> ServedService<B> for S where
    S: Service<
            http::Request<hyper::body::Incoming>,
            Response = http::Response<B>,
            Future: Send,
            Error: Into<BoxError>,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// A response body an [`XdsServer`] can send. Implemented for every such body.
pub trait ServedBody:
    http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}

impl<B> ServedBody for B where
    B: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}

use self::connection::{ConnectionSettings, serve_connection};
use crate::security::CertificateProviders;
use crate::transport::KeepaliveSettings;
use crate::{Client, Error, RawWatchStream, Runtime};

/// gRPC's default time without a frame from a client after which a server sends a
/// keepalive PING (gRPC-Go's `keepalive.ServerParameters.Time`, C-core's server
/// `GRPC_ARG_KEEPALIVE_TIME_MS`).
pub const DEFAULT_SERVER_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2 * 60 * 60);

/// A36's default drain grace time for connections of a replaced listener.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(600);

/// A serving-mode callback.
pub type ServingModeCallback = Arc<dyn Fn(SocketAddr, &ServingMode) + Send + Sync>;

/// The state connections and the watch task share.
pub(crate) struct Shared {
    inner: Mutex<SharedInner>,
}

struct SharedInner {
    stopped: bool,
    mode: ServingMode,
    config: Option<Arc<ServingConfig>>,
    /// Connections' drain signals, by the generation they were accepted under.
    drains: Vec<(u64, oneshot::Sender<()>)>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SharedInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// While serving: the configuration a new connection uses and its drain signal.
    pub(crate) fn admit_connection(&self) -> Option<(Arc<ServingConfig>, oneshot::Receiver<()>)> {
        let mut inner = self.lock();
        let config = match (&inner.mode, &inner.config) {
            (ServingMode::Serving, Some(config)) => config.clone(),
            _ => return None,
        };
        let (tx, rx) = oneshot::channel();
        inner.drains.retain(|(_, tx)| !tx.is_canceled());
        inner.drains.push((config.generation, tx));
        Some((config, rx))
    }

    /// The newest configuration, if serving.
    pub(crate) fn latest_config(&self) -> Option<Arc<ServingConfig>> {
        self.lock().config.clone()
    }

    /// Publishes the state's mode and configuration; drains connections accepted under
    /// another generation (all of them when not serving). Nothing after [`Self::stop`].
    fn publish(&self, state: &ServingState) {
        let mut inner = self.lock();
        if inner.stopped {
            return;
        }
        inner.mode = state.mode().clone();
        inner.config = state.config().cloned();
        inner.drain_others();
    }

    /// The server is shut down: NOT_SERVING for good, every connection drained.
    fn stop(&self) {
        let mut inner = self.lock();
        inner.stopped = true;
        inner.mode = ServingMode::NotServing("the server is shut down".into());
        inner.config = None;
        inner.drain_others();
    }
}

impl SharedInner {
    /// Drains the connections accepted under another generation than the current one.
    fn drain_others(&mut self) {
        let current = self.config.as_ref().map(|c| c.generation);
        let (keep, drain): (Vec<_>, Vec<_>) = std::mem::take(&mut self.drains)
            .into_iter()
            .partition(|(generation, _)| Some(*generation) == current);
        self.drains = keep;
        for (_, tx) in drain {
            let _ = tx.send(());
        }
    }
}

/// Configures an [`XdsServer`].
pub struct XdsServerBuilder<R: Runtime> {
    client: Client<R>,
    providers: Option<CertificateProviders>,
    drain_grace: Duration,
    handshake_timeout: Duration,
    keepalive: Option<KeepaliveSettings>,
    on_mode: Option<ServingModeCallback>,
    hook: Option<Arc<dyn ServerRpcHook>>,
    audit: Option<Arc<dyn AuditSink>>,
}

impl<R: Runtime> XdsServerBuilder<R> {
    /// A server whose listener is watched through `client` (its bootstrap has the
    /// `server_listener_resource_name_template`).
    pub fn new(client: Client<R>) -> XdsServerBuilder<R> {
        XdsServerBuilder {
            client,
            providers: None,
            drain_grace: DEFAULT_DRAIN_GRACE,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            keepalive: Some(KeepaliveSettings {
                interval: DEFAULT_SERVER_KEEPALIVE_INTERVAL,
                timeout: crate::transport::DEFAULT_KEEPALIVE_TIMEOUT,
            }),
            on_mode: None,
            hook: None,
            audit: None,
        }
    }

    /// The certificate providers for filter chains with a `DownstreamTlsContext`
    /// (`XdsServerCredentials`, A29); by default the bootstrap's, started on the
    /// client's runtime.
    pub fn certificate_providers(mut self, providers: CertificateProviders) -> Self {
        self.providers = Some(providers);
        self
    }

    /// How long a draining connection may keep its RPCs after its GOAWAY (A36's
    /// "drain grace time"; default ten minutes).
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.drain_grace = grace;
        self
    }

    /// How long an accepted connection has for its handshake: the TLS handshake of a
    /// filter chain with a `DownstreamTlsContext`, then the client's HTTP/2 preface.
    /// A connection still short of it is closed. Default
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`] (120 s, as gRPC-Go and C-core).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// HTTP/2 keepalive on the server's connections: a PING once `interval` has passed
    /// without a frame from the client, the connection closed when its ACK has not come
    /// `timeout` later, so a client that vanished without a FIN (its host gone, a
    /// middlebox's state dropped) does not hold the connection for good. Default every
    /// [`DEFAULT_SERVER_KEEPALIVE_INTERVAL`] (2 hours) with a 20 s timeout, gRPC-Go's
    /// and C-core's server defaults; `None` turns it off.
    pub fn keepalive(mut self, keepalive: Option<KeepaliveSettings>) -> Self {
        self.keepalive = keepalive;
        self
    }

    /// Called with every serving-mode change (A36's serving state callback). Without
    /// one, changes are logged.
    pub fn on_serving_mode(
        mut self,
        callback: impl Fn(SocketAddr, &ServingMode) + Send + Sync + 'static,
    ) -> Self {
        self.on_mode = Some(Arc::new(callback));
        self
    }

    /// Runs for every RPC after the route's server HTTP filters (RBAC, A41, which the
    /// server runs itself) allowed it.
    pub fn rpc_hook(mut self, hook: impl ServerRpcHook) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Where RBAC's audited decisions go (A59); by default
    /// [`StdoutAuditLogger::stdout`].
    pub fn audit_logger(mut self, sink: impl AuditSink) -> Self {
        self.audit = Some(Arc::new(sink));
        self
    }

    /// Serves `service` on the connections of `incoming`, accepted on `listening` (the
    /// address the listener name is made from; no ephemeral port, A36). Each item is a
    /// connection with its local and peer addresses.
    ///
    /// # Errors
    /// A bootstrap without `server_listener_resource_name_template` (or with an
    /// unusable one), certificate providers that do not start, a failed watch.
    pub async fn serve_incoming<S, B, IO, I>(
        self,
        listening: SocketAddr,
        incoming: I,
        service: S,
    ) -> Result<XdsServer, Error>
    where
        S: ServedService<B>,
        B: ServedBody,
        IO: futures::io::AsyncRead + futures::io::AsyncWrite + Send + Unpin + 'static,
        I: Stream<Item = io::Result<(IO, SocketAddr, SocketAddr)>> + Send + Unpin + 'static,
    {
        let rt = R::current().map_err(Error::NoRuntime)?;
        let bootstrap = self.client.bootstrap().clone();
        let name = xds_proto_core::server::server_listener_name(&bootstrap, listening)
            .map_err(Error::ServerListenerName)?;
        let providers = match self.providers {
            Some(p) => p,
            None => CertificateProviders::start(&rt, &bootstrap).map_err(Error::Credentials)?,
        };
        let lds = self
            .client
            .watch_type(&ResourceTypeInfo::of::<Lds>(), &name)
            .await?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(SharedInner {
                stopped: false,
                mode: ServingMode::NotServing("waiting for the listener resource".into()),
                config: None,
                drains: Vec::new(),
            }),
        });
        let (stop_tx, stop_rx) = oneshot::channel();
        let (watch_stop_tx, watch_stop_rx) = oneshot::channel();
        let watch = WatchTask {
            client: self.client.clone(),
            state: ServingState::new(listening),
            shared: shared.clone(),
            on_mode: self.on_mode,
            listening,
            lds,
            rds: Vec::new(),
        };
        rt.spawn(Box::pin(watch.run(watch_stop_rx)));
        let settings = Arc::new(ConnectionSettings {
            rt: rt.clone(),
            shared: shared.clone(),
            service,
            providers,
            hook: self.hook,
            audit: self
                .audit
                .unwrap_or_else(|| Arc::new(StdoutAuditLogger::stdout())),
            drain_grace: self.drain_grace,
            handshake_timeout: self.handshake_timeout,
            keepalive: self.keepalive,
        });
        rt.spawn(Box::pin(accept_loop(
            rt.clone(),
            settings,
            incoming,
            stop_rx,
        )));
        Ok(XdsServer {
            listening,
            listener_name: name,
            shared,
            stop: Mutex::new(Some((stop_tx, watch_stop_tx))),
        })
    }
}

async fn accept_loop<R, S, B, IO, I>(
    rt: R,
    settings: Arc<ConnectionSettings<R, S>>,
    mut incoming: I,
    stop: oneshot::Receiver<()>,
) where
    R: Runtime,
    S: ServedService<B>,
    B: ServedBody,
    IO: futures::io::AsyncRead + futures::io::AsyncWrite + Send + Unpin + 'static,
    I: Stream<Item = io::Result<(IO, SocketAddr, SocketAddr)>> + Send + Unpin + 'static,
{
    let mut stop = stop;
    loop {
        let next = futures::future::select(incoming.next(), &mut stop).await;
        let accepted = match next {
            futures::future::Either::Left((Some(accepted), _)) => accepted,
            _ => break,
        };
        match accepted {
            Ok((io, local, peer)) => {
                rt.spawn(Box::pin(serve_connection(
                    settings.clone(),
                    io,
                    local,
                    peer,
                )));
            }
            Err(error) => tracing::debug!(%error, "accept failed"),
        }
    }
    // Stopped: drain every connection.
    settings.shared.stop();
}

/// Feeds the core's serving state with the listener's and its RDS resources' events.
struct WatchTask<R: Runtime> {
    client: Client<R>,
    state: ServingState,
    shared: Arc<Shared>,
    on_mode: Option<ServingModeCallback>,
    listening: SocketAddr,
    lds: RawWatchStream,
    rds: Vec<(String, RawWatchStream)>,
}

enum Next {
    Listener(Option<xds_proto_core::WatchEvent>),
    Routes(String, xds_proto_core::WatchEvent),
}

impl<R: Runtime> WatchTask<R> {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        loop {
            let next = futures::future::poll_fn(|cx| {
                if std::pin::Pin::new(&mut stop).poll(cx).is_ready() {
                    return std::task::Poll::Ready(None);
                }
                if let std::task::Poll::Ready(event) = self.lds.poll_next_unpin(cx) {
                    return std::task::Poll::Ready(Some(Next::Listener(event)));
                }
                for (name, stream) in &mut self.rds {
                    if let std::task::Poll::Ready(Some(event)) = stream.poll_next_unpin(cx) {
                        return std::task::Poll::Ready(Some(Next::Routes(name.clone(), event)));
                    }
                }
                std::task::Poll::Pending
            })
            .await;
            // Stopped: the watches end with the task.
            let Some(next) = next else { break };
            match next {
                Next::Listener(Some(event)) => self.state.on_listener(&event),
                Next::Listener(None) => break,
                Next::Routes(name, event) => self.state.on_route_config(&name, &event),
            }
            self.apply_events().await;
            self.shared.publish(&self.state);
        }
    }

    async fn apply_events(&mut self) {
        while let Some(event) = self.state.poll_event() {
            match event {
                ServingEvent::WatchRoutes(name) => {
                    match self
                        .client
                        .watch_type(&ResourceTypeInfo::of::<Rds>(), &name)
                        .await
                    {
                        Ok(stream) => self.rds.push((name, stream)),
                        Err(error) => tracing::warn!(%name, %error, "cannot watch routes"),
                    }
                }
                ServingEvent::UnwatchRoutes(name) => self.rds.retain(|(n, _)| *n != name),
                ServingEvent::ModeChanged(mode) => match &self.on_mode {
                    Some(callback) => callback(self.listening, &mode),
                    None => {
                        tracing::warn!(listening = %self.listening, ?mode, "xDS server serving mode")
                    }
                },
                ServingEvent::ListenerApplied { generation } => {
                    tracing::info!(listening = %self.listening, generation, "xDS server applies a new listener");
                }
            }
        }
    }
}

/// A running xDS-enabled server. Dropping it (or [`shutdown`](Self::shutdown)) stops
/// accepting and drains the connections.
pub struct XdsServer {
    listening: SocketAddr,
    listener_name: String,
    shared: Arc<Shared>,
    /// Stops the accept loop and the watch task.
    stop: Mutex<Option<(oneshot::Sender<()>, oneshot::Sender<()>)>>,
}

impl std::fmt::Debug for XdsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdsServer")
            .field("listening", &self.listening)
            .field("listener_name", &self.listener_name)
            .field("mode", &self.mode())
            .finish()
    }
}

impl XdsServer {
    /// The listening address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listening
    }

    /// The Listener resource it watches.
    pub fn listener_name(&self) -> &str {
        &self.listener_name
    }

    /// The serving mode now.
    pub fn mode(&self) -> ServingMode {
        self.shared.lock().mode.clone()
    }

    /// Stops accepting connections; open ones drain.
    pub fn shutdown(&self) {
        if let Some((accept, watch)) = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = accept.send(());
            let _ = watch.send(());
        }
        self.shared.stop();
    }
}

impl Drop for XdsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}
