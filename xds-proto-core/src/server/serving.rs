//! The serving mode of an xDS-enabled server (gRFC A36, A88): one [`ServingState`] per
//! listening address, fed by the runtime with the watch events of its Listener and of
//! the RDS resources the listener names, says whether the server serves and with which
//! configuration.
//!
//! NOT_SERVING until the listener has arrived and every RDS name it uses has been
//! answered (a value or an error: a chain whose RDS failed serves, and its RPCs fail
//! UNAVAILABLE, A36). A listener update is held until its new RDS names are answered,
//! then applies to new connections (a new [`ServingConfig::generation`]: the runtime
//! drains older connections); an RDS update applies to every connection at once. A
//! listener that is deleted (does-not-exist), invalid without a good version, not a
//! server listener, or on another address means NOT_SERVING; an ambient error keeps
//! the last good configuration (A88).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use super::routing::{RoutedRpc, RpcRefusal};
use super::select::{ConnectionAddrs, select_filter_chain};
use crate::client::WatchEvent;
use crate::filter::server::{RouteFilters, ServerFilters};
use crate::resource::listener::{FilterChain, ListenerKind, RouteSource, ServerListener};
use crate::resource::route::{RouteAction, RouteConfigResource};
use crate::resource::{Lds, Rds};

/// Whether the server serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServingMode {
    /// Connections are accepted and RPCs routed.
    Serving,
    /// Connections are refused (accepted and closed without a byte); the reason is for
    /// developers.
    NotServing(String),
}

/// What the runtime must do after feeding the state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServingEvent {
    /// The serving mode changed (report it to the application's callback).
    ModeChanged(ServingMode),
    /// A new listener configuration, [`ServingState::config`], applies to new
    /// connections; connections accepted under an older generation drain (GOAWAY,
    /// then closed after the drain grace time).
    ListenerApplied {
        /// The new configuration's generation.
        generation: u64,
    },
    /// Start watching this RDS resource and feed its events to
    /// [`ServingState::on_route_config`].
    WatchRoutes(String),
    /// Stop watching this RDS resource.
    UnwatchRoutes(String),
}

/// An RDS resource as the server knows it.
#[derive(Clone, Debug, PartialEq)]
enum RdsState {
    /// Watched, not answered yet.
    Pending,
    /// The last good value.
    Ready(Arc<RouteConfigResource>),
    /// An error with no good value (does-not-exist, NACK, unreachable server).
    Failed(String),
}

/// A configuration the server serves with.
#[derive(Clone, Debug, PartialEq)]
pub struct ServingConfig {
    /// Bumped by every applied listener; connections remember the one they were
    /// accepted under.
    pub generation: u64,
    /// The listener.
    pub listener: Arc<ServerListener>,
    /// The listener's RDS resources, by name.
    routes: BTreeMap<String, RdsState>,
    /// Each chain's server filters by route (in [`ServerListener::chains`] order),
    /// merged once here rather than per RPC.
    filters: Box<[RouteFilters]>,
}

impl ServingConfig {
    fn new(
        generation: u64,
        listener: Arc<ServerListener>,
        routes: BTreeMap<String, RdsState>,
    ) -> ServingConfig {
        let mut config = ServingConfig {
            generation,
            listener,
            routes,
            filters: Box::default(),
        };
        config.filters = config
            .listener
            .chains()
            .map(|chain| match config.routes_for(chain) {
                Ok(routes) => {
                    RouteFilters::build(&chain.http_connection_manager.http_filters, routes)
                }
                Err(_) => RouteFilters::default(),
            })
            .collect();
        config
    }

    /// The index of `chain` (as [`select_filter_chain`](Self::select_filter_chain)
    /// returned it) among the listener's chains, for
    /// [`server_filters`](Self::server_filters).
    pub fn chain_index(&self, chain: &FilterChain) -> Option<usize> {
        self.listener.chains().position(|c| std::ptr::eq(c, chain))
    }

    /// The server filters an RPC `routed` on the chain at `chain_index` runs; `None`
    /// when it runs none.
    pub fn server_filters(
        &self,
        chain_index: usize,
        routed: &RoutedRpc<'_>,
    ) -> Option<&ServerFilters> {
        self.filters
            .get(chain_index)?
            .for_route(routed.virtual_host_index, routed.route_index)
    }

    /// The filter chain of a connection between `addrs`; `None`: close it.
    pub fn select_filter_chain(&self, addrs: ConnectionAddrs) -> Option<&FilterChain> {
        select_filter_chain(&self.listener, addrs)
    }

    /// The routes RPCs on `chain` (a chain of this or an older configuration) follow:
    /// inline, or the RDS resource by name as this configuration knows it.
    ///
    /// # Errors
    /// [`RpcRefusal::NoRouteConfiguration`] when the RDS resource is missing or failed.
    pub fn routes_for<'a>(
        &'a self,
        chain: &'a FilterChain,
    ) -> Result<&'a RouteConfigResource, RpcRefusal> {
        match &chain.http_connection_manager.route_config {
            RouteSource::Inline(routes) => Ok(routes),
            RouteSource::Rds(name) => match self.routes.get(name) {
                Some(RdsState::Ready(routes)) => Ok(routes),
                Some(RdsState::Failed(reason)) => {
                    Err(RpcRefusal::NoRouteConfiguration(reason.clone()))
                }
                Some(RdsState::Pending) | None => Err(RpcRefusal::NoRouteConfiguration(format!(
                    "route configuration {name:?} not received"
                ))),
            },
        }
    }

    /// What will make RPCs fail (A36's "configuration error logging"): failed RDS
    /// resources and routes whose action is not `non_forwarding_action`, on the chains
    /// a connection can select (the others' routes are never asked for).
    pub fn config_errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for chain in self.listener.selectable_chains() {
            match self.routes_for(chain) {
                Err(e) => errors.push(format!("filter chain {:?}: {e}", chain.name)),
                Ok(routes) => {
                    let forwarding = routes
                        .virtual_hosts
                        .iter()
                        .flat_map(|vh| &vh.routes)
                        .filter(|r| r.action != RouteAction::NonForwarding)
                        .count();
                    if forwarding > 0 {
                        errors.push(format!(
                            "filter chain {:?}: {forwarding} routes without non_forwarding_action \
                             (their RPCs fail UNAVAILABLE)",
                            chain.name
                        ));
                    }
                }
            }
        }
        errors
    }
}

/// The serving state of one listening address. See the module documentation.
#[derive(Debug)]
pub struct ServingState {
    listening: SocketAddr,
    mode: ServingMode,
    active: Option<Arc<ServingConfig>>,
    /// A received listener waiting for its RDS resources.
    pending: Option<Arc<ServerListener>>,
    routes: BTreeMap<String, RdsState>,
    generation: u64,
    logged_config_errors: bool,
    events: VecDeque<ServingEvent>,
}

impl ServingState {
    /// The state of a server listening on `listening`, NOT_SERVING until its listener
    /// arrives.
    pub fn new(listening: SocketAddr) -> ServingState {
        ServingState {
            listening,
            mode: ServingMode::NotServing("waiting for the listener resource".into()),
            active: None,
            pending: None,
            routes: BTreeMap::new(),
            generation: 0,
            logged_config_errors: false,
            events: VecDeque::new(),
        }
    }

    /// The serving mode.
    pub fn mode(&self) -> &ServingMode {
        &self.mode
    }

    /// The configuration new connections and RPCs use, while serving.
    pub fn config(&self) -> Option<&Arc<ServingConfig>> {
        self.active.as_ref()
    }

    /// The next thing the runtime must do, if any.
    pub fn poll_event(&mut self) -> Option<ServingEvent> {
        self.events.pop_front()
    }

    /// The RDS names watched now (those of the active and of a pending listener).
    pub fn watched_routes(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }

    /// A watch event of the server's Listener.
    pub fn on_listener(&mut self, event: &WatchEvent) {
        match event {
            WatchEvent::Changed(Ok(value)) => match value.to_arc::<Lds>() {
                Some(resource) => match &resource.kind {
                    ListenerKind::Server(listener) => self.on_server_listener(listener),
                    _ => self.stop(format!(
                        "listener {:?} is not a server listener (it has no address)",
                        resource.name
                    )),
                },
                None => self.stop("the listener watch delivered another resource type".into()),
            },
            WatchEvent::Changed(Err(error)) => self.stop(format!("listener: {error}")),
            WatchEvent::AmbientError(error) => match self.mode {
                ServingMode::Serving => {
                    tracing::warn!(%error, "xDS server keeps serving its last good listener");
                }
                ServingMode::NotServing(_) => {
                    self.set_mode(ServingMode::NotServing(format!("listener: {error}")))
                }
            },
        }
    }

    /// A watch event of the RDS resource `name` (announced by
    /// [`ServingEvent::WatchRoutes`]); events of names no longer watched are ignored.
    pub fn on_route_config(&mut self, name: &str, event: &WatchEvent) {
        let Some(state) = self.routes.get_mut(name) else {
            return;
        };
        match event {
            WatchEvent::Changed(Ok(value)) => match value.to_arc::<Rds>() {
                Some(routes) => *state = RdsState::Ready(routes),
                None => *state = RdsState::Failed("not a route configuration".into()),
            },
            WatchEvent::Changed(Err(error)) => *state = RdsState::Failed(error.to_string()),
            WatchEvent::AmbientError(error) => {
                tracing::warn!(route_config = name, %error, "xDS server keeps its last route configuration");
                return;
            }
        }
        if let Some(active) = &self.active
            && active.routes.contains_key(name)
        {
            let refreshed = ServingConfig::new(
                active.generation,
                active.listener.clone(),
                self.routes_of(&active.listener),
            );
            self.active = Some(Arc::new(refreshed));
            self.log_config_errors();
        }
        self.try_apply_pending();
    }

    fn on_server_listener(&mut self, listener: &ServerListener) {
        if !listener.listens_on(self.listening) {
            self.stop(format!(
                "the listener's address {}:{} does not match the listening address {}",
                listener.address, listener.port, self.listening
            ));
            return;
        }
        self.pending = Some(Arc::new(listener.clone()));
        self.sync_watches();
        self.try_apply_pending();
    }

    /// Applies the pending listener once none of its RDS resources is pending.
    fn try_apply_pending(&mut self) {
        let Some(pending) = &self.pending else {
            return;
        };
        let waiting = pending
            .rds_names()
            .iter()
            .any(|n| matches!(self.routes.get(*n), Some(RdsState::Pending) | None));
        if waiting {
            return;
        }
        let listener = self.pending.take().expect("checked above");
        self.generation += 1;
        let routes = self.routes_of(&listener);
        self.active = Some(Arc::new(ServingConfig::new(
            self.generation,
            listener,
            routes,
        )));
        self.sync_watches();
        self.events.push_back(ServingEvent::ListenerApplied {
            generation: self.generation,
        });
        self.log_config_errors();
        self.set_mode(ServingMode::Serving);
    }

    /// Drops every configuration: NOT_SERVING for `reason`.
    fn stop(&mut self, reason: String) {
        tracing::warn!(%reason, listening = %self.listening, "xDS server not serving");
        self.active = None;
        self.pending = None;
        self.sync_watches();
        self.set_mode(ServingMode::NotServing(reason));
    }

    fn routes_of(&self, listener: &ServerListener) -> BTreeMap<String, RdsState> {
        listener
            .rds_names()
            .into_iter()
            .map(|n| {
                let state = self.routes.get(n).cloned().unwrap_or(RdsState::Pending);
                (n.to_owned(), state)
            })
            .collect()
    }

    /// Watches exactly the RDS names of the active and pending listeners.
    fn sync_watches(&mut self) {
        let mut wanted: Vec<String> = Vec::new();
        for listener in self
            .active
            .iter()
            .map(|a| &a.listener)
            .chain(self.pending.as_ref())
        {
            wanted.extend(listener.rds_names().into_iter().map(str::to_owned));
        }
        let stale: Vec<String> = self
            .routes
            .keys()
            .filter(|n| !wanted.contains(n))
            .cloned()
            .collect();
        for name in stale {
            self.routes.remove(&name);
            self.events.push_back(ServingEvent::UnwatchRoutes(name));
        }
        for name in wanted {
            if !self.routes.contains_key(&name) {
                self.routes.insert(name.clone(), RdsState::Pending);
                self.events.push_back(ServingEvent::WatchRoutes(name));
            }
        }
    }

    fn set_mode(&mut self, mode: ServingMode) {
        if self.mode != mode {
            self.mode = mode.clone();
            self.events.push_back(ServingEvent::ModeChanged(mode));
        }
    }

    /// A36's configuration error logging: a warning at each update while the active
    /// configuration will fail RPCs, one line when that ends.
    fn log_config_errors(&mut self) {
        let errors = self
            .active
            .as_ref()
            .map(|a| a.config_errors())
            .unwrap_or_default();
        if !errors.is_empty() {
            tracing::warn!(listening = %self.listening, ?errors, "xDS server configuration fails some RPCs");
            self.logged_config_errors = true;
        } else if self.logged_config_errors {
            tracing::warn!(listening = %self.listening, "xDS server configuration errors resolved");
            self.logged_config_errors = false;
        }
    }
}
