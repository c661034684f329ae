//! The client handle: cloneable, `Send + Sync`, and the only way to reach the driver
//! task that owns the core; and its builder, which also builds a [`ClientPool`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{self, UnboundedSender};
use futures::channel::oneshot;
use xds_proto_core::backoff::BackoffConfig;
use xds_proto_core::bootstrap::{BootstrapError, TargetError};
use xds_proto_core::client::DuplicateTypeError;
use xds_proto_core::pb::envoy::service::status::v3::ClientConfig as CsdsClientConfig;
use xds_proto_core::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use xds_proto_core::resource::ResourceTypeInfo;
use xds_proto_core::{
    Bootstrap, ResourceSnapshot, WatchChecker, WatchError, XdsClient, XdsClientConfig,
    XdsResourceType,
};

use crate::config::{ConfigCommand, ConfigStream, Latest};
use crate::driver::{Command, Driver};
use crate::events::ChannelEventStream;
use crate::metrics::{DEFAULT_METRICS_INTERVAL, MetricsExporter, STANDALONE_TARGET};
use crate::pool::ClientPool;
use crate::runtime::Runtime;
use crate::transport::TransportSettings;
use crate::watch::{RawWatchStream, WatchSender, WatchSlot, WatchStream};

/// Why a client call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The bootstrap could not be loaded or is invalid.
    Bootstrap(BootstrapError),
    /// The core refused the watch.
    Watch(WatchError),
    /// A data-plane target names no listener (gRFC A47).
    Target {
        /// The target as given.
        target: String,
        /// Why.
        error: TargetError,
    },
    /// A resource type was registered twice.
    DuplicateType(DuplicateTypeError),
    /// No runtime to run on (for example, tokio's `build()` outside a tokio runtime).
    NoRuntime(String),
    /// The client has shut down.
    Shutdown,
    /// xDS credentials could not be set up (a certificate provider plugin the adapter
    /// cannot build, naming the bootstrap field).
    Credentials(String),
    /// An xDS-enabled server has no listener name (gRFC A36: the bootstrap field).
    ServerListenerName(xds_proto_core::server::ListenerNameError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Bootstrap(e) => write!(f, "xDS bootstrap: {e}"),
            Error::Watch(e) => write!(f, "watch refused: {e}"),
            Error::Target { target, error } => write!(f, "target {target:?}: {error}"),
            Error::DuplicateType(e) => e.fmt(f),
            Error::NoRuntime(why) => write!(f, "no runtime: {why}"),
            Error::Shutdown => f.write_str("the xDS client has shut down"),
            Error::Credentials(why) => write!(f, "xDS credentials: {why}"),
            Error::ServerListenerName(e) => write!(f, "xDS server: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Bootstrap(e) => Some(e),
            Error::Watch(e) => Some(e),
            Error::Target { error, .. } => Some(error),
            Error::DuplicateType(e) => Some(e),
            Error::ServerListenerName(e) => Some(e),
            Error::NoRuntime(_) | Error::Shutdown | Error::Credentials(_) => None,
        }
    }
}

impl From<BootstrapError> for Error {
    fn from(e: BootstrapError) -> Error {
        Error::Bootstrap(e)
    }
}

impl From<WatchError> for Error {
    fn from(e: WatchError) -> Error {
        Error::Watch(e)
    }
}

/// Registers a user-defined type on a new core; callable once per client, so that a
/// pool can register the same types on every instance it creates.
type Registration = Arc<dyn Fn(&mut XdsClient) -> Result<(), DuplicateTypeError> + Send + Sync>;

/// Configures and starts a [`Client`], or a [`ClientPool`] of per-target clients.
pub struct ClientBuilder<R> {
    config: XdsClientConfig,
    settings: TransportSettings,
    seed: Option<u64>,
    registrations: Vec<Registration>,
    runtime: Option<R>,
    target: Option<Arc<str>>,
    metrics_interval: Option<Duration>,
}

impl<R> fmt::Debug for ClientBuilder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("config", &self.config)
            .field("settings", &self.settings)
            .field("seed", &self.seed)
            .field("custom_types", &self.registrations.len())
            .field("target", &self.target)
            .field("metrics_interval", &self.metrics_interval)
            .finish_non_exhaustive()
    }
}

impl<R: Clone> Clone for ClientBuilder<R> {
    fn clone(&self) -> Self {
        ClientBuilder {
            config: self.config.clone(),
            settings: self.settings.clone(),
            seed: self.seed,
            registrations: self.registrations.clone(),
            runtime: self.runtime.clone(),
            target: self.target.clone(),
            metrics_interval: self.metrics_interval,
        }
    }
}

impl<R: Runtime> ClientBuilder<R> {
    /// A builder with the core's defaults (15 s resource timeout, gRPC backoff) and the
    /// default transport settings (64 MiB messages, 20 s connect timeout).
    pub fn new(bootstrap: impl Into<Arc<Bootstrap>>) -> ClientBuilder<R> {
        ClientBuilder {
            config: XdsClientConfig::new(bootstrap),
            settings: TransportSettings::default(),
            seed: None,
            registrations: Vec::new(),
            runtime: None,
            target: None,
            metrics_interval: Some(DEFAULT_METRICS_INTERVAL),
        }
    }

    /// How long a subscribed resource may take before it is taken not to exist.
    pub fn resource_timeout(mut self, timeout: Duration) -> Self {
        self.config.resource_timeout = timeout;
        self
    }

    /// The backoff between failing stream attempts.
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// The `user_agent_name` and `user_agent_version` reported in the node.
    pub fn user_agent(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.config.user_agent_name = name.into();
        self.config.user_agent_version = version.into();
        self
    }

    /// The largest response accepted, in bytes (default 64 MiB).
    pub fn max_receive_message_size(mut self, bytes: usize) -> Self {
        self.settings.max_receive_message_size = bytes;
        self
    }

    /// The bound on one connection attempt (default 20 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// HTTP/2 keepalive on the ADS connections; `None` turns it off (default: on, a
    /// PING after 5 minutes without activity, 20 s for its ACK; see
    /// [`KeepaliveSettings`](crate::KeepaliveSettings) for when a silent server is
    /// detected).
    pub fn keepalive(mut self, keepalive: Option<crate::KeepaliveSettings>) -> Self {
        self.settings.keepalive = keepalive;
        self
    }

    /// All transport settings at once.
    pub fn transport_settings(mut self, settings: TransportSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The seed of the backoff jitter (default: drawn from the OS). A pool derives
    /// each instance's seed from it and the instance's target.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Adds a user-defined resource type, watchable with [`Client::watch::<T>`](Client::watch).
    pub fn register_type<T: XdsResourceType>(mut self) -> Self {
        self.registrations
            .push(Arc::new(|core: &mut XdsClient| core.register_type::<T>()));
        self
    }

    /// Runs the client on this runtime instead of the calling context's.
    pub fn runtime(mut self, runtime: R) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The core configuration, for settings without a dedicated method.
    pub fn config_mut(&mut self) -> &mut XdsClientConfig {
        &mut self.config
    }

    /// The data-plane target a client from [`build`](Self::build) serves: its
    /// [`Client::target`], CSDS `client_scope` and metrics `grpc.target` label (without
    /// one: [`STANDALONE_TARGET`] in metrics, no scope). A pool ignores it: each of its
    /// clients has its pool key.
    pub fn target(mut self, target: impl Into<Arc<str>>) -> Self {
        self.target = Some(target.into());
        self
    }

    /// How often the client exports its gRFC A78 metrics through the `metrics` facade
    /// (see [`crate::metrics`]); default [`DEFAULT_METRICS_INTERVAL`]. `None` turns off
    /// the automatic exports (on the interval and when the client stops);
    /// [`Client::export_metrics`] still exports.
    pub fn metrics_interval(mut self, interval: Option<Duration>) -> Self {
        self.metrics_interval = interval;
        self
    }

    /// Starts the driver task and returns the handle.
    ///
    /// # Errors
    /// [`Error::NoRuntime`] when no runtime was given and the calling context has none;
    /// [`Error::DuplicateType`] when a type was registered twice.
    pub fn build(self) -> Result<Client<R>, Error> {
        let rt = self.resolve_runtime()?;
        let seed = self.seed.unwrap_or_else(random_seed);
        self.spawn(&rt, seed, self.target.clone())
    }

    /// Builds a [`ClientPool`]: one client per data-plane target, each created on first
    /// use with this builder's settings, all sharing its parsed bootstrap.
    ///
    /// # Errors
    /// As for [`build`](Self::build); no client is started yet.
    pub fn build_pool(self) -> Result<ClientPool<R>, Error> {
        let rt = self.resolve_runtime()?;
        // Fail now, not on the pool's first use, when the types clash.
        let mut probe = XdsClient::new(self.config.clone(), 0);
        for register in &self.registrations {
            register(&mut probe).map_err(Error::DuplicateType)?;
        }
        let seed = self.seed.unwrap_or_else(random_seed);
        Ok(ClientPool::new(self, rt, seed))
    }

    pub(crate) fn config_ref(&self) -> &XdsClientConfig {
        &self.config
    }

    fn resolve_runtime(&self) -> Result<R, Error> {
        match &self.runtime {
            Some(rt) => Ok(rt.clone()),
            None => R::current().map_err(Error::NoRuntime),
        }
    }

    /// Creates a core with these settings, starts its driver on `rt`, and returns the
    /// handle (tagged with its pool `target`, if any).
    pub(crate) fn spawn(
        &self,
        rt: &R,
        seed: u64,
        target: Option<Arc<str>>,
    ) -> Result<Client<R>, Error> {
        let bootstrap = self.config.bootstrap.clone();
        let mut core = XdsClient::new(self.config.clone(), seed);
        for register in &self.registrations {
            register(&mut core).map_err(Error::DuplicateType)?;
        }
        let checker = core.watch_checker();
        let (commands, rx) = mpsc::unbounded();
        let metrics_target = target
            .clone()
            .unwrap_or_else(|| Arc::from(STANDALONE_TARGET));
        let metrics = MetricsExporter::new(metrics_target, self.metrics_interval, rt.now());
        let driver = Driver::new(core, rt.clone(), self.settings.clone(), rx, metrics);
        rt.spawn(Box::pin(driver.run()));
        Ok(Client::from_inner(Arc::new(Inner {
            commands,
            checker,
            bootstrap,
            target,
        })))
    }
}

/// A seed from the OS's hash keys, so no RNG crate is needed.
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x9e37_79b9_7f4a_7c15);
    h.finish()
}

/// A handle to a running xDS client. Cheap to clone, `Send + Sync`; every clone talks
/// to the same driver task, which owns the core.
///
/// The driver runs until [`shutdown`](Self::shutdown), or until every handle and every
/// watch stream is dropped.
pub struct Client<R> {
    inner: Arc<Inner>,
    _runtime: PhantomData<fn() -> R>,
}

/// What every handle and watch stream of one client shares. The driver stops when the
/// last one is dropped (the command channel closes); a pool holds it only weakly.
pub(crate) struct Inner {
    pub(crate) commands: UnboundedSender<Command>,
    /// Refuses the watches the core would refuse, so `watch()` answers at once.
    checker: WatchChecker,
    bootstrap: Arc<Bootstrap>,
    target: Option<Arc<str>>,
}

impl<R> Clone for Client<R> {
    fn clone(&self) -> Self {
        Client::from_inner(self.inner.clone())
    }
}

impl<R> fmt::Debug for Client<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("target", &self.inner.target)
            .field("servers", &self.inner.bootstrap.xds_servers)
            .field("running", &self.is_running())
            .finish()
    }
}

impl<R: Runtime> Client<R> {
    /// A builder for a client on this bootstrap.
    pub fn builder(bootstrap: impl Into<Arc<Bootstrap>>) -> ClientBuilder<R> {
        ClientBuilder::new(bootstrap)
    }

    /// A client with default settings on this bootstrap JSON, running on the calling
    /// context's runtime.
    ///
    /// # Errors
    /// An invalid bootstrap, or no runtime.
    pub fn from_bootstrap_json(json: &str) -> Result<Client<R>, Error> {
        ClientBuilder::new(Bootstrap::from_json_str(json)?).build()
    }
}

impl<R> Client<R> {
    pub(crate) fn from_inner(inner: Arc<Inner>) -> Client<R> {
        Client {
            inner,
            _runtime: PhantomData,
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The bootstrap the client runs on (for a pool's clients: the pool's one parsed
    /// bootstrap, shared).
    pub fn bootstrap(&self) -> &Arc<Bootstrap> {
        &self.inner.bootstrap
    }

    /// The data-plane target this client serves in its [`ClientPool`] (its CSDS
    /// `client_scope`), or the one given to [`ClientBuilder::target`]; else `None`.
    pub fn target(&self) -> Option<&str> {
        self.inner.target.as_deref()
    }

    /// Whether `self` and `other` are handles to the same client (the same driver and
    /// core).
    pub fn same_client(&self, other: &Client<R>) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the driver is still running.
    pub fn is_running(&self) -> bool {
        !self.inner.commands.is_closed()
    }

    /// Watches a resource of a built-in or registered type, e.g.
    /// `client.watch::<Cds>("cluster-a")`. The stream yields the current state at once
    /// when the resource is known, then every change; dropping it cancels the watch.
    ///
    /// # Errors
    /// [`Error::Watch`] when the core refuses the name (unknown type or authority),
    /// [`Error::Shutdown`] when the client has stopped.
    pub async fn watch<T: XdsResourceType>(&self, name: &str) -> Result<WatchStream<T>, Error> {
        // The checker answers for the core, so the watch needs no round trip to the
        // driver: a loop of watches queues its commands back to back, and the driver
        // takes the burst into one subscription request per type.
        let raw = self.watch_type(&ResourceTypeInfo::of::<T>(), name).await?;
        Ok(WatchStream::new(raw))
    }

    /// Watches a resource of a type known at run time (`ty`, a built-in or registered
    /// type), for data-driven tools: the stream yields the core's [`WatchEvent`]s
    /// (read a value with `ResourceValue::get` of the type `ty` stands for). Otherwise
    /// as [`watch`](Self::watch).
    ///
    /// # Errors
    /// As for [`watch`](Self::watch).
    ///
    /// [`WatchEvent`]: xds_proto_core::WatchEvent
    pub async fn watch_type(
        &self,
        ty: &ResourceTypeInfo,
        name: &str,
    ) -> Result<RawWatchStream, Error> {
        // The checker answers for the core, so the watch needs no round trip to the
        // driver: a loop of watches queues its commands back to back, and the driver
        // takes the burst into one subscription request per type.
        self.inner.checker.check_type(ty, name)?;
        let events = Arc::new(WatchSlot::default());
        // One copy of the name, shared by the command, the stream and the core.
        let name: Arc<str> = Arc::from(name);
        self.send(Command::Watch {
            type_url: ty.type_url(),
            ty: *ty,
            name: name.clone(),
            events: WatchSender::new(events.clone()),
        })?;
        Ok(RawWatchStream::new(
            events,
            self.inner.clone(),
            ty.type_url(),
            name,
        ))
    }

    /// Follows a target's configuration from its listener (gRFC A74): the listener, its
    /// route configuration, the clusters its routes use (aggregate ones included) and
    /// their endpoints, yielded as one consistent [`ConfigUpdate`](crate::ConfigUpdate)
    /// whenever any of them changes, with the gRFC A31 config selector that routes RPCs
    /// by it. Virtual hosts are chosen by the listener name as the data-plane authority
    /// (a target `xds:///name` resolves to listener `name`); see
    /// [`watch_config_for_authority`](Self::watch_config_for_authority).
    ///
    /// The dependency manager runs in the client's driver. Dropping the stream cancels
    /// all its watches.
    ///
    /// # Errors
    /// [`Error::Watch`] when the core refuses the listener name, [`Error::Shutdown`]
    /// when the client has stopped.
    pub async fn watch_config(&self, listener: &str) -> Result<ConfigStream, Error> {
        self.watch_config_for_authority(listener, listener).await
    }

    /// Follows the configuration of a data-plane target such as `xds:///foo.example` or
    /// `xds://authority/foo` (gRFC A47): its listener name comes from the bootstrap's
    /// listener name template (the authority's, when the target names one), and virtual
    /// hosts are chosen by its path as the data-plane authority. See
    /// [`Bootstrap::resolve_target`].
    ///
    /// # Errors
    /// [`Error::Target`] when the target names no listener; otherwise as for
    /// [`watch_config`](Self::watch_config).
    pub async fn watch_config_for_target(&self, target: &str) -> Result<ConfigStream, Error> {
        let resolved =
            (self.bootstrap().resolve_target(target)).map_err(|error| Error::Target {
                target: target.to_owned(),
                error,
            })?;
        self.watch_config_for_authority(&resolved.listener_name, &resolved.data_plane_authority)
            .await
    }

    /// Like [`watch_config`](Self::watch_config), choosing virtual hosts by
    /// `data_plane_authority` (e.g. `foo.example.com:8443`).
    ///
    /// # Errors
    /// As for [`watch_config`](Self::watch_config).
    pub async fn watch_config_for_authority(
        &self,
        listener: &str,
        data_plane_authority: &str,
    ) -> Result<ConfigStream, Error> {
        let slot = Arc::new(Latest::default());
        let (reply, answer) = oneshot::channel();
        self.send(Command::Config(ConfigCommand::Start {
            listener: listener.to_string(),
            authority: data_plane_authority.to_string(),
            slot: slot.clone(),
            reply,
        }))?;
        let id = answer.await.map_err(|_| Error::Shutdown)??;
        Ok(ConfigStream::new(slot, self.inner.clone(), id, listener))
    }

    /// Every watched resource's state, ordered by type, then name.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the client has stopped.
    pub async fn resource_snapshot(&self) -> Result<Vec<ResourceSnapshot>, Error> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Snapshot(reply))?;
        answer.await.map_err(|_| Error::Shutdown)
    }

    /// The CSDS `GenericXdsConfig` entries of the client.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the client has stopped.
    pub async fn csds_configs(&self) -> Result<Vec<GenericXdsConfig>, Error> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Csds(reply))?;
        answer.await.map_err(|_| Error::Shutdown)
    }

    /// The client's CSDS `ClientConfig`: its node, every watched resource as a
    /// `GenericXdsConfig`, and `client_scope` set to its [`target`](Self::target)
    /// (empty for a client that has none).
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the client has stopped.
    pub async fn csds_client_config(&self) -> Result<CsdsClientConfig, Error> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::ClientConfig(reply))?;
        let mut config = answer.await.map_err(|_| Error::Shutdown)?;
        config.client_scope = self.target().unwrap_or_default().to_string();
        Ok(config)
    }

    /// The servers the client has used, with each one's standing connectivity error.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the client has stopped.
    pub async fn server_status(&self) -> Result<Vec<(Arc<str>, Option<String>)>, Error> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::ServerErrors(reply))?;
        answer.await.map_err(|_| Error::Shutdown)
    }

    /// A stream of the transport's [`ChannelEvent`](crate::ChannelEvent)s from now on.
    /// It ends when the client shuts down. It queues at most
    /// [`CHANNEL_EVENT_BUFFER`](crate::CHANNEL_EVENT_BUFFER) events: a reader that
    /// falls further behind loses the oldest ones, counted by
    /// [`ChannelEventStream::dropped`].
    pub fn channel_events(&self) -> ChannelEventStream {
        self.channel_events_with_capacity(crate::CHANNEL_EVENT_BUFFER)
    }

    /// [`channel_events`](Self::channel_events) with a queue of `capacity` events (at
    /// least 1).
    pub fn channel_events_with_capacity(&self, capacity: usize) -> ChannelEventStream {
        let (tx, events) = crate::events::subscription(capacity);
        let _ = self.inner.commands.unbounded_send(Command::Subscribe(tx));
        events
    }

    /// Exports the client's gRFC A78 metrics to the installed `metrics` recorder now,
    /// instead of waiting for the next interval (see [`crate::metrics`]). Returns once
    /// the recorder has them.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the client has stopped.
    pub async fn export_metrics(&self) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::ExportMetrics(reply))?;
        answer.await.map_err(|_| Error::Shutdown)
    }

    /// Stops the client: cancels the ADS streams, drops the connections, and ends
    /// every watch stream. Returns once the driver has stopped; a no-op when it
    /// already has.
    pub async fn shutdown(&self) {
        let (reply, answer) = oneshot::channel();
        if self.send(Command::Shutdown(reply)).is_ok() {
            let _ = answer.await;
        }
    }

    fn send(&self, command: Command) -> Result<(), Error> {
        self.inner
            .commands
            .unbounded_send(command)
            .map_err(|_| Error::Shutdown)
    }
}
