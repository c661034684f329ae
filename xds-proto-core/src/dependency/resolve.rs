//! Turning the watched state into an [`XdsConfig`]: the listener's HCM, its route
//! configuration (inline or from RDS), the chosen virtual host's clusters, and the
//! cluster graph walked depth first (EDS and LOGICAL_DNS leaves, aggregate clusters with
//! cycle and depth checks). The walk starts the watches it needs and records which ones
//! it used, so that the caller can cancel the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{
    ClusterConfig, ClusterResolution, MAX_AGGREGATE_CLUSTER_DEPTH, XdsConfig, XdsDependencyManager,
    context_error, invalid,
};
use crate::client::{XdsClient, XdsError};
use crate::lrs::ClusterLoadStats;
use crate::resource::cluster::{ClusterResource, ClusterType};
use crate::resource::listener::RouteSource;
use crate::resource::listener::{HttpConnectionManager, ListenerKind, ListenerResource};
use crate::resource::route::{ClusterSpecifier, RouteAction, RouteConfigResource, VirtualHost};
use crate::selector::select_virtual_host;

/// Where a cluster's resolution stands.
#[derive(Clone, Debug)]
enum Resolution {
    /// A resource it depends on has not arrived.
    Pending,
    /// Its leaf clusters, in priority order.
    Leaves(Vec<String>),
    /// It cannot be used, and why.
    Failed(String),
}

/// One walk of the cluster graph.
#[derive(Default)]
struct Walk {
    /// The CDS and EDS names the walk used (every other cluster watch is cancelled).
    cds: BTreeSet<String>,
    eds: BTreeSet<String>,
    /// Each cluster's entry in the config.
    out: BTreeMap<String, Result<ClusterConfig, XdsError>>,
    /// Clusters already resolved in this walk (an aggregate graph may share children).
    memo: BTreeMap<String, Resolution>,
    /// No resource the config needs is still missing.
    ready: bool,
}

impl XdsDependencyManager {
    /// Recomputes the config from the watched state: starts and cancels watches, and
    /// emits when everything is resolved.
    pub(super) fn update(&mut self, client: &mut XdsClient) {
        let listener = match self.lds.as_ref().and_then(|s| s.state.clone()) {
            None => return,
            Some(Err(e)) => {
                let e = context_error("Listener", &self.listener_name, &e);
                return self.fail(client, e, false);
            }
            Some(Ok(listener)) => listener,
        };
        let ListenerKind::Client(hcm) = &listener.kind else {
            let e = invalid(format!(
                "Listener {:?} is not an API listener (it is a server listener)",
                self.listener_name
            ));
            return self.fail(client, e, false);
        };
        let Some(route_config) = self.route_config(client, &listener, hcm) else {
            return;
        };
        let Some(virtual_host_index) =
            select_virtual_host(&route_config.virtual_hosts, &self.authority)
        else {
            let e = invalid(format!(
                "could not find VirtualHost for {:?} in RouteConfiguration {:?}",
                self.authority, route_config.name
            ));
            return self.fail(client, e, true);
        };
        let roots = self.root_clusters(&route_config.virtual_hosts[virtual_host_index]);
        let mut walk = Walk {
            ready: true,
            ..Walk::default()
        };
        for root in &roots {
            self.resolve(client, root, 0, &mut Vec::new(), &mut walk);
        }
        self.retain_clusters(client, &walk.cds, &walk.eds);
        if !walk.ready {
            return;
        }
        let config = XdsConfig {
            listener: listener.clone(),
            route_config,
            virtual_host_index,
            max_stream_duration: hcm.max_stream_duration,
            http_filters: hcm.http_filters.clone(),
            clusters: walk.out,
        };
        self.emit(Ok(Arc::new(config)));
    }

    /// The listener's route configuration: inline, or from RDS (watched as needed).
    /// `None` while it is awaited, or after a failure has been emitted.
    fn route_config(
        &mut self,
        client: &mut XdsClient,
        listener: &Arc<ListenerResource>,
        hcm: &HttpConnectionManager,
    ) -> Option<Arc<RouteConfigResource>> {
        match &hcm.route_config {
            RouteSource::Inline(rc) => {
                self.cancel_rds(client);
                // The same listener keeps its copy, so an unchanged config compares equal.
                match &self.inline {
                    Some((l, rc)) if Arc::ptr_eq(l, listener) => Some(rc.clone()),
                    _ => {
                        let rc = Arc::new((**rc).clone());
                        self.inline = Some((listener.clone(), rc.clone()));
                        Some(rc)
                    }
                }
            }
            RouteSource::Rds(name) => {
                self.inline = None;
                self.ensure_rds(client, name);
                match self.rds.as_ref().and_then(|(_, s)| s.state.clone()) {
                    // Waiting for the (new) route configuration: keep the cluster watches
                    // the current config uses.
                    None => None,
                    Some(Err(e)) => {
                        let e = context_error("RouteConfiguration", name, &e);
                        self.fail(client, e, true);
                        None
                    }
                    Some(Ok(rc)) => Some(rc),
                }
            }
        }
    }

    /// The clusters the virtual host's routes send to, and those subscribed explicitly.
    fn root_clusters(&self, virtual_host: &VirtualHost) -> BTreeSet<String> {
        let mut roots: BTreeSet<String> = self.subscriptions.keys().cloned().collect();
        for route in &virtual_host.routes {
            if let RouteAction::Forward(f) = &route.action {
                match &f.cluster {
                    ClusterSpecifier::Cluster(name) => {
                        roots.insert(name.clone());
                    }
                    ClusterSpecifier::WeightedClusters(wcs) => {
                        roots.extend(wcs.iter().map(|wc| wc.name.clone()));
                    }
                    ClusterSpecifier::ClusterSpecifierPlugin(_) => {}
                }
            }
        }
        roots
    }

    /// Resolves one cluster (recursively for aggregates), watching what it needs.
    fn resolve(
        &mut self,
        client: &mut XdsClient,
        name: &str,
        depth: usize,
        stack: &mut Vec<String>,
        walk: &mut Walk,
    ) -> Resolution {
        if let Some(done) = walk.memo.get(name) {
            return done.clone();
        }
        if depth > MAX_AGGREGATE_CLUSTER_DEPTH {
            return Resolution::Failed(format!(
                "aggregate cluster graph exceeds the maximum depth of {MAX_AGGREGATE_CLUSTER_DEPTH}"
            ));
        }
        walk.cds.insert(name.to_owned());
        self.ensure_cds(client, name);
        let resolution = match self.cds.get(name).and_then(|s| s.state.clone()) {
            None => Resolution::Pending,
            Some(Err(e)) => failed(walk, name, context_error("Cluster", name, &e)),
            Some(Ok(cluster)) => match &cluster.cluster_type {
                ClusterType::Eds { service_name } => {
                    let eds_name = service_name.clone().unwrap_or_else(|| name.to_owned());
                    self.resolve_eds(client, name, &cluster, eds_name, walk)
                }
                ClusterType::LogicalDns { host, port } => {
                    let children = ClusterResolution::LogicalDns {
                        host: host.clone(),
                        port: *port,
                    };
                    let load_stats = load_stats(client, name, &cluster);
                    leaf(walk, name, cluster.clone(), children, load_stats)
                }
                ClusterType::Aggregate { clusters } => {
                    stack.push(name.to_owned());
                    let children = self.resolve_children(client, clusters, depth, stack, walk);
                    stack.pop();
                    aggregate(walk, name, &cluster, children)
                }
            },
        };
        match resolution {
            Resolution::Pending => walk.ready = false,
            ref done => {
                walk.memo.insert(name.to_owned(), done.clone());
            }
        }
        resolution
    }

    /// An EDS cluster: resolved once its endpoints (or their error) have arrived.
    fn resolve_eds(
        &mut self,
        client: &mut XdsClient,
        name: &str,
        cluster: &Arc<ClusterResource>,
        eds_name: String,
        walk: &mut Walk,
    ) -> Resolution {
        walk.eds.insert(eds_name.clone());
        self.ensure_eds(client, &eds_name);
        let Some(state) = self.eds.get(&eds_name).and_then(|s| s.state.clone()) else {
            return Resolution::Pending;
        };
        // A74: an EDS failure stays inside the cluster as its resolution note.
        let (endpoints, resolution_note) = match state {
            Ok(e) => (Some(e), None),
            Err(e) => {
                let note = context_error("ClusterLoadAssignment", &eds_name, &e);
                (None, Some(note.status.message))
            }
        };
        let children = ClusterResolution::Endpoints {
            service_name: eds_name,
            endpoints,
            resolution_note,
        };
        let load_stats = load_stats(client, name, cluster);
        leaf(walk, name, cluster.clone(), children, load_stats)
    }

    /// The children of an aggregate cluster, depth first: their leaves (deduplicated, in
    /// priority order), the problems of those that failed, and whether any is pending.
    fn resolve_children(
        &mut self,
        client: &mut XdsClient,
        children: &[String],
        depth: usize,
        stack: &mut Vec<String>,
        walk: &mut Walk,
    ) -> Children {
        let mut out = Children::default();
        for child in children {
            if stack.iter().any(|s| s == child) {
                let path: Vec<String> = stack.iter().map(|s| format!("{s:?}")).collect();
                let cycle = format!("cycle {} -> {child:?}", path.join(" -> "));
                out.problems.push(cycle);
                continue;
            }
            match self.resolve(client, child, depth + 1, stack, walk) {
                Resolution::Pending => out.pending = true,
                Resolution::Leaves(leaves) => {
                    for l in leaves {
                        if !out.leaves.contains(&l) {
                            out.leaves.push(l);
                        }
                    }
                }
                Resolution::Failed(why) => out.problems.push(format!("{child:?}: {why}")),
            }
        }
        out
    }
}

/// What an aggregate cluster's children resolved to.
#[derive(Default)]
struct Children {
    leaves: Vec<String>,
    problems: Vec<String>,
    pending: bool,
}

/// The load counters of a leaf cluster that reports its load (`lrs_server: self`),
/// with its EDS service name as the CDS resource sets it.
fn load_stats(
    client: &mut XdsClient,
    name: &str,
    cluster: &ClusterResource,
) -> Option<ClusterLoadStats> {
    if !cluster.lrs_server {
        return None;
    }
    let service = match &cluster.cluster_type {
        ClusterType::Eds { service_name } => service_name.as_deref(),
        _ => None,
    };
    client.cluster_load_stats(name, service)
}

/// Records a leaf cluster's configuration.
fn leaf(
    walk: &mut Walk,
    name: &str,
    cluster: Arc<ClusterResource>,
    children: ClusterResolution,
    load_stats: Option<ClusterLoadStats>,
) -> Resolution {
    let config = ClusterConfig {
        cluster,
        children,
        load_stats,
    };
    walk.out.insert(name.to_owned(), Ok(config));
    Resolution::Leaves(vec![name.to_owned()])
}

/// Records a cluster's failure; the cluster's entry in the config is the error.
fn failed(walk: &mut Walk, name: &str, error: XdsError) -> Resolution {
    let message = error.status.message.clone();
    walk.out.insert(name.to_owned(), Err(error));
    Resolution::Failed(message)
}

/// An aggregate cluster from its children: pending while any is, failed when none
/// has a usable leaf.
fn aggregate(
    walk: &mut Walk,
    name: &str,
    cluster: &Arc<ClusterResource>,
    children: Children,
) -> Resolution {
    if children.pending {
        return Resolution::Pending;
    }
    if children.leaves.is_empty() {
        let e = invalid(format!(
            "aggregate cluster {name:?} has no usable leaf clusters: {}",
            children.problems.join("; ")
        ));
        return failed(walk, name, e);
    }
    let resolution = ClusterResolution::Aggregate {
        leaf_clusters: children.leaves.clone(),
    };
    let config = ClusterConfig {
        cluster: cluster.clone(),
        children: resolution,
        load_stats: None,
    };
    walk.out.insert(name.to_owned(), Ok(config));
    Resolution::Leaves(children.leaves)
}
