//! The config selector (gRFC A31): what a channel runs at the start of every RPC.
//!
//! From one [`XdsConfig`] (or a bare [`VirtualHost`]) it builds a [`ConfigSelector`]
//! that, for an RPC's method path and request metadata, finds the first matching route
//! (gRFC A28 rules), picks the cluster (weighted clusters drawn from a
//! [`RandomSource`] the caller passes in), and returns a [`Selection`]: the cluster as a [`ClusterHandle`],
//! the timeout cap of A31, and the route's retry policy (A44, route over virtual host).
//! RPCs that cannot be routed get the status gRPC gives them (UNAVAILABLE).
//!
//! Cluster lifetime follows A31's two-step removal: every selector and every selection
//! holds its clusters through reference-counted [`ClusterHandle`]s issued by a
//! [`ClusterRegistry`]. The registry's `xds_cluster_manager_experimental` LB config
//! lists every cluster that some selector or some in-flight RPC still holds, so a
//! cluster removed from the routes stays until its last handle is dropped; the drop is
//! reported through an optional callback and [`ClusterRegistry::take_released`].
//!
//! Everything here is pure: no clock (deadlines are durations passed in), no I/O and no
//! OS randomness. A pick does not allocate on the common path, and routes whose path
//! matcher is an exact path or a prefix of the gRPC form `/pkg.Service/...` are found
//! through hash maps built once per route table, keeping first-match order by taking the
//! lowest route position among the candidate buckets and the routes that must be
//! scanned. Scanned regexes are evaluated together by multi-pattern DFAs, and an exact
//! path's candidates are resolved when the table is built ([`RouteTable`]), so a pick
//! costs about the same with 10 routes or 5,000.

//!
//! The parts: [`metadata`](self) reads request headers as matchers see them, `hash`
//! turns them into the A42 request hash ([`Selection::request_hash`]), `matchers`
//! holds the per-route predicates, `route_table` the indexed first-match lookup,
//! `regex_group` the multi-pattern regex DFAs it scans with, and `cluster_registry` the
//! cluster lifetime. This module holds the [`ConfigSelector`] that ties them together,
//! the [`Selection`] it returns, and A31's timeout rules.

use std::sync::Arc;
use std::time::Duration;

mod cluster_registry;
mod hash;
mod matchers;
mod metadata;
mod random;
mod regex_group;
mod route_table;
#[cfg(test)]
mod tests;

pub use cluster_registry::{ClusterHandle, ClusterManagerChild, ClusterRegistry};
pub use hash::request_hash;
pub use matchers::{
    header_matches, header_value_matches, path_matches, route_matches, select_virtual_host,
    string_matches,
};
pub use metadata::{HeaderValue, Metadata, header_value};
pub use random::{RandomSource, Seeded};
pub use route_table::{RouteTable, RouteTableStats};

use crate::DetHashMap;
use crate::client::{Code, Status};
use crate::dependency::XdsConfig;
use crate::filter::fault::ActiveFaults;
use crate::filter::{ClientFilters, RpcFilters};
use crate::resource::listener::HttpFilter;
use crate::resource::route::{
    ClusterSpecifier, ClusterSpecifierPlugin, ForwardAction, HashPolicy, RetryPolicy, Route,
    RouteAction, VirtualHost,
};

/// The status message gRPC gives an RPC that no route matches.
pub const NO_MATCHING_ROUTE: &str = "No matching route found in xDS route config";

/// The status message gRPC gives an RPC whose route is not a forwarding `route` action
/// (`non_forwarding_action`, `redirect`, `direct_response`, ...).
pub const INAPPROPRIATE_ACTION: &str = "Matching route has inappropriate action";

/// The prefix of a cluster's child name in the cluster manager config.
pub const CLUSTER_CHILD_PREFIX: &str = "cluster:";

/// The prefix of a cluster specifier plugin's child name in the cluster manager config.
pub const PLUGIN_CHILD_PREFIX: &str = "cluster_specifier_plugin:";

/// The JSON type of LB configs ([`ClusterRegistry::lb_config`]).
pub type LbConfigJson = serde_json::Value;

/// The name of the top-level LB policy A31 defines.
pub const CLUSTER_MANAGER_POLICY: &str = "xds_cluster_manager_experimental";

// ---------------------------------------------------------------------------------------
// Timeouts (A31)
// ---------------------------------------------------------------------------------------

/// The route's cap on RPC timeouts per A31: `grpc_timeout_header_max` when set, else the
/// route's `max_stream_duration`, else the HCM's. `None` (unset or zero) means no cap.
pub fn timeout_cap(
    grpc_timeout_header_max: Option<Duration>,
    route_max_stream_duration: Option<Duration>,
    hcm_max_stream_duration: Option<Duration>,
) -> Option<Duration> {
    grpc_timeout_header_max
        .or(route_max_stream_duration)
        .or(hcm_max_stream_duration)
        .filter(|d| !d.is_zero())
}

/// The effective RPC timeout of A31's table: the application deadline, lowered to
/// `grpc_timeout_header_max` when that is set and non-zero, or else to
/// `max_stream_duration` (the route's, falling back to the HCM's) when that is set and
/// non-zero. `None` means no timeout (infinite). The application's deadline is never
/// exceeded.
pub fn effective_timeout(
    application_deadline: Option<Duration>,
    grpc_timeout_header_max: Option<Duration>,
    max_stream_duration: Option<Duration>,
) -> Option<Duration> {
    let cap = match grpc_timeout_header_max {
        Some(max) => Some(max).filter(|d| !d.is_zero()),
        None => max_stream_duration.filter(|d| !d.is_zero()),
    };
    match (application_deadline, cap) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

// ---------------------------------------------------------------------------------------
// The config selector
// ---------------------------------------------------------------------------------------

/// Where a route sends an RPC: a cluster manager child, or the status its RPCs fail
/// with when the cluster could not be resolved.
#[derive(Clone, Debug)]
struct Target {
    handle: ClusterHandle,
    error: Option<Status>,
}

#[derive(Clone, Debug)]
enum Action {
    /// Not a forwarding action: RPCs fail with UNAVAILABLE.
    Inappropriate,
    /// One cluster or plugin.
    Single(Target),
    /// Weighted clusters: `ends[i]` is the cumulative weight through `targets[i]`,
    /// whose RPCs run `filters[i]` (the weighted cluster's overrides applied, A39).
    Weighted {
        ends: Box<[u32]>,
        targets: Box<[Target]>,
        filters: Box<[Option<Arc<ClientFilters>>]>,
    },
}

/// One route as a selector keeps it.
#[derive(Debug)]
struct RouteEntry {
    index: usize,
    route: Route,
    action: Action,
    retry_policy: Option<RetryPolicy>,
    timeout_cap: Option<Duration>,
    /// The HTTP filters of a single-target route; `None` when they run nothing.
    filters: Option<Arc<ClientFilters>>,
}

/// The outcome of a successful pick: everything the channel needs for the RPC.
///
/// It holds the chosen cluster: keep it until the RPC is committed (no more LB picks),
/// then drop it. Cloning it or its parts never allocates.
#[derive(Clone, Debug)]
pub struct Selection {
    entry: Arc<RouteEntry>,
    cluster: ClusterHandle,
    filters: Option<Arc<ClientFilters>>,
}

impl Selection {
    /// The chosen cluster manager child.
    pub fn cluster(&self) -> &ClusterHandle {
        &self.cluster
    }

    /// Gives up everything but the cluster handle.
    pub fn into_cluster(self) -> ClusterHandle {
        self.cluster
    }

    /// The position of the matched route in the virtual host.
    pub fn route_index(&self) -> usize {
        self.entry.index
    }

    /// The matched route.
    pub fn route(&self) -> &Route {
        &self.entry.route
    }

    /// The route's cap on the RPC timeout (A31): `None` means no cap.
    pub fn timeout_cap(&self) -> Option<Duration> {
        self.entry.timeout_cap
    }

    /// The RPC's timeout given the application's deadline (A31's table): the smaller of
    /// the two, `None` when neither is set.
    pub fn effective_timeout(&self, application_deadline: Option<Duration>) -> Option<Duration> {
        match (application_deadline, self.entry.timeout_cap) {
            (Some(a), Some(c)) => Some(a.min(c)),
            (a, c) => a.or(c),
        }
    }

    /// The retry policy: the route's, else the virtual host's (A44). gRPC retries only
    /// when [`RetryPolicy::retryable_codes`] is non-empty; the HTTP conditions are kept
    /// for data planes that act on them.
    pub fn retry_policy(&self) -> Option<&RetryPolicy> {
        self.entry.retry_policy.as_ref()
    }

    /// The HTTP filters this RPC runs (A39), their overrides merged for the route and
    /// the picked weighted cluster; `None` when they run nothing.
    pub fn filters(&self) -> Option<&ClientFilters> {
        self.filters.as_deref()
    }

    /// Runs the RPC's HTTP filters: what they decided from its method `path`, its
    /// `metadata` (request headers) and the caller's random source, faults counted in
    /// `active_faults` (one per process, A33). Nothing is drawn, and nothing
    /// allocated, for a route whose filters run nothing.
    pub fn run_filters<'a, M, R>(
        &self,
        path: &str,
        metadata: &M,
        rng: &mut R,
        active_faults: &'a ActiveFaults,
    ) -> RpcFilters<'a>
    where
        M: Metadata + ?Sized,
        R: RandomSource + ?Sized,
    {
        match &self.filters {
            None => RpcFilters::default(),
            Some(filters) => filters.on_rpc(path, metadata, rng, active_faults),
        }
    }

    /// Moves the RPC to `cluster` when its route can send RPCs there (its cluster, or
    /// one of its weighted clusters that resolved): A60's stateful session keeps an RPC
    /// on the cluster its cookie names. Returns whether it moved (or was there).
    pub fn stick_to_cluster(&mut self, cluster: &str) -> bool {
        if self.cluster.cluster() == Some(cluster) {
            return true;
        }
        let Action::Weighted {
            targets, filters, ..
        } = &self.entry.action
        else {
            return false;
        };
        let found = targets
            .iter()
            .zip(filters.iter())
            .find(|(t, _)| t.error.is_none() && t.handle.cluster() == Some(cluster));
        match found {
            Some((target, filters)) => {
                self.cluster = target.handle.clone();
                self.filters = filters.clone();
                true
            }
            None => false,
        }
    }

    /// The route's hash policies (A42), in order.
    pub fn hash_policies(&self) -> &[HashPolicy] {
        match &self.entry.route.action {
            RouteAction::Forward(f) => &f.hash_policies,
            _ => &[],
        }
    }
}

/// The targets of the selector being built: one per cluster manager child, however many
/// routes name it, each holding its handle from the registry.
struct Targets<'a, E> {
    registry: &'a mut ClusterRegistry,
    plugins: &'a [ClusterSpecifierPlugin],
    http_filters: &'a [HttpFilter],
    virtual_host: &'a VirtualHost,
    /// The status RPCs routed to a cluster fail with, when it could not be resolved.
    cluster_error: E,
    issued: DetHashMap<String, Target>,
}

impl<E: Fn(&str) -> Option<Status>> Targets<'_, E> {
    /// The filters RPCs of `route` (to `cluster`, for a weighted cluster) run, with the
    /// most specific overrides (A39).
    fn filters(
        &self,
        route: &Route,
        cluster: Option<&crate::resource::route::WeightedCluster>,
    ) -> Option<Arc<ClientFilters>> {
        if self.http_filters.is_empty() {
            return None;
        }
        ClientFilters::build(
            self.http_filters,
            [
                cluster.map(|c| &c.typed_per_filter_config),
                Some(&route.typed_per_filter_config),
                Some(&self.virtual_host.typed_per_filter_config),
            ],
        )
    }

    /// The target of `child`, issued once per selector.
    fn target(&mut self, child: ClusterManagerChild, error: Option<Status>) -> Target {
        let key = child.child_name();
        let registry = &mut *self.registry;
        self.issued
            .entry(key)
            .or_insert_with(|| Target {
                handle: registry.handle(child),
                error,
            })
            .clone()
    }

    /// The cluster `name`'s target.
    fn cluster(&mut self, name: &str) -> Target {
        let error = (self.cluster_error)(name);
        self.target(ClusterManagerChild::Cluster(name.to_owned()), error)
    }

    /// Where a forwarding route sends its RPCs.
    fn action(&mut self, route: &Route, forward: &ForwardAction) -> Action {
        match &forward.cluster {
            ClusterSpecifier::Cluster(name) => Action::Single(self.cluster(name)),
            ClusterSpecifier::WeightedClusters(clusters) => {
                let mut end = 0u32;
                let mut ends = Vec::with_capacity(clusters.len());
                let mut targets = Vec::with_capacity(clusters.len());
                let mut filters = Vec::with_capacity(clusters.len());
                for wc in clusters {
                    end = end.saturating_add(wc.weight);
                    ends.push(end);
                    targets.push(self.cluster(&wc.name));
                    filters.push(self.filters(route, Some(wc)));
                }
                Action::Weighted {
                    ends: ends.into_boxed_slice(),
                    targets: targets.into_boxed_slice(),
                    filters: filters.into_boxed_slice(),
                }
            }
            ClusterSpecifier::ClusterSpecifierPlugin(name) => {
                let plugins = self.plugins;
                match plugins.iter().find(|p| &p.name == name) {
                    Some(p) => {
                        Action::Single(self.target(ClusterManagerChild::Plugin(p.clone()), None))
                    }
                    None => Action::Inappropriate,
                }
            }
        }
    }
}

/// Routes RPCs for one virtual host (gRFC A31's per-RPC config selector).
///
/// `select` takes `&self` and is safe to call from many threads at once. Build one per
/// [`XdsConfig`] with [`ConfigSelector::new`] (the adapters' config streams do), or from
/// a bare virtual host:
///
/// ```
/// use xds_proto_core::selector::{ClusterRegistry, ConfigSelector};
/// use xds_proto_core::{Code, Rds, XdsResourceType};
/// use xds_proto_testing::peer::Fixed;
/// use xds_proto_testing::resources::{PrefixRoute, prefix_routes_config};
/// use xds_proto_core::prost::Message;
///
/// // /api is split 80/20 between two clusters; everything else goes to web.
/// let routes = prefix_routes_config(
///     "routes",
///     &["*"],
///     &[
///         PrefixRoute::weighted("/api.", &[("api-v1", 80), ("api-v2", 20)]),
///         PrefixRoute::cluster("/web.", "web"),
///     ],
/// );
/// let (_, routes) = Rds::decode(&routes.encode_to_vec())?;
/// let mut registry = ClusterRegistry::new();
/// let selector =
///     ConfigSelector::from_virtual_host(&routes.virtual_hosts[0], &[], None, &mut registry);
///
/// // The caller's random source decides weighted picks: 0 draws the first cluster,
/// // u32::MAX the last (a closure is a source: `&mut || rng.next_u32()`).
/// let headers = [("x-user", "alice")];
/// let pick = selector.select("/api.Svc/Get", &headers, &mut Fixed(0))?;
/// assert_eq!(pick.cluster().cluster(), Some("api-v1"));
/// let pick = selector.select("/api.Svc/Get", &headers, &mut Fixed(u32::MAX))?;
/// assert_eq!(pick.cluster().cluster(), Some("api-v2"));
/// // An RPC no route matches fails as gRPC fails it.
/// let err = selector.select("/other.Svc/Get", &headers, &mut Fixed(0)).unwrap_err();
/// assert_eq!(err.code, Code::UNAVAILABLE);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ConfigSelector {
    virtual_host: String,
    table: RouteTable,
    entries: Vec<Arc<RouteEntry>>,
}

impl ConfigSelector {
    /// The selector for an [`XdsConfig`]: the chosen virtual host's routes, the HCM's
    /// `max_stream_duration`, and the clusters' resolution. RPCs routed to a cluster whose
    /// entry in the config is an error fail with UNAVAILABLE naming the cluster and the
    /// error.
    pub fn new(config: &XdsConfig, registry: &mut ClusterRegistry) -> ConfigSelector {
        ConfigSelector::build(
            config.virtual_host(),
            &config.route_config.cluster_specifier_plugins,
            config.max_stream_duration,
            &config.http_filters,
            registry,
            |name| match config.clusters.get(name) {
                Some(Ok(_)) => None,
                Some(Err(e)) => Some(Status::new(
                    Code::UNAVAILABLE,
                    format!("cluster {name:?}: {}", e.status.message),
                )),
                None => Some(Status::new(
                    Code::UNAVAILABLE,
                    format!("cluster {name:?} is not in the xDS config"),
                )),
            },
        )
    }

    /// The selector for a bare virtual host, every cluster taken as usable, without
    /// HTTP filters.
    pub fn from_virtual_host(
        virtual_host: &VirtualHost,
        plugins: &[ClusterSpecifierPlugin],
        hcm_max_stream_duration: Option<Duration>,
        registry: &mut ClusterRegistry,
    ) -> ConfigSelector {
        ConfigSelector::from_virtual_host_with_filters(
            virtual_host,
            plugins,
            hcm_max_stream_duration,
            &[],
            registry,
        )
    }

    /// [`from_virtual_host`](Self::from_virtual_host) with an HCM's HTTP filters, which
    /// the selections carry with the route's overrides merged (A39).
    pub fn from_virtual_host_with_filters(
        virtual_host: &VirtualHost,
        plugins: &[ClusterSpecifierPlugin],
        hcm_max_stream_duration: Option<Duration>,
        http_filters: &[HttpFilter],
        registry: &mut ClusterRegistry,
    ) -> ConfigSelector {
        ConfigSelector::build(
            virtual_host,
            plugins,
            hcm_max_stream_duration,
            http_filters,
            registry,
            |_| None,
        )
    }

    fn build(
        vh: &VirtualHost,
        plugins: &[ClusterSpecifierPlugin],
        hcm_max_stream_duration: Option<Duration>,
        http_filters: &[HttpFilter],
        registry: &mut ClusterRegistry,
        cluster_error: impl Fn(&str) -> Option<Status>,
    ) -> ConfigSelector {
        let mut targets = Targets {
            registry,
            plugins,
            http_filters,
            virtual_host: vh,
            cluster_error,
            issued: DetHashMap::default(),
        };
        let entries = vh
            .routes
            .iter()
            .enumerate()
            .map(|(index, route)| {
                let (action, retry_policy, timeout_cap) = match &route.action {
                    RouteAction::Forward(f) => (
                        targets.action(route, f),
                        f.retry_policy.clone().or_else(|| vh.retry_policy.clone()),
                        timeout_cap(
                            f.grpc_timeout_header_max,
                            f.max_stream_duration,
                            hcm_max_stream_duration,
                        ),
                    ),
                    RouteAction::NonForwarding | RouteAction::Unsupported => {
                        (Action::Inappropriate, None, None)
                    }
                };
                let filters = match &action {
                    Action::Single(_) => targets.filters(route, None),
                    Action::Inappropriate | Action::Weighted { .. } => None,
                };
                Arc::new(RouteEntry {
                    index,
                    route: route.clone(),
                    action,
                    retry_policy,
                    timeout_cap,
                    filters,
                })
            })
            .collect();
        ConfigSelector {
            virtual_host: vh.name.clone(),
            table: RouteTable::new(vh.routes.iter().map(|r| &r.matcher)),
            entries,
        }
    }

    /// The virtual host's name.
    pub fn virtual_host(&self) -> &str {
        &self.virtual_host
    }

    /// The compiled route table.
    pub fn route_table(&self) -> &RouteTable {
        &self.table
    }

    /// The clusters (and plugins) this selector can pick, as cluster manager child names.
    pub fn children(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .entries
            .iter()
            .flat_map(|e| match &e.action {
                Action::Inappropriate => &[][..],
                Action::Single(t) => std::slice::from_ref(t),
                Action::Weighted { targets, .. } => &targets[..],
            })
            .map(|t| t.handle.child_name())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Routes one RPC: `path` is the method path (`/pkg.Service/Method`), `metadata` the
    /// request headers, and `rng` the caller's random source (one `next_u32` per
    /// `runtime_fraction` evaluated, one per weighted-cluster draw).
    ///
    /// Errors are the statuses gRPC fails such RPCs with: UNAVAILABLE for no matching
    /// route, for a non-forwarding action, and for a cluster the xDS config could not
    /// resolve.
    pub fn select<M: Metadata + ?Sized, R: RandomSource + ?Sized>(
        &self,
        path: &str,
        metadata: &M,
        rng: &mut R,
    ) -> Result<Selection, Status> {
        let Some(index) = self.table.first_match(path, metadata, rng) else {
            return Err(Status::new(Code::UNAVAILABLE, NO_MATCHING_ROUTE));
        };
        let Some(entry) = self.entries.get(index) else {
            return Err(Status::new(Code::UNAVAILABLE, NO_MATCHING_ROUTE));
        };
        let (target, filters) = match &entry.action {
            Action::Inappropriate => {
                return Err(Status::new(Code::UNAVAILABLE, INAPPROPRIATE_ACTION));
            }
            Action::Single(t) => (t, &entry.filters),
            Action::Weighted {
                ends,
                targets,
                filters,
            } => {
                let total = ends.last().copied().unwrap_or(0);
                let key = ((u64::from(rng.next_u32()) * u64::from(total)) >> 32) as u32;
                let i = ends.partition_point(|&end| end <= key);
                match (targets.get(i), filters.get(i)) {
                    (Some(t), Some(f)) => (t, f),
                    _ => return Err(Status::new(Code::UNAVAILABLE, INAPPROPRIATE_ACTION)),
                }
            }
        };
        if let Some(error) = &target.error {
            return Err(error.clone());
        }
        Ok(Selection {
            entry: entry.clone(),
            cluster: target.handle.clone(),
            filters: filters.clone(),
        })
    }
}
