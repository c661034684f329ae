//! The ADS protocol engine: one deterministic state machine per xDS client.
//!
//! It owns the watchers, the resource cache, one ADS stream per server in use (with
//! version, nonce and subscriptions per type), ACK/NACK, the A57 failure modes
//! (stream termination, connectivity errors, backoff, the does-not-exist timer),
//! TP3 `resource_errors`, the A88 watcher split, A71 fallback, and the CSDS snapshot.
//!
//! Methods come in four groups, as in quinn-proto: getters, inputs (`watch`,
//! `cancel_watch`, `handle_event`, `handle_timeout`), and the two outputs
//! (`poll_action`, `poll_timeout`). After every input, drain `poll_action()` until it
//! returns `None`, then sleep until `poll_timeout()`.
//!
//! [`XdsClient`] holds the sub-states and routes inputs to them; each file owns one
//! concern:
//! - `api`: the public types (ids, [`Event`], [`Action`], [`Notification`], config);
//! - `status`: [`Code`], [`Status`], [`XdsError`] and one constructor per failure;
//! - `request`: [`AdsRequest`] and its wire encoding; `delta_request`:
//!   [`DeltaRequest`] and its wire encoding; `envelope`: the lite `DiscoveryResponse` and
//!   `DeltaDiscoveryResponse` decoders;
//! - `delta`: delta xDS (building delta requests, applying delta responses);
//! - `timer`: every deadline (reconnects, and per-server queues of does-not-exist timers);
//! - `cache`: the resource tables and entries (fill, fail, notify, timers armed);
//! - `server`: a server's subscriptions and its stream's state, building requests;
//!   `subscription`: one type's subscribed names on one server, and their sorted list;
//! - `stream`: opening streams, emitting requests, request-sent and connected;
//! - `response`: decoding and applying a response (ACK/NACK, TP3 errors, deletions);
//! - `failure`: A57 connectivity failures, backoff and the does-not-exist timer;
//! - `authority`: authorities, server selection and A71 fallback;
//! - `csds`: the CSDS snapshot and the A78 metrics;
//! - `lrs`: the client's side of load reporting (the counters it hands out, and the
//!   LRS streams' inputs and outputs; the state machines are in [`crate::lrs`]).
//!
//! The client logs through `tracing` (stream lifecycle, requests, responses, timers,
//! failures and fallback); per-resource events are at `trace` level only.

mod api;
mod authority;
mod cache;
mod check;
mod csds;
mod delta;
mod delta_request;
mod envelope;
mod failure;
mod lrs;
mod request;
mod response;
mod server;
mod status;
mod stream;
mod subscription;
#[cfg(test)]
mod tests;
mod timer;
mod wildcard;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

pub use self::api::{
    Action, DEFAULT_RESOURCE_TIMEOUT, DEFAULT_TRANSIENT_RESOURCE_TIMEOUT, DuplicateTypeError,
    Event, MAX_NACK_DETAIL_BYTES, Notification, ResourceSnapshot, ResourceStatusKind, ServerId,
    StreamId, UpdateFailure, WatchError, WatchEvent, WatcherId, XdsClientConfig,
};
pub use self::check::WatchChecker;
pub use self::delta_request::DeltaRequest;
pub use self::request::AdsRequest;
pub use self::status::{Code, ErrorKind, Status, XdsError};

use self::authority::AuthorityState;
use self::cache::{ResourceEntry, ResourceTable};
use self::server::ServerState;
use self::timer::{Expired, Timers};
use crate::DetHashMap as HashMap;
use crate::bootstrap::ServerConfig;
use crate::names;
use crate::resource::{self, ResourceTypeInfo, XdsResourceType};
use crate::time::Instant;

/// A resource type's index in the client's registered types.
type TypeIdx = usize;

/// The xDS client state machine.
///
/// Drive it in a loop: make one mutation (a watch, a transport event, a timeout), drain
/// [`poll_action`](Self::poll_action), then sleep until
/// [`poll_timeout`](Self::poll_timeout). Here the "server" is a response built with the
/// testing kit (`xds-proto-testing`); an adapter does the same with a real ADS stream.
///
/// ```
/// use std::time::Duration;
/// use xds_proto_core::prost::Message;
/// use xds_proto_core::{Action, Bootstrap, Cds, Event, Instant, XdsClient, XdsClientConfig};
/// use xds_proto_testing::{peer, resources};
///
/// let bootstrap = Bootstrap::from_json_str(peer::ONE_SERVER_BOOTSTRAP)?;
/// let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), /* seed */ 1);
/// let mut now = Instant::ZERO;
///
/// // 1. One mutation: the first watch opens a stream to the server.
/// let watcher = client.watch::<Cds>("backend")?;
/// // 2. Drain: open the ADS stream, send the subscription.
/// let mut stream = None;
/// while let Some(action) = client.poll_action() {
///     match action {
///         Action::StartStream { stream: s, config, .. } => {
///             assert_eq!(config.server_uri, "xds.example:443");
///             stream = Some(s);
///         }
///         Action::SendRequest { request, .. } => assert_eq!(&*request.resource_names[0], "backend"),
///         other => panic!("{other:?}"),
///     }
/// }
/// // The transport reports the stream connected and the request written.
/// let stream = stream.expect("a stream was opened");
/// client.handle_event(now, Event::StreamStarted { stream });
/// client.handle_event(now, Event::RequestSent { stream });
/// // 3. Sleep until the next deadline: the resource's does-not-exist timer (A57).
/// assert_eq!(client.poll_timeout(), Some(now + Duration::from_secs(15)));
///
/// // The response arrives first, as bytes.
/// now += Duration::from_millis(20);
/// let response = peer::response(peer::CDS, "1", "nonce-1", vec![resources::cluster("backend")]);
/// let bytes = response.encode_to_vec().into();
/// client.handle_event(now, Event::ResponseReceived { stream, bytes });
/// let (mut value, mut acked) = (None, false);
/// while let Some(action) = client.poll_action() {
///     match action {
///         Action::Notify(n) if n.watcher == watcher => value = n.value::<Cds>().cloned(),
///         Action::SendRequest { request, .. } => acked = request.version_info == "1",
///         other => panic!("{other:?}"),
///     }
/// }
/// assert_eq!(value.expect("the watcher got the cluster").name, "backend");
/// assert!(acked, "the response was ACKed");
/// assert_eq!(client.poll_timeout(), None, "the timer stopped: the cluster exists");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct XdsClient {
    config: XdsClientConfig,
    node: crate::pb::envoy::config::core::v3::Node,
    /// What every error told to a watcher ends with: the node ID.
    node_tag: status::NodeTag,
    types: Vec<ResourceTypeInfo>,
    servers: Vec<ServerState>,
    authorities: Vec<AuthorityState>,
    resources: Vec<ResourceTable>,
    watchers: HashMap<WatcherId, (TypeIdx, Arc<str>)>,
    timers: Timers,
    actions: VecDeque<Action>,
    rng: Xoshiro256PlusPlus,
    next_stream: u64,
    /// Responses applied so far: the stamp of the current one (see `cache::Seen`).
    responses_applied: u64,
    next_watcher: u64,
    /// The types whose requests wait, by type (see [`XdsClient::hold_requests`]).
    on_hold: Vec<bool>,
    /// Load reporting (LRS): the counters handed out and the LRS streams.
    lrs: crate::lrs::LoadReporting,
    /// The latest `now` an input carried: when a cluster's load counters are created
    /// (by a dependency manager handling the notifications of that input).
    clock: Instant,
    /// Test-only (feature `planted-bug`): see [`XdsClient::plant_bug`].
    #[cfg(feature = "planted-bug")]
    planted_bug: bool,
}

/// The action queue's capacity kept once it is drained: what an ordinary exchange
/// needs; a burst's larger queue is given back.
const ACTIONS_KEPT: usize = 64;

impl fmt::Debug for XdsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdsClient")
            .field("servers", &self.servers.len())
            .field("watchers", &self.watchers.len())
            .field("pending_actions", &self.actions.len())
            .finish_non_exhaustive()
    }
}

impl XdsClient {
    /// A client with the built-in LDS/RDS/CDS/EDS types. `seed` drives backoff jitter.
    pub fn new(config: XdsClientConfig, seed: u64) -> XdsClient {
        let node = config
            .bootstrap
            .node
            .to_proto(&config.user_agent_name, &config.user_agent_version);
        let types = resource::builtin_types();
        let on_hold = vec![false; types.len()];
        let resources = types.iter().map(|_| ResourceTable::default()).collect();
        let node_tag = status::NodeTag::new(&node.id);
        let lrs =
            crate::lrs::LoadReporting::new(config.min_load_reporting_interval, config.backoff);
        XdsClient {
            config,
            node,
            node_tag,
            types,
            servers: Vec::new(),
            authorities: Vec::new(),
            resources,
            watchers: HashMap::default(),
            timers: Timers::default(),
            actions: VecDeque::new(),
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            next_stream: 1,
            responses_applied: 0,
            next_watcher: 1,
            on_hold,
            lrs,
            clock: Instant::ZERO,
            #[cfg(feature = "planted-bug")]
            planted_bug: false,
        }
    }

    /// Test-only (feature `planted-bug`, off by default): when `on`, the client breaks
    /// one A57 rule on purpose: it starts the does-not-exist timer when a request is
    /// reported sent even if the stream is not yet connected. The simulator's
    /// planted-bug test turns it on to show that its invariants catch the break.
    #[cfg(feature = "planted-bug")]
    #[doc(hidden)]
    pub fn plant_bug(&mut self, on: bool) {
        self.planted_bug = on;
    }

    /// Adds a user-defined resource type, so that [`watch::<T>`](Self::watch) works for it.
    pub fn register_type<T: XdsResourceType>(&mut self) -> Result<(), DuplicateTypeError> {
        if self.type_index(T::TYPE_URL).is_some() {
            return Err(DuplicateTypeError(T::TYPE_URL));
        }
        self.types.push(ResourceTypeInfo::of::<T>());
        self.resources.push(ResourceTable::default());
        self.on_hold.push(false);
        for server in &mut self.servers {
            server.add_type();
        }
        Ok(())
    }

    // ----- getters -----

    /// The configuration the client was built with.
    pub fn config(&self) -> &XdsClientConfig {
        &self.config
    }

    /// The node identity sent on the first request of each stream.
    pub fn node(&self) -> &crate::pb::envoy::config::core::v3::Node {
        &self.node
    }

    /// The configuration of a server this client has used.
    pub fn server_config(&self, server: ServerId) -> Option<&Arc<ServerConfig>> {
        self.servers.get(server.0).map(|s| &s.config)
    }

    /// The stream currently open to a server, if any.
    pub fn current_stream(&self, server: ServerId) -> Option<StreamId> {
        self.servers.get(server.0)?.stream.as_ref().map(|s| s.id)
    }

    /// The standing connectivity error of a server, if its last attempt failed.
    pub fn server_error(&self, server: ServerId) -> Option<&XdsError> {
        self.servers.get(server.0)?.connectivity_error.as_ref()
    }

    // ----- inputs -----

    /// Starts watching the resource `name` of type `T`. The watcher is told the current
    /// state at once if the resource is already known, and of every change after, through
    /// [`Action::Notify`]; read the value with [`Notification::value::<T>`](Notification::value).
    ///
    /// ```
    /// use xds_proto_core::{Action, Bootstrap, Cds, XdsClient, XdsClientConfig};
    ///
    /// let bootstrap = Bootstrap::from_json_str(r#"{
    ///     "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
    ///     "node": {"id": "my-node"}
    /// }"#)?;
    /// let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 7);
    /// let watcher = client.watch::<Cds>("my-cluster")?;
    /// // The first watch on a server opens its ADS stream and subscribes the name.
    /// assert!(matches!(client.poll_action(), Some(Action::StartStream { .. })));
    /// match client.poll_action() {
    ///     Some(Action::SendRequest { request, .. }) => {
    ///         assert_eq!(&*request.resource_names[0], "my-cluster");
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// client.cancel_watch(watcher);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn watch<T: XdsResourceType>(&mut self, name: &str) -> Result<WatcherId, WatchError> {
        self.watch_named(&ResourceTypeInfo::of::<T>(), name, None)
    }

    /// As [`watch`](Self::watch), for a type known at run time (a tool that takes the
    /// type from its input, as the CLI does): `ty` is a built-in type
    /// ([`builtin_types`](crate::resource::builtin_types)) or one registered with
    /// [`register_type`](Self::register_type). Read the values with
    /// [`ResourceValue::get`](crate::ResourceValue::get) of the type `ty` stands for.
    ///
    /// ```
    /// use xds_proto_core::resource::{ResourceTypeInfo, builtin_types, type_url};
    /// use xds_proto_core::{Bootstrap, Cds, WatchError, XdsClient, XdsClientConfig};
    ///
    /// # let bootstrap = Bootstrap::from_json_str(xds_proto_testing::peer::ONE_SERVER_BOOTSTRAP)?;
    /// let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 7);
    /// let cds = builtin_types().into_iter().find(|t| t.type_url() == type_url::CLUSTER);
    /// client.watch_type(&cds.expect("built in"), "my-cluster")?;
    /// // A type the client does not know is refused, as `watch::<T>` refuses it.
    /// struct Unknown;
    /// # impl xds_proto_core::XdsResourceType for Unknown {
    /// #     type Value = ();
    /// #     const TYPE_URL: &'static str = "type.googleapis.com/example.Unknown";
    /// #     const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
    /// #     fn decode(_: &[u8]) -> Result<(String, ()), xds_proto_core::DecodeError> { unimplemented!() }
    /// # }
    /// let unknown = ResourceTypeInfo::of::<Unknown>();
    /// assert!(matches!(client.watch_type(&unknown, "x"), Err(WatchError::UnknownType(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As for [`watch`](Self::watch).
    pub fn watch_type(
        &mut self,
        ty: &ResourceTypeInfo,
        name: &str,
    ) -> Result<WatcherId, WatchError> {
        self.watch_named(ty, name, None)
    }

    /// As [`watch_type`](Self::watch_type), keeping the caller's copy of `name` as
    /// [`watch_shared`](Self::watch_shared) does.
    ///
    /// # Errors
    /// As for [`watch`](Self::watch).
    pub fn watch_type_shared(
        &mut self,
        ty: &ResourceTypeInfo,
        name: &Arc<str>,
    ) -> Result<WatcherId, WatchError> {
        self.watch_named(ty, name, Some(name))
    }

    /// As [`watch`](Self::watch), keeping the caller's copy of `name` (when it is
    /// already canonical) instead of allocating another: an embedder that holds its
    /// names as `Arc<str>` saves an allocation and a copy per watch.
    ///
    /// # Errors
    /// As for [`watch`](Self::watch).
    pub fn watch_shared<T: XdsResourceType>(
        &mut self,
        name: &Arc<str>,
    ) -> Result<WatcherId, WatchError> {
        self.watch_named(&ResourceTypeInfo::of::<T>(), name, Some(name))
    }

    fn watch_named(
        &mut self,
        ty: &ResourceTypeInfo,
        name: &str,
        shared: Option<&Arc<str>>,
    ) -> Result<WatcherId, WatchError> {
        let t = self
            .type_index(ty.type_url())
            .filter(|&t| self.types[t].type_id == ty.type_id)
            .ok_or_else(|| WatchError::UnknownType(ty.type_url().to_string()))?;
        let canonical = names::canonicalize(name).map_err(WatchError::InvalidName)?;
        let authority = self.authority_for(t, &canonical)?;
        let id = WatcherId(self.next_watcher);
        self.next_watcher += 1;
        let type_url = self.types[t].type_url();
        // An authority's first watch puts its first server in use, before its standing
        // error is read: a server shared with another authority may be failing already.
        self.authorities[authority].start_using();
        let conn = self.authorities[authority]
            .active()
            .and_then(|s| self.servers[s].connectivity_error.clone());
        if &*canonical == wildcard::WILDCARD {
            self.join_wildcard(t, id, authority, conn.as_ref());
        }
        if let Some(entry) = self.resources[t].get_mut(&canonical) {
            let held_for_wildcard = entry.watchers.is_empty();
            entry.watchers.push(id);
            let name = entry.name.clone();
            self.watchers.insert(id, (t, name.clone()));
            let events = entry.initial_events(conn.as_ref());
            if entry.cached.is_some()
                && events
                    .iter()
                    .any(|e| matches!(e, WatchEvent::AmbientError(_)))
            {
                entry.rare_mut().ambient_holders.push(id);
            }
            for event in events {
                self.actions.push_back(Action::Notify(Notification {
                    watcher: id,
                    type_url,
                    name: name.clone(),
                    event,
                }));
            }
            if held_for_wildcard {
                self.name_wildcard_resource(t, &name, authority);
            }
            return Ok(id);
        }
        tracing::trace!(watcher = %id, type_url, name = %canonical, "watch started");
        let name: Arc<str> = match (&canonical, shared) {
            (std::borrow::Cow::Borrowed(_), Some(shared)) => shared.clone(),
            _ => Arc::from(&*canonical),
        };
        self.resources[t].insert(ResourceEntry::new(name.clone(), authority, id));
        self.watchers.insert(id, (t, name.clone()));
        self.authorities[authority].resources += 1;
        // A new uncached resource while the active server is failing: fall back (A71),
        // or tell the watcher at once.
        if let Some(err) = conn
            && !self.maybe_fallback(authority)
        {
            self.actions.push_back(Action::Notify(Notification {
                watcher: id,
                type_url,
                name: name.clone(),
                event: WatchEvent::Changed(Err(err)),
            }));
        }
        for i in 0..self.authorities[authority].in_use().len() {
            let server = self.authorities[authority].in_use()[i];
            if self.servers[server].subscribe(t, &name) {
                self.subscription_changed(server, t);
            }
        }
        Ok(id)
    }

    /// Stops a watch. Nothing more reaches the watcher. When it was the last watch of
    /// the resource, the resource is unsubscribed and forgotten; when it was the last
    /// on a server, that server's stream is closed.
    pub fn cancel_watch(&mut self, watcher: WatcherId) {
        let Some((t, name)) = self.watchers.remove(&watcher) else {
            return;
        };
        tracing::trace!(%watcher, name = %name, "watch cancelled");
        self.actions
            .retain(|a| !matches!(a, Action::Notify(n) if n.watcher == watcher));
        if &*name == wildcard::WILDCARD {
            self.leave_wildcard(t, watcher);
        }
        let Some(entry) = self.resources[t].get_mut(&name) else {
            return;
        };
        entry.watchers.retain(|w| *w != watcher);
        if let Some(rare) = entry.rare_if_any() {
            rare.ambient_holders.retain(|w| *w != watcher);
        }
        if !entry.watchers.is_empty() {
            return;
        }
        let authority = entry.authority;
        if !entry.rare().wildcard_watchers.is_empty() {
            return self.unname_wildcard_resource(t, &name, authority);
        }
        if let Some(mut entry) = self.resources[t].remove(&name) {
            entry.disarm_timers(&mut self.timers, None);
        }
        let servers = self.authorities[authority].remove_resource();
        for server in servers {
            self.servers[server].unsubscribe(t, &name);
            if self.servers[server].has_subscriptions() {
                self.subscription_changed(server, t);
            } else {
                self.release_server(server);
            }
        }
    }

    /// Feeds one transport event.
    pub fn handle_event(&mut self, now: Instant, event: Event) {
        self.clock = self.clock.max(now);
        if let Some(server) = self.lrs_server_of(&event) {
            return self.on_lrs_event(server, now, event);
        }
        match event {
            Event::StreamStarted { stream } => {
                if let Some(server) = self.server_of_stream(stream) {
                    self.mark_connected(server, now);
                }
            }
            Event::RequestSent { stream } => self.on_request_sent(stream, now),
            Event::ResponseReceived { stream, bytes } => self.on_response(stream, bytes, now),
            Event::StreamClosed { stream, status } => {
                if let Some(server) = self.server_of_stream(stream) {
                    self.on_stream_closed(server, status, now);
                }
            }
            Event::ConnectivityFailure { server, reason } => {
                self.on_connectivity_failure(server.0, reason)
            }
        }
    }

    /// Fires every timer due at `now`. An early call is a no-op.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.clock = self.clock.max(now);
        while let Some(expired) = self.timers.pop_expired(now) {
            match expired {
                Expired::Reconnect(server) => self.ensure_stream(server),
                Expired::Resources(due) => self.on_resource_timers(due, now),
            }
        }
        self.on_lrs_timeout(now);
    }

    // ----- outputs -----

    /// The next action for the adapter, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        let action = self.actions.pop_front();
        if action.is_none() && self.actions.capacity() > ACTIONS_KEPT {
            // A burst (10,000 notifications of a first delivery) grew the queue; its
            // capacity would stay allocated for the client's life (880 KB at 10,000).
            self.actions.shrink_to(ACTIONS_KEPT);
        }
        action
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.timers.next_deadline(), self.lrs.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ----- internals -----

    /// The cache's shared copy of a name, or a new one for a name not watched.
    fn intern(&self, t: TypeIdx, name: String) -> Arc<str> {
        match self.resources[t].shared_name(&name) {
            Some(k) => k.clone(),
            None => Arc::from(name),
        }
    }

    fn type_index(&self, type_url: &str) -> Option<TypeIdx> {
        self.types.iter().position(|t| t.type_url() == type_url)
    }

    fn server_of_stream(&self, stream: StreamId) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.stream.as_ref().is_some_and(|st| st.id == stream))
    }
}
