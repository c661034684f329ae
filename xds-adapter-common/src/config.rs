//! Config streams: one target's resolved xDS configuration (gRFC A74) with its
//! per-RPC config selector (gRFC A31), delivered as a `Stream` of [`ConfigUpdate`]s.
//!
//! The driver task owns the dependency managers ([`ConfigWatches`]): each one follows
//! listener → route configuration → clusters (aggregate ones included) → endpoints
//! through watches on the one core, fed with the core's notifications for the watchers
//! it owns, so a client has a single drive loop. Whenever a manager emits a new
//! [`XdsConfig`], the driver builds its [`ConfigSelector`] and leaves the pair in the
//! stream's one-value slot: a slow reader sees the newest config, never a backlog.
//!
//! Cluster lifetime follows A31's two-step removal. Every selector, every in-flight
//! RPC's [`Selection`](xds_proto_core::selector::Selection) and every handle from
//! [`ConfigStream::hold_cluster`] holds its cluster through a [`ClusterHandle`] of the
//! stream's [`ClusterRegistry`]; the driver keeps each held cluster subscribed in the
//! dependency manager (A74's dynamic subscriptions), so a cluster removed from the
//! routes stays watched, and in the config, until its last handle is dropped. Dropping
//! the stream stops the manager and cancels all its watches.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use futures::channel::mpsc::{self, UnboundedReceiver, UnboundedSender};
use futures::channel::oneshot;
use xds_proto_core::dependency::{XdsConfig, XdsDependencyManager};
use xds_proto_core::selector::{
    CLUSTER_CHILD_PREFIX, ClusterHandle, ClusterManagerChild, ClusterRegistry, ConfigSelector,
    LbConfigJson,
};
use xds_proto_core::{Notification, WatchError, XdsClient, XdsError};

use crate::client::{Error, Inner};
use crate::driver::Command;

/// One resolved configuration of a target: the [`XdsConfig`], the selector built from
/// it and the LB config. All are shared: cloning is three reference-count increments.
#[derive(Clone, Debug)]
pub struct ConfigUpdate {
    /// Everything the channel needs: listener, route configuration, chosen virtual
    /// host, and every cluster (with its endpoints) or the error standing for it.
    pub config: Arc<XdsConfig>,
    /// Picks a route and a cluster for each RPC from its path and headers. It holds
    /// its clusters: keep it while RPCs may still be routed with it.
    pub selector: Arc<ConfigSelector>,
    /// The service config's `loadBalancingConfig` (A31's
    /// `xds_cluster_manager_experimental`): this selector's clusters and every cluster
    /// an earlier selector, an in-flight RPC or a hold still uses.
    pub lb_config: Arc<LbConfigJson>,
}

/// What a config stream yields: a new configuration, or the error RPCs to the target
/// fail with (the listener or route configuration is missing or unusable).
pub type ConfigResult = Result<ConfigUpdate, XdsError>;

/// The id of a config stream in its driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ConfigId(u64);

/// A config stream's requests to the driver.
pub(crate) enum ConfigCommand {
    Start {
        listener: String,
        authority: String,
        slot: Arc<Latest>,
        reply: oneshot::Sender<Result<ConfigId, WatchError>>,
    },
    Stop(ConfigId),
    Hold {
        id: ConfigId,
        cluster: String,
        reply: oneshot::Sender<ClusterHandle>,
    },
}

// ---------------------------------------------------------------------------------------
// The reader's side
// ---------------------------------------------------------------------------------------

/// The one-value slot between the driver and a stream: the driver overwrites, the
/// reader takes.
#[derive(Default)]
pub(crate) struct Latest(Mutex<LatestState>);

#[derive(Default)]
struct LatestState {
    value: Option<ConfigResult>,
    closed: bool,
    waker: Option<Waker>,
}

impl Latest {
    fn lock(&self) -> MutexGuard<'_, LatestState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the unread value, if any, and wakes the reader.
    fn publish(&self, value: ConfigResult) {
        let (replaced, waker) = {
            let mut state = self.lock();
            (state.value.replace(value), state.waker.take())
        };
        // Dropped outside the lock: it may release clusters.
        drop(replaced);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Ends the stream once its last value is read.
    fn close(&self) {
        let waker = {
            let mut state = self.lock();
            state.closed = true;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The resolved configuration of one target, as it changes (see
/// [`Client::watch_config`](crate::Client::watch_config)).
///
/// It yields a [`ConfigUpdate`] whenever the listener, the route configuration, a
/// cluster or its endpoints change (only once every one of them has arrived, as a value
/// or an error), and an `Err` when the target cannot be routed at all. Values are
/// coalesced: a reader that falls behind gets the newest. It ends when the client shuts
/// down. Dropping it cancels every watch it caused.
pub struct ConfigStream {
    slot: Arc<Latest>,
    client: Arc<Inner>,
    id: ConfigId,
    listener: Arc<str>,
}

impl ConfigStream {
    pub(crate) fn new(
        slot: Arc<Latest>,
        client: Arc<Inner>,
        id: ConfigId,
        listener: &str,
    ) -> ConfigStream {
        ConfigStream {
            slot,
            client,
            id,
            listener: Arc::from(listener),
        }
    }

    /// The listener the configuration starts from.
    pub fn listener_name(&self) -> &str {
        &self.listener
    }

    /// Keeps `cluster` watched and in the configuration while the returned handle (or a
    /// clone) lives, whether the routes use it or not: for a data plane that must keep a
    /// cluster it routes to outside the route table (a target a cluster specifier plugin
    /// such as RLS returned). Handles from the selector's picks and the selectors
    /// themselves hold their clusters the same way, without this call.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the client has stopped.
    pub async fn hold_cluster(&self, cluster: &str) -> Result<ClusterHandle, Error> {
        let (reply, answer) = oneshot::channel();
        self.client
            .commands
            .unbounded_send(Command::Config(ConfigCommand::Hold {
                id: self.id,
                cluster: cluster.to_string(),
                reply,
            }))
            .map_err(|_| Error::Shutdown)?;
        answer.await.map_err(|_| Error::Shutdown)
    }
}

impl fmt::Debug for ConfigStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigStream")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl Stream for ConfigStream {
    type Item = ConfigResult;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConfigResult>> {
        let mut state = self.slot.lock();
        if let Some(value) = state.value.take() {
            return Poll::Ready(Some(value));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for ConfigStream {
    fn drop(&mut self) {
        let _ = self
            .client
            .commands
            .unbounded_send(Command::Config(ConfigCommand::Stop(self.id)));
    }
}

// ---------------------------------------------------------------------------------------
// The driver's side
// ---------------------------------------------------------------------------------------

/// One config stream as the driver keeps it.
struct Entry {
    manager: XdsDependencyManager,
    /// The cluster manager children of this stream's selectors, picks and holds.
    registry: ClusterRegistry,
    /// The clusters subscribed in the manager because some handle holds them.
    held: BTreeSet<String>,
    slot: Arc<Latest>,
    /// The manager may have an update since the last flush (a notification, a hold or
    /// a release reached it).
    dirty: bool,
    /// The configuration last published, if it was one (not an error): published again
    /// with a new LB config when only the plugin children changed.
    last_config: Option<Arc<XdsConfig>>,
    /// The cluster specifier plugin children of the LB config last published.
    published_plugins: Vec<String>,
    /// A release changed the plugin children held: the LB config must change, though
    /// the manager, which knows no plugins, has no update.
    plugins_changed: bool,
}

impl Entry {
    /// Takes the manager's updates: builds each one's selector, publishes it, and
    /// brings the held clusters up to date (which may produce another update).
    fn flush(&mut self, core: &mut XdsClient) {
        self.dirty = false;
        let mut published = false;
        while let Some(update) = self.manager.poll_update() {
            self.last_config = update.as_ref().ok().cloned();
            let update = update.map(|config| self.update_for(config));
            self.slot.publish(update);
            published = true;
            self.sync_held(core);
        }
        if std::mem::take(&mut self.plugins_changed)
            && !published
            && let Some(config) = self.last_config.clone()
        {
            let update = self.update_for(config);
            self.slot.publish(Ok(update));
        }
    }

    /// The update for `config`: its selector, and the LB config of every child held.
    fn update_for(&mut self, config: Arc<XdsConfig>) -> ConfigUpdate {
        let selector = Arc::new(ConfigSelector::new(&config, &mut self.registry));
        let lb_config = Arc::new(self.registry.lb_config());
        self.published_plugins = self.registry.plugin_children();
        ConfigUpdate {
            lb_config,
            selector,
            config,
        }
    }

    /// Some handle of this stream's registry dropped a child: clusters no longer held
    /// are unsubscribed (the manager then has an update without them); a plugin child
    /// no longer held calls for the same configuration with a new LB config.
    fn on_released(&mut self, core: &mut XdsClient) {
        self.sync_held(core);
        if self.registry.plugin_children() != self.published_plugins {
            self.plugins_changed = true;
        }
        self.dirty = true;
    }

    /// Subscribes the clusters some handle holds and unsubscribes the released ones.
    fn sync_held(&mut self, core: &mut XdsClient) {
        let live: BTreeSet<String> = self
            .registry
            .children()
            .into_iter()
            .filter_map(|child| child.strip_prefix(CLUSTER_CHILD_PREFIX).map(str::to_owned))
            .collect();
        for gone in self.held.difference(&live) {
            self.manager.unsubscribe_cluster(core, gone);
        }
        for new in live.difference(&self.held) {
            self.manager.subscribe_cluster(core, new);
        }
        self.held = live;
    }
}

/// The dependency managers of a driver's config streams, fed by the driver.
pub(crate) struct ConfigWatches {
    entries: HashMap<ConfigId, Entry>,
    next_id: u64,
    /// Registries report a cluster's last handle dropped (on any thread) here.
    released_tx: UnboundedSender<ConfigId>,
    released: UnboundedReceiver<ConfigId>,
}

impl ConfigWatches {
    pub(crate) fn new() -> ConfigWatches {
        let (released_tx, released) = mpsc::unbounded();
        ConfigWatches {
            entries: HashMap::new(),
            next_id: 0,
            released_tx,
            released,
        }
    }

    /// A stream whose registry released a cluster, when one did.
    pub(crate) fn poll_released(&mut self, cx: &mut Context<'_>) -> Poll<ConfigId> {
        match Pin::new(&mut self.released).poll_next(cx) {
            Poll::Ready(Some(id)) => Poll::Ready(id),
            // The sender lives in `self`: the channel never ends.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }

    /// Starts or stops a stream's manager, or takes a hold on a cluster for it.
    pub(crate) fn on_command(&mut self, core: &mut XdsClient, command: ConfigCommand) {
        match command {
            ConfigCommand::Start {
                listener,
                authority,
                slot,
                reply,
            } => {
                let id = ConfigId(self.next_id);
                self.next_id += 1;
                let mut manager = XdsDependencyManager::new(listener, authority);
                if let Err(e) = manager.start(core) {
                    let _ = reply.send(Err(e));
                    return;
                }
                if reply.send(Ok(id)).is_err() {
                    manager.stop(core);
                    return;
                }
                let released = self.released_tx.clone();
                let registry = ClusterRegistry::with_release_callback(move |_| {
                    let _ = released.unbounded_send(id);
                });
                tracing::debug!(
                    config = id.0,
                    listener = manager.listener_name(),
                    "watch config"
                );
                self.entries.insert(
                    id,
                    Entry {
                        manager,
                        registry,
                        held: BTreeSet::new(),
                        slot,
                        dirty: false,
                        last_config: None,
                        published_plugins: Vec::new(),
                        plugins_changed: false,
                    },
                );
            }
            ConfigCommand::Stop(id) => {
                if let Some(mut entry) = self.entries.remove(&id) {
                    tracing::debug!(config = id.0, "stop config");
                    entry.manager.stop(core);
                    entry.slot.close();
                }
            }
            ConfigCommand::Hold { id, cluster, reply } => {
                let Some(entry) = self.entries.get_mut(&id) else {
                    return;
                };
                let handle = entry.registry.handle(ClusterManagerChild::Cluster(cluster));
                entry.sync_held(core);
                entry.dirty = true;
                // When the caller has gone, the handle drops here and is reported.
                let _ = reply.send(handle);
            }
        }
    }

    /// Brings a stream's held clusters up to date after its registry released one.
    pub(crate) fn on_released(&mut self, core: &mut XdsClient, id: ConfigId) {
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.on_released(core);
        }
    }

    /// Hands a notification to the manager that owns its watcher. Returns false when
    /// none does (it is for a plain watch, or for a watch a manager has cancelled).
    pub(crate) fn handle_notification(
        &mut self,
        core: &mut XdsClient,
        notification: &Notification,
    ) -> bool {
        let Some(entry) = self
            .entries
            .values_mut()
            .find(|e| e.manager.owns(notification.watcher))
        else {
            return false;
        };
        entry.manager.handle_notification(core, notification);
        entry.dirty = true;
        true
    }

    /// Publishes what the managers resolved since the last flush. Returns whether any
    /// had something to do (it may have started or cancelled watches).
    pub(crate) fn flush(&mut self, core: &mut XdsClient) -> bool {
        let mut worked = false;
        for entry in self.entries.values_mut().filter(|e| e.dirty) {
            entry.flush(core);
            worked = true;
        }
        worked
    }

    /// Ends every stream (the driver is stopping).
    pub(crate) fn close_all(&mut self) {
        for (_, entry) in self.entries.drain() {
            entry.slot.close();
        }
    }
}
