//! The xDS dependency manager (gRFC A74): from one listener name to one consistent
//! [`XdsConfig`].
//!
//! It watches the listener (LDS), its route configuration (RDS, or the one inline in the
//! HCM), the clusters the chosen virtual host's routes use (CDS; aggregate clusters
//! recursively, with cycle and depth checks), and each EDS cluster's endpoints (EDS, by
//! `eds_service_name` or the cluster name). When every one of those resources has
//! arrived (as a value or as an error), it emits an [`XdsConfig`] holding all of them.
//! As in A74, a cluster's failure (missing, invalid, an aggregate cycle or too deep a
//! graph) stays inside the config as that cluster's error, and an EDS failure as its
//! resolution note, so one bad cluster does not fail RPCs routed elsewhere; a listener
//! or route-configuration error (missing, invalid, no virtual host for the authority)
//! is emitted as an error instead. Watches nothing references any more are cancelled;
//! while a new route configuration is awaited, the current clusters stay watched.
//!
//! It is a sans-IO layer on top of [`XdsClient`]: its methods take the client,
//! the adapter hands it the notifications of its own watchers (see
//! [`XdsDependencyManager::handle_notification`] and [`XdsDependencyManager::owns`]), and
//! the result comes out of [`XdsDependencyManager::poll_update`]. Other watchers of the
//! same client are untouched.

mod resolve;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::client::{
    Code, ErrorKind, Notification, Status, WatchError, WatchEvent, WatcherId, XdsClient, XdsError,
};
use crate::lrs::ClusterLoadStats;
use crate::resource::cluster::ClusterResource;
use crate::resource::endpoint::EndpointsResource;
use crate::resource::listener::{HttpFilter, ListenerResource};
use crate::resource::route::{RouteConfigResource, VirtualHost};
use crate::resource::{Cds, Eds, Lds, Rds, XdsResourceType, type_url};

/// How deep an aggregate cluster graph may go below the route's cluster (gRPC's limit).
pub const MAX_AGGREGATE_CLUSTER_DEPTH: usize = 16;

/// Everything a channel needs for one xDS target, resolved consistently.
#[derive(Clone, Debug, PartialEq)]
pub struct XdsConfig {
    /// The listener.
    pub listener: Arc<ListenerResource>,
    /// The route configuration (from RDS, or inline in the listener).
    pub route_config: Arc<RouteConfigResource>,
    /// The position of the chosen virtual host in `route_config.virtual_hosts`.
    pub virtual_host_index: usize,
    /// The HCM's `max_stream_duration` (A31's fallback timeout cap).
    pub max_stream_duration: Option<Duration>,
    /// The HCM's HTTP filters, ending with the router.
    pub http_filters: Vec<HttpFilter>,
    /// Every cluster of the routes and of their aggregate graphs, by name: its resolved
    /// configuration, or the error that stands for it.
    pub clusters: BTreeMap<String, Result<ClusterConfig, XdsError>>,
}

impl XdsConfig {
    /// The virtual host chosen for the data-plane authority.
    pub fn virtual_host(&self) -> &VirtualHost {
        &self.route_config.virtual_hosts[self.virtual_host_index]
    }

    /// The entry for one cluster.
    pub fn cluster(&self, name: &str) -> Option<&Result<ClusterConfig, XdsError>> {
        self.clusters.get(name)
    }
}

/// A resolved cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// The CDS resource.
    pub cluster: Arc<ClusterResource>,
    /// What it resolves to.
    pub children: ClusterResolution,
    /// Where its load is counted for LRS (gRFC A27), when its `lrs_server` is `self`:
    /// the client's counters for the server the cluster came from
    /// (`XdsClient::cluster_load_stats`). `None` for a cluster that reports no load.
    pub load_stats: Option<ClusterLoadStats>,
}

/// What a cluster resolves to.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ClusterResolution {
    /// An EDS cluster.
    Endpoints {
        /// The EDS resource name (`eds_service_name`, else the cluster name).
        service_name: String,
        /// The endpoints, or `None` when the EDS resource failed (see the note).
        endpoints: Option<Arc<EndpointsResource>>,
        /// Why there are no endpoints, when there are none.
        resolution_note: Option<String>,
    },
    /// A LOGICAL_DNS cluster: the adapter resolves the name.
    LogicalDns {
        /// The hostname.
        host: String,
        /// The port.
        port: u16,
    },
    /// An aggregate cluster: its leaf clusters in priority order (depth first,
    /// duplicates and failed children left out).
    Aggregate {
        /// The leaf (EDS or LOGICAL_DNS) cluster names.
        leaf_clusters: Vec<String>,
    },
}

#[derive(Debug)]
struct Slot<T> {
    watcher: Option<WatcherId>,
    state: Option<Result<Arc<T>, XdsError>>,
}

impl<V> Slot<V> {
    /// Takes a `Changed` event of the slot's watch; ambient errors are absorbed, since
    /// the config built from the cached value stays valid.
    fn update<R: XdsResourceType<Value = V>>(&mut self, event: &WatchEvent) {
        if let Some(state) = event.changed::<R>() {
            self.state = Some(state);
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Owner {
    Lds,
    Rds,
    Cds(String),
    Eds(String),
}

/// One target's dependency manager.
///
/// Drive it with the client: [`start`](Self::start) once, then for every
/// `Action::Notify` whose watcher it [`owns`](Self::owns), call
/// [`handle_notification`](Self::handle_notification) (it may watch or cancel through the
/// client: keep draining the client's actions), and take results from
/// [`poll_update`](Self::poll_update).
///
/// The loop, with the testing kit answering each new subscription at once:
///
/// ```
/// use xds_proto_core::dependency::XdsDependencyManager;
/// use xds_proto_core::prost::Message;
/// use xds_proto_core::{Action, Bootstrap, Event, Instant, XdsClient, XdsClientConfig};
/// use xds_proto_testing::{peer, resources};
///
/// let bootstrap = Bootstrap::from_json_str(peer::ONE_SERVER_BOOTSTRAP)?;
/// let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 1);
/// let mut manager = XdsDependencyManager::new("listener", "my-service.example");
/// manager.start(&mut client)?;
/// // What the server holds: listener → "routes" → "cluster" → its endpoints.
/// let served = |type_url: &str, name: &str| match type_url {
///     peer::LDS => resources::listener(name, "routes"),
///     peer::RDS => resources::route_config(name, "cluster"),
///     peer::CDS => resources::cluster(name),
///     _ => resources::endpoints(name, &[8080]),
/// };
/// let now = Instant::ZERO;
/// let config = loop {
///     if let Some(update) = manager.poll_update() {
///         break update?;
///     }
///     match client.poll_action().expect("the chain keeps the client busy") {
///         Action::StartStream { stream, .. } => {
///             client.handle_event(now, Event::StreamStarted { stream })
///         }
///         Action::SendRequest { stream, request } => {
///             client.handle_event(now, Event::RequestSent { stream });
///             if request.version_info.is_empty() {
///                 // A type's first request: answer with what it names.
///                 let names = request.resource_names.iter();
///                 let found = names.map(|n| served(request.type_url, n)).collect();
///                 let response = peer::response(request.type_url, "1", "n1", found);
///                 let bytes = response.encode_to_vec().into();
///                 client.handle_event(now, Event::ResponseReceived { stream, bytes });
///             }
///         }
///         // The manager's own watchers; it may watch or cancel through the client.
///         Action::Notify(n) => assert!(manager.handle_notification(&mut client, &n)),
///         _ => {}
///     }
/// };
/// assert_eq!(config.route_config.name, "routes");
/// assert!(config.cluster("cluster").is_some_and(|c| c.is_ok()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct XdsDependencyManager {
    listener_name: String,
    authority: String,
    lds: Option<Slot<ListenerResource>>,
    rds: Option<(String, Slot<RouteConfigResource>)>,
    cds: BTreeMap<String, Slot<ClusterResource>>,
    eds: BTreeMap<String, Slot<EndpointsResource>>,
    owners: BTreeMap<WatcherId, Owner>,
    subscriptions: BTreeMap<String, usize>,
    inline: Option<(Arc<ListenerResource>, Arc<RouteConfigResource>)>,
    last: Option<Result<Arc<XdsConfig>, XdsError>>,
    pending: Option<Result<Arc<XdsConfig>, XdsError>>,
}

impl XdsDependencyManager {
    /// A manager for the listener `listener_name`, choosing virtual hosts by
    /// `data_plane_authority` (the target's authority, e.g. `foo.example.com` or
    /// `foo.example.com:8443`).
    pub fn new(
        listener_name: impl Into<String>,
        data_plane_authority: impl Into<String>,
    ) -> XdsDependencyManager {
        XdsDependencyManager {
            listener_name: listener_name.into(),
            authority: data_plane_authority.into(),
            lds: None,
            rds: None,
            cds: BTreeMap::new(),
            eds: BTreeMap::new(),
            owners: BTreeMap::new(),
            subscriptions: BTreeMap::new(),
            inline: None,
            last: None,
            pending: None,
        }
    }

    // ----- getters -----

    /// The listener name.
    pub fn listener_name(&self) -> &str {
        &self.listener_name
    }

    /// The data-plane authority virtual hosts are chosen by.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// Whether `watcher` is one of this manager's live watches.
    pub fn owns(&self, watcher: WatcherId) -> bool {
        self.owners.contains_key(&watcher)
    }

    /// The resources watched now, as `(type URL, name)`, sorted.
    pub fn watched(&self) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> = self
            .owners
            .values()
            .map(|o| match o {
                Owner::Lds => (type_url::LISTENER, self.listener_name.clone()),
                Owner::Rds => (
                    type_url::ROUTE_CONFIGURATION,
                    self.rds
                        .as_ref()
                        .map(|(n, _)| n.clone())
                        .unwrap_or_default(),
                ),
                Owner::Cds(n) => (type_url::CLUSTER, n.clone()),
                Owner::Eds(n) => (type_url::CLUSTER_LOAD_ASSIGNMENT, n.clone()),
            })
            .collect();
        out.sort();
        out
    }

    /// The last update emitted (what the channel should be using).
    pub fn current(&self) -> Option<&Result<Arc<XdsConfig>, XdsError>> {
        self.last.as_ref()
    }

    // ----- inputs -----

    /// Starts watching the listener. Calling it again does nothing.
    pub fn start(&mut self, client: &mut XdsClient) -> Result<(), WatchError> {
        if self.lds.is_some() {
            return Ok(());
        }
        let watcher = client.watch::<Lds>(&self.listener_name)?;
        self.owners.insert(watcher, Owner::Lds);
        self.lds = Some(Slot {
            watcher: Some(watcher),
            state: None,
        });
        Ok(())
    }

    /// Cancels every watch. The manager can be started again.
    pub fn stop(&mut self, client: &mut XdsClient) {
        for watcher in self.owners.keys() {
            client.cancel_watch(*watcher);
        }
        self.owners.clear();
        self.lds = None;
        self.rds = None;
        self.cds.clear();
        self.eds.clear();
        self.inline = None;
    }

    /// Feeds a notification. Returns false, doing nothing, when its watcher is not one of
    /// this manager's (another watcher of the client, or a watch it has cancelled).
    /// Ambient errors are absorbed: the config built from the cached value stays valid.
    pub fn handle_notification(
        &mut self,
        client: &mut XdsClient,
        notification: &Notification,
    ) -> bool {
        let Some(owner) = self.owners.get(&notification.watcher).cloned() else {
            return false;
        };
        match owner {
            Owner::Lds => {
                if let Some(slot) = &mut self.lds {
                    slot.update::<Lds>(&notification.event);
                }
            }
            Owner::Rds => {
                if let Some((_, slot)) = &mut self.rds {
                    slot.update::<Rds>(&notification.event);
                }
            }
            Owner::Cds(name) => {
                if let Some(slot) = self.cds.get_mut(&name) {
                    slot.update::<Cds>(&notification.event);
                }
            }
            Owner::Eds(name) => {
                if let Some(slot) = self.eds.get_mut(&name) {
                    slot.update::<Eds>(&notification.event);
                }
            }
        }
        self.update(client);
        true
    }

    /// Adds a reference to a cluster outside the routes (A74 dynamic subscriptions, e.g.
    /// a target an RLS plugin returned): it is watched and resolved into the config until
    /// [`unsubscribe_cluster`](Self::unsubscribe_cluster) drops the last reference.
    pub fn subscribe_cluster(&mut self, client: &mut XdsClient, name: &str) {
        *self.subscriptions.entry(name.to_owned()).or_default() += 1;
        self.update(client);
    }

    /// Drops a reference taken with [`subscribe_cluster`](Self::subscribe_cluster).
    pub fn unsubscribe_cluster(&mut self, client: &mut XdsClient, name: &str) {
        if let Some(count) = self.subscriptions.get_mut(name) {
            *count -= 1;
            if *count == 0 {
                self.subscriptions.remove(name);
            }
            self.update(client);
        }
    }

    // ----- outputs -----

    /// The latest update not yet taken, if any (updates are coalesced: only the newest
    /// one is kept). `Err` means the target cannot be routed: RPCs fail with its status.
    #[must_use]
    pub fn poll_update(&mut self) -> Option<Result<Arc<XdsConfig>, XdsError>> {
        self.pending.take()
    }

    // ----- internals -----

    fn emit(&mut self, update: Result<Arc<XdsConfig>, XdsError>) {
        let same = match (&self.last, &update) {
            (Some(Ok(a)), Ok(b)) => a == b,
            (Some(Err(a)), Err(b)) => a == b,
            _ => false,
        };
        if !same {
            self.last = Some(update.clone());
            self.pending = Some(update);
        }
    }

    fn fail(&mut self, client: &mut XdsClient, error: XdsError, keep_rds: bool) {
        if !keep_rds {
            self.cancel_rds(client);
        }
        self.retain_clusters(client, &BTreeSet::new(), &BTreeSet::new());
        self.emit(Err(error));
    }

    fn cancel_rds(&mut self, client: &mut XdsClient) {
        if let Some((
            _,
            Slot {
                watcher: Some(w), ..
            },
        )) = self.rds.take()
        {
            self.owners.remove(&w);
            client.cancel_watch(w);
        }
    }

    fn ensure_rds(&mut self, client: &mut XdsClient, name: &str) {
        if self.rds.as_ref().is_some_and(|(n, _)| n == name) {
            return;
        }
        self.cancel_rds(client);
        let slot = watch_slot::<Rds>(client, &mut self.owners, name, Owner::Rds);
        self.rds = Some((name.to_owned(), slot));
    }

    fn ensure_cds(&mut self, client: &mut XdsClient, name: &str) {
        if !self.cds.contains_key(name) {
            let slot =
                watch_slot::<Cds>(client, &mut self.owners, name, Owner::Cds(name.to_owned()));
            self.cds.insert(name.to_owned(), slot);
        }
    }

    fn ensure_eds(&mut self, client: &mut XdsClient, name: &str) {
        if !self.eds.contains_key(name) {
            let slot =
                watch_slot::<Eds>(client, &mut self.owners, name, Owner::Eds(name.to_owned()));
            self.eds.insert(name.to_owned(), slot);
        }
    }

    fn retain_clusters(
        &mut self,
        client: &mut XdsClient,
        cds: &BTreeSet<String>,
        eds: &BTreeSet<String>,
    ) {
        let owners = &mut self.owners;
        let mut cancel = |watcher: &Option<WatcherId>| {
            if let Some(w) = *watcher {
                owners.remove(&w);
                client.cancel_watch(w);
            }
        };
        self.cds.retain(|name, slot| {
            let keep = cds.contains(name);
            if !keep {
                cancel(&slot.watcher);
            }
            keep
        });
        self.eds.retain(|name, slot| {
            let keep = eds.contains(name);
            if !keep {
                cancel(&slot.watcher);
            }
            keep
        });
    }
}

/// Starts a watch, turning a refused watch into the slot's error.
fn watch_slot<R: XdsResourceType>(
    client: &mut XdsClient,
    owners: &mut BTreeMap<WatcherId, Owner>,
    name: &str,
    owner: Owner,
) -> Slot<R::Value> {
    match client.watch::<R>(name) {
        Ok(watcher) => {
            owners.insert(watcher, owner);
            Slot {
                watcher: Some(watcher),
                state: None,
            }
        }
        Err(e) => Slot {
            watcher: None,
            state: Some(Err(invalid(format!("cannot watch {name:?}: {e}")))),
        },
    }
}

fn invalid(message: String) -> XdsError {
    XdsError {
        kind: ErrorKind::Invalid,
        status: Status::new(Code::UNAVAILABLE, message),
    }
}

/// The error a resource's failure stands for in the config: UNAVAILABLE (what RPCs fail
/// with), same kind, and a message that names the resource.
fn context_error(what: &str, name: &str, e: &XdsError) -> XdsError {
    let quoted = format!("{name:?}");
    let message = if e.status.message.contains(&quoted) {
        e.status.message.clone()
    } else {
        format!("{what} {quoted}: {}", e.status.message)
    };
    XdsError {
        kind: e.kind,
        status: Status::new(Code::UNAVAILABLE, message),
    }
}
