//! The client handle: cloneable, `Send + Sync`, and the only way to reach the driver
//! task that owns the core.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{self, UnboundedSender};
use futures::channel::oneshot;
use xds_proto_core::backoff::BackoffConfig;
use xds_proto_core::bootstrap::BootstrapError;
use xds_proto_core::client::DuplicateTypeError;
use xds_proto_core::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use xds_proto_core::{
    Bootstrap, ClientConfig, ResourceSnapshot, WatchError, XdsClient, XdsResourceType,
};

use crate::driver::{Command, Driver};
use crate::runtime::Runtime;
use crate::transport::TransportSettings;
use crate::watch::{ChannelEventStream, RawWatchStream, WatchStream};

/// Why a client call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The bootstrap could not be loaded or is invalid.
    Bootstrap(BootstrapError),
    /// The core refused the watch.
    Watch(WatchError),
    /// A resource type was registered twice.
    DuplicateType(DuplicateTypeError),
    /// No runtime to run on (for example, tokio's `build()` outside a tokio runtime).
    NoRuntime(String),
    /// The client has shut down.
    Shutdown,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Bootstrap(e) => write!(f, "xDS bootstrap: {e}"),
            Error::Watch(e) => write!(f, "watch refused: {e}"),
            Error::DuplicateType(e) => e.fmt(f),
            Error::NoRuntime(why) => write!(f, "no runtime: {why}"),
            Error::Shutdown => f.write_str("the xDS client has shut down"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Bootstrap(e) => Some(e),
            Error::Watch(e) => Some(e),
            Error::DuplicateType(e) => Some(e),
            Error::NoRuntime(_) | Error::Shutdown => None,
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

type Registration = Box<dyn FnOnce(&mut XdsClient) -> Result<(), DuplicateTypeError> + Send>;

/// Configures and starts a [`Client`].
pub struct ClientBuilder<R> {
    config: ClientConfig,
    settings: TransportSettings,
    seed: Option<u64>,
    registrations: Vec<Registration>,
    runtime: Option<R>,
}

impl<R> fmt::Debug for ClientBuilder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("config", &self.config)
            .field("settings", &self.settings)
            .field("seed", &self.seed)
            .field("custom_types", &self.registrations.len())
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> ClientBuilder<R> {
    /// A builder with the core's defaults (15 s resource timeout, gRPC backoff) and the
    /// default transport settings (64 MiB messages, 20 s connect timeout).
    pub fn new(bootstrap: impl Into<Arc<Bootstrap>>) -> ClientBuilder<R> {
        ClientBuilder {
            config: ClientConfig::new(bootstrap),
            settings: TransportSettings::default(),
            seed: None,
            registrations: Vec::new(),
            runtime: None,
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

    /// All transport settings at once.
    pub fn transport_settings(mut self, settings: TransportSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The seed of the backoff jitter (default: drawn from the OS).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Adds a user-defined resource type, watchable with [`Client::watch_with`].
    pub fn register_type<T: XdsResourceType>(mut self, ty: T) -> Self {
        self.registrations
            .push(Box::new(move |core: &mut XdsClient| core.register_type(ty)));
        self
    }

    /// Runs the client on this runtime instead of the calling context's.
    pub fn runtime(mut self, runtime: R) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The core configuration, for settings without a dedicated method.
    pub fn config_mut(&mut self) -> &mut ClientConfig {
        &mut self.config
    }

    /// Starts the driver task and returns the handle.
    ///
    /// # Errors
    /// [`Error::NoRuntime`] when no runtime was given and the calling context has none;
    /// [`Error::DuplicateType`] when a type was registered twice.
    pub fn build(self) -> Result<Client<R>, Error> {
        let rt = match self.runtime {
            Some(rt) => rt,
            None => R::current().map_err(Error::NoRuntime)?,
        };
        let seed = self.seed.unwrap_or_else(random_seed);
        let bootstrap = self.config.bootstrap.clone();
        let mut core = XdsClient::new(self.config, seed);
        for register in self.registrations {
            register(&mut core).map_err(Error::DuplicateType)?;
        }
        let (commands, rx) = mpsc::unbounded();
        let driver = Driver::new(core, rt.clone(), self.settings, rx);
        rt.spawn(Box::pin(driver.run()));
        Ok(Client {
            commands,
            bootstrap,
            _runtime: PhantomData,
        })
    }
}

/// A seed from the OS's hash keys, so no RNG crate is needed.
fn random_seed() -> u64 {
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
    commands: UnboundedSender<Command>,
    bootstrap: Arc<Bootstrap>,
    _runtime: PhantomData<fn() -> R>,
}

impl<R> Clone for Client<R> {
    fn clone(&self) -> Self {
        Client {
            commands: self.commands.clone(),
            bootstrap: self.bootstrap.clone(),
            _runtime: PhantomData,
        }
    }
}

impl<R> fmt::Debug for Client<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.bootstrap.xds_servers)
            .field("running", &!self.commands.is_closed())
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
    /// The bootstrap the client runs on.
    pub fn bootstrap(&self) -> &Arc<Bootstrap> {
        &self.bootstrap
    }

    /// Whether the driver is still running.
    pub fn is_running(&self) -> bool {
        !self.commands.is_closed()
    }

    /// Watches a resource of a built-in or registered type, e.g.
    /// `client.watch::<Cds>("cluster-a")`. The stream yields the current state at once
    /// when the resource is known, then every change; dropping it cancels the watch.
    ///
    /// # Errors
    /// [`Error::Watch`] when the core refuses the name (unknown type or authority),
    /// [`Error::Shutdown`] when the client has stopped.
    pub async fn watch<T: XdsResourceType + Default>(
        &self,
        name: &str,
    ) -> Result<WatchStream<T::Value>, Error> {
        self.watch_with(&T::default(), name).await
    }

    /// Like [`watch`](Self::watch), for a type given by value.
    ///
    /// # Errors
    /// As for [`watch`](Self::watch).
    pub async fn watch_with<T: XdsResourceType>(
        &self,
        ty: &T,
        name: &str,
    ) -> Result<WatchStream<T::Value>, Error> {
        Ok(WatchStream::new(
            self.watch_type_url(ty.type_url(), name).await?,
        ))
    }

    /// Watches a resource by type URL; the stream yields the core's untyped events.
    ///
    /// # Errors
    /// As for [`watch`](Self::watch).
    pub async fn watch_type_url(
        &self,
        type_url: &str,
        name: &str,
    ) -> Result<RawWatchStream, Error> {
        let (events_tx, events) = mpsc::unbounded();
        let (reply, answer) = oneshot::channel();
        self.send(Command::Watch {
            type_url: type_url.to_string(),
            name: name.to_string(),
            events: events_tx,
            reply,
        })?;
        let watcher = answer.await.map_err(|_| Error::Shutdown)??;
        Ok(RawWatchStream::new(
            events,
            self.commands.clone(),
            watcher,
            type_url,
            name,
        ))
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
    /// It ends when the client shuts down.
    pub fn channel_events(&self) -> ChannelEventStream {
        let (tx, events) = mpsc::unbounded();
        let _ = self.commands.unbounded_send(Command::Subscribe(tx));
        ChannelEventStream { events }
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
        self.commands
            .unbounded_send(command)
            .map_err(|_| Error::Shutdown)
    }
}
