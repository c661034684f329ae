//! `xds`: watch xDS resources from a management server and print what arrives.
//!
//! ```text
//! cargo run -p xds-adapter-tokio --example xds                       # the built-in demo
//! cargo run -p xds-adapter-tokio --example xds -- --server 127.0.0.1:18000 \
//!     --node-id my-node --listener my-service                        # follow a listener
//! cargo run -p xds-adapter-tokio --example xds -- --bootstrap bootstrap.json --cds my-cluster
//! ```
//!
//! With no server given (no `--bootstrap`, no `--server`, no `GRPC_XDS_BOOTSTRAP` or
//! `GRPC_XDS_BOOTSTRAP_CONFIG`) it starts an embedded demo management server on
//! 127.0.0.1 serving a small mesh, follows its listener through RDS, CDS and EDS while
//! the demo server pushes updates, sends an invalid cluster, reports a resource error,
//! leaves a cluster missing, and restarts; then it dumps CSDS and exits.
//!
//! It prints each update as a summary (routes, clusters, endpoints with health and
//! weight), or the decoded resource as JSON with `--json`; NACKs with their reasons,
//! does-not-exist, resource errors, connectivity loss and recovery, and the server in
//! use. `--csds` dumps the client's CSDS view on exit (the response the CSDS service
//! gives), and `--csds-listen HOST:PORT` serves `ClientStatusDiscoveryService` while it
//! runs. Logs: `RUST_LOG=xds_adapter_common=debug`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use futures::stream::{AbortHandle, Abortable, BoxStream, SelectAll};
use serde_json::{Value, json};
use xds_adapter_tokio::xds_proto_core::pb::envoy::admin::v3::ClientResourceStatus;
use xds_adapter_tokio::xds_proto_core::pb::envoy::config::core::v3::HealthStatus;
use xds_adapter_tokio::xds_proto_core::pb::google::protobuf::Any;
use xds_adapter_tokio::xds_proto_core::resource::endpoint::EndpointsResource;
use xds_adapter_tokio::xds_proto_core::resource::listener::{
    ListenerKind, ListenerResource, RouteSource,
};
use xds_adapter_tokio::xds_proto_core::resource::route::{
    ClusterSpecifier, DomainPattern, PathMatcher, RouteAction, RouteConfigResource,
};
use xds_adapter_tokio::xds_proto_core::resource::{ClusterResource, ClusterType};
use xds_adapter_tokio::xds_proto_core::{Code, ErrorKind, StreamId, XdsError, XdsResourceType};
use xds_adapter_tokio::{
    Bootstrap, Cds, ChannelEvent, Client, ClientPool, CsdsServer, Eds, Lds, Rds, WatchStream,
    WatchUpdate, load_bootstrap_from_env,
};
use xds_test_server::resources::{self, PrefixRoute, RouteTarget};
use xds_test_server::{LoopbackServer, demo};

/// With `--json`, stdout carries only JSON documents; status lines go to stderr.
static JSON_MODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Prints a status line: to stdout, or to stderr in `--json` mode.
macro_rules! say {
    ($($arg:tt)*) => {
        if JSON_MODE.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!($($arg)*);
        } else {
            println!($($arg)*);
        }
    };
}

const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// Watch xDS resources and print every update.
#[derive(Parser, Debug)]
#[command(name = "xds", version, about)]
struct Args {
    /// Bootstrap file (default: GRPC_XDS_BOOTSTRAP or GRPC_XDS_BOOTSTRAP_CONFIG).
    #[arg(long, value_name = "FILE")]
    bootstrap: Option<String>,
    /// An xDS server to use with insecure credentials, instead of a bootstrap.
    #[arg(long, value_name = "HOST:PORT")]
    server: Option<String>,
    /// The node id to send with --server.
    #[arg(long, value_name = "ID", default_value = "xds-cli")]
    node_id: String,
    /// Follow the chain from this listener: LDS → RDS → CDS → EDS.
    #[arg(long, value_name = "NAME")]
    listener: Option<String>,
    /// Watch a listener (repeatable).
    #[arg(long, value_name = "NAME")]
    lds: Vec<String>,
    /// Watch a route configuration (repeatable).
    #[arg(long, value_name = "NAME")]
    rds: Vec<String>,
    /// Watch a cluster (repeatable).
    #[arg(long, value_name = "NAME")]
    cds: Vec<String>,
    /// Watch a cluster's endpoints (repeatable).
    #[arg(long, value_name = "NAME")]
    eds: Vec<String>,
    /// Print each decoded resource as JSON instead of a summary.
    #[arg(long)]
    json: bool,
    /// Dump the client's CSDS view on exit.
    #[arg(long)]
    csds: bool,
    /// Serve CSDS (envoy.service.status.v3.ClientStatusDiscoveryService) on this
    /// address while running, e.g. 127.0.0.1:18001 (port 0 picks a free one).
    #[arg(long, value_name = "HOST:PORT")]
    csds_listen: Option<String>,
    /// The data-plane target the client is for (its CSDS client_scope); default
    /// xds:///LISTENER with --listener, else xds-cli.
    #[arg(long, value_name = "TARGET")]
    target: Option<String>,
    /// Exit after this many seconds (default: 12 for the demo, otherwise run until Ctrl-C).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// The does-not-exist timeout in seconds (default 15; 3 for the demo).
    #[arg(long, value_name = "SECS")]
    resource_timeout: Option<f64>,
    /// Also print every ACK.
    #[arg(long, short)]
    verbose: bool,
}

/// Which of the four types a watch is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Lds,
    Rds,
    Cds,
    Eds,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Lds => "LDS",
            Kind::Rds => "RDS",
            Kind::Cds => "CDS",
            Kind::Eds => "EDS",
        }
    }
}

fn short_type(type_url: &str) -> &'static str {
    match type_url {
        LDS => "LDS",
        RDS => "RDS",
        CDS => "CDS",
        EDS => "EDS",
        _ => "?DS",
    }
}

/// A decoded resource of one of the four types.
#[derive(Clone, Debug)]
enum Resource {
    Listener(Arc<ListenerResource>),
    Routes(Arc<RouteConfigResource>),
    Cluster(Arc<ClusterResource>),
    Endpoints(Arc<EndpointsResource>),
}

/// An update of any watch.
struct Update {
    kind: Kind,
    name: String,
    event: Result<Resource, (bool, XdsError)>,
}

fn tag<T: XdsResourceType>(
    stream: WatchStream<T>,
    kind: Kind,
    wrap: fn(Arc<T::Value>) -> Resource,
) -> BoxStream<'static, Update> {
    let name = stream.name().to_string();
    stream
        .map(move |u| Update {
            kind,
            name: name.clone(),
            event: match u {
                WatchUpdate::Changed(Ok(v)) => Ok(wrap(v)),
                WatchUpdate::Changed(Err(e)) => Err((false, e)),
                WatchUpdate::AmbientError(e) => Err((true, e)),
            },
        })
        .boxed()
}

/// The watches, keyed by type and name; a watch is cancelled by aborting its stream
/// (dropping it cancels the watch in the client).
struct Watches {
    client: Client,
    streams: SelectAll<BoxStream<'static, Update>>,
    handles: HashMap<(Kind, String), AbortHandle>,
}

impl Watches {
    async fn ensure(&mut self, kind: Kind, name: &str) {
        if self.handles.contains_key(&(kind, name.to_string())) {
            return;
        }
        let stream = match kind {
            Kind::Lds => self
                .client
                .watch::<Lds>(name)
                .await
                .map(|s| tag(s, kind, Resource::Listener)),
            Kind::Rds => self
                .client
                .watch::<Rds>(name)
                .await
                .map(|s| tag(s, kind, Resource::Routes)),
            Kind::Cds => self
                .client
                .watch::<Cds>(name)
                .await
                .map(|s| tag(s, kind, Resource::Cluster)),
            Kind::Eds => self
                .client
                .watch::<Eds>(name)
                .await
                .map(|s| tag(s, kind, Resource::Endpoints)),
        };
        match stream {
            Ok(stream) => {
                let (handle, registration) = AbortHandle::new_pair();
                self.streams
                    .push(Abortable::new(stream, registration).boxed());
                self.handles.insert((kind, name.to_string()), handle);
            }
            Err(e) => say!("{} cannot watch {} {name:?}: {e}", stamp(), kind.label()),
        }
    }

    fn cancel(&mut self, kind: Kind, name: &str) {
        if let Some(h) = self.handles.remove(&(kind, name.to_string())) {
            h.abort();
        }
    }

    fn names(&self, kind: Kind) -> BTreeSet<String> {
        self.handles
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| n.clone())
            .collect()
    }
}

/// What the chain follower knows, to decide which names to watch.
#[derive(Default)]
struct Chain {
    root: Option<String>,
    fixed: BTreeSet<(Kind, String)>,
    listeners: BTreeMap<String, Arc<ListenerResource>>,
    routes: BTreeMap<String, Arc<RouteConfigResource>>,
    clusters: BTreeMap<String, Arc<ClusterResource>>,
}

fn route_clusters(rc: &RouteConfigResource, out: &mut BTreeSet<String>) {
    for vh in &rc.virtual_hosts {
        for r in &vh.routes {
            if let RouteAction::Forward(a) = &r.action {
                match &a.cluster {
                    ClusterSpecifier::Cluster(c) => {
                        out.insert(c.clone());
                    }
                    ClusterSpecifier::WeightedClusters(ws) => {
                        out.extend(ws.iter().map(|w| w.name.clone()))
                    }
                    ClusterSpecifier::ClusterSpecifierPlugin(_) => {}
                }
            }
        }
    }
}

impl Chain {
    /// The names each type should be watched under, given what is known.
    fn wanted(&self) -> BTreeSet<(Kind, String)> {
        let mut want = self.fixed.clone();
        let Some(root) = &self.root else { return want };
        want.insert((Kind::Lds, root.clone()));
        let mut clusters = BTreeSet::new();
        if let Some(l) = self.listeners.get(root)
            && let ListenerKind::Client(hcm) = &l.kind
        {
            match &hcm.route_config {
                RouteSource::Rds(name) => {
                    want.insert((Kind::Rds, name.clone()));
                    if let Some(rc) = self.routes.get(name) {
                        route_clusters(rc, &mut clusters);
                    }
                }
                RouteSource::Inline(rc) => route_clusters(rc, &mut clusters),
            }
        }
        // Aggregate clusters pull in their children (bounded depth: A37 allows 16).
        for _ in 0..16 {
            let mut more = BTreeSet::new();
            for c in &clusters {
                if let Some(ClusterType::Aggregate { clusters: children }) =
                    self.clusters.get(c).map(|c| &c.cluster_type)
                {
                    more.extend(children.iter().filter(|n| !clusters.contains(*n)).cloned());
                }
            }
            if more.is_empty() {
                break;
            }
            clusters.extend(more);
        }
        for c in &clusters {
            want.insert((Kind::Cds, c.clone()));
            if let Some(ClusterType::Eds { service_name }) =
                self.clusters.get(c).map(|c| &c.cluster_type)
            {
                want.insert((Kind::Eds, service_name.clone().unwrap_or_else(|| c.clone())));
            }
        }
        want
    }

    fn apply(&mut self, u: &Update) {
        match &u.event {
            Ok(Resource::Listener(l)) => {
                self.listeners.insert(u.name.clone(), l.clone());
            }
            Ok(Resource::Routes(r)) => {
                self.routes.insert(u.name.clone(), r.clone());
            }
            Ok(Resource::Cluster(c)) => {
                self.clusters.insert(u.name.clone(), c.clone());
            }
            Ok(Resource::Endpoints(_)) | Err((true, _)) => {}
            Err((false, _)) => match u.kind {
                Kind::Lds => drop(self.listeners.remove(&u.name)),
                Kind::Rds => drop(self.routes.remove(&u.name)),
                Kind::Cds => drop(self.clusters.remove(&u.name)),
                Kind::Eds => {}
            },
        }
    }
}

async fn reconcile(chain: &Chain, watches: &mut Watches) {
    let want = chain.wanted();
    for kind in [Kind::Lds, Kind::Rds, Kind::Cds, Kind::Eds] {
        for name in watches.names(kind) {
            if !want.contains(&(kind, name.clone())) {
                say!(
                    "{} {} {name}: no longer referenced; watch cancelled",
                    stamp(),
                    kind.label()
                );
                watches.cancel(kind, &name);
            }
        }
    }
    for (kind, name) in want {
        watches.ensure(kind, &name).await;
    }
}

// ----- printing -----

static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();

fn stamp() -> String {
    let start = START.get_or_init(tokio::time::Instant::now);
    format!("[{:6.2}s]", start.elapsed().as_secs_f64())
}

const INDENT: &str = "           ";

fn domain(d: &DomainPattern) -> String {
    match d {
        DomainPattern::Exact(s) => s.clone(),
        DomainPattern::Suffix(s) => format!("*{s}"),
        DomainPattern::Prefix(s) => format!("{s}*"),
        DomainPattern::Any => "*".into(),
    }
}

fn path(p: &PathMatcher) -> String {
    match p {
        PathMatcher::Prefix(s) => format!("prefix {s:?}"),
        PathMatcher::Path(s) => format!("path {s:?}"),
        PathMatcher::SafeRegex(r) => format!("regex {:?}", r.pattern()),
    }
}

fn target(a: &RouteAction) -> String {
    match a {
        RouteAction::Forward(f) => match &f.cluster {
            ClusterSpecifier::Cluster(c) => c.clone(),
            ClusterSpecifier::WeightedClusters(ws) => {
                let total: u64 = ws.iter().map(|w| u64::from(w.weight)).sum::<u64>().max(1);
                ws.iter()
                    .map(|w| {
                        format!(
                            "{} {:.0}%",
                            w.name,
                            100.0 * f64::from(w.weight) / total as f64
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            }
            ClusterSpecifier::ClusterSpecifierPlugin(p) => format!("plugin {p}"),
        },
        RouteAction::NonForwarding => "(non-forwarding)".into(),
        RouteAction::Unsupported => "(unsupported action: RPCs fail)".into(),
    }
}

fn summary(name: &str, r: &Resource) -> String {
    match r {
        Resource::Listener(l) => match &l.kind {
            ListenerKind::Client(hcm) => {
                let routes = match &hcm.route_config {
                    RouteSource::Rds(n) => format!("routes from RDS {n:?}"),
                    RouteSource::Inline(rc) => {
                        format!("{} inline virtual hosts", rc.virtual_hosts.len())
                    }
                };
                let filters: Vec<&str> = hcm.http_filters.iter().map(|f| f.name.as_str()).collect();
                format!(
                    "LDS {name}: client listener, {routes}, filters [{}]",
                    filters.join(", ")
                )
            }
            ListenerKind::Server {
                address,
                port,
                filter_chain_count,
                ..
            } => {
                format!(
                    "LDS {name}: server listener on {address}:{port}, {filter_chain_count} filter chains"
                )
            }
        },
        Resource::Routes(rc) => {
            let mut out = format!("RDS {name}: {} virtual hosts", rc.virtual_hosts.len());
            for vh in &rc.virtual_hosts {
                let domains: Vec<String> = vh.domains.iter().map(domain).collect();
                out.push_str(&format!(
                    "\n{INDENT}vhost {} [{}]",
                    vh.name,
                    domains.join(", ")
                ));
                for r in &vh.routes {
                    out.push_str(&format!(
                        "\n{INDENT}  {} → {}",
                        path(&r.matcher.path),
                        target(&r.action)
                    ));
                }
            }
            out
        }
        Resource::Cluster(c) => {
            let ty = match &c.cluster_type {
                ClusterType::Eds {
                    service_name: Some(s),
                } => format!("EDS (service {s})"),
                ClusterType::Eds { service_name: None } => "EDS".into(),
                ClusterType::LogicalDns { host, port } => format!("LOGICAL_DNS {host}:{port}"),
                ClusterType::Aggregate { clusters } => {
                    format!("aggregate of [{}]", clusters.join(", "))
                }
            };
            format!(
                "CDS {name}: {ty}, lb {:?}, max_requests {}",
                c.lb_policy, c.max_requests
            )
        }
        Resource::Endpoints(e) => {
            let all: Vec<_> = e
                .priorities
                .iter()
                .flat_map(|p| &p.localities)
                .flat_map(|l| &l.endpoints)
                .collect();
            let usable = all.iter().filter(|e| e.health_status.is_usable()).count();
            let localities: usize = e.priorities.iter().map(|p| p.localities.len()).sum();
            let mut out = format!(
                "EDS {name}: {} endpoints ({usable} usable) in {localities} localities",
                all.len()
            );
            for (i, p) in e.priorities.iter().enumerate() {
                for l in &p.localities {
                    let loc = &l.locality;
                    out.push_str(&format!(
                        "\n{INDENT}priority {i} {}/{}{} weight {}",
                        loc.region,
                        loc.zone,
                        if loc.sub_zone.is_empty() {
                            String::new()
                        } else {
                            format!("/{}", loc.sub_zone)
                        },
                        l.weight
                    ));
                    for ep in &l.endpoints {
                        out.push_str(&format!(
                            "\n{INDENT}  {:<22} {:<10} weight {}",
                            ep.address.to_string(),
                            format!("{:?}", ep.health_status).to_uppercase(),
                            ep.weight
                        ));
                    }
                }
            }
            out
        }
    }
}

fn to_json(r: &Resource) -> Value {
    match r {
        Resource::Listener(l) => {
            let kind = match &l.kind {
                ListenerKind::Client(hcm) => json!({
                    "client": {
                        "route_config": match &hcm.route_config {
                            RouteSource::Rds(n) => json!({"rds": n}),
                            RouteSource::Inline(rc) => json!({"inline": routes_json(rc)}),
                        },
                        "http_filters": hcm.http_filters.iter().map(|f| json!({
                            "name": f.name, "type_url": f.config.type_url, "is_optional": f.is_optional,
                        })).collect::<Vec<_>>(),
                        "max_stream_duration": hcm.max_stream_duration.map(|d| d.as_secs_f64()),
                    }
                }),
                ListenerKind::Server {
                    address,
                    port,
                    filter_chain_count,
                    has_default_filter_chain,
                } => json!({
                    "server": {"address": address, "port": port, "filter_chain_count": filter_chain_count,
                               "has_default_filter_chain": has_default_filter_chain}
                }),
            };
            json!({"name": l.name, "kind": kind})
        }
        Resource::Routes(rc) => routes_json(rc),
        Resource::Cluster(c) => json!({
            "name": c.name,
            "cluster_type": match &c.cluster_type {
                ClusterType::Eds { service_name } => json!({"eds": {"service_name": service_name}}),
                ClusterType::LogicalDns { host, port } => json!({"logical_dns": {"host": host, "port": port}}),
                ClusterType::Aggregate { clusters } => json!({"aggregate": clusters}),
            },
            "lb_policy": format!("{:?}", c.lb_policy),
            "lrs_server": c.lrs_server,
            "max_requests": c.max_requests,
            "tls": c.tls.as_ref().map(|t| json!({"sni": t.sni})),
        }),
        Resource::Endpoints(e) => json!({
            "cluster_name": e.cluster_name,
            "priorities": e.priorities.iter().map(|p| p.localities.iter().map(|l| json!({
                "locality": {"region": l.locality.region, "zone": l.locality.zone, "sub_zone": l.locality.sub_zone},
                "weight": l.weight,
                "endpoints": l.endpoints.iter().map(|ep| json!({
                    "address": ep.address.to_string(),
                    "additional_addresses": ep.additional_addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                    "health_status": format!("{:?}", ep.health_status).to_uppercase(),
                    "weight": ep.weight,
                    "hostname": ep.hostname,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>()).collect::<Vec<_>>(),
            "drop_overloads": e.drop_overloads.iter().map(|d| json!({
                "category": d.category, "drop_per_million": d.drop_per_million,
            })).collect::<Vec<_>>(),
        }),
    }
}

fn routes_json(rc: &RouteConfigResource) -> Value {
    json!({
        "name": rc.name,
        "virtual_hosts": rc.virtual_hosts.iter().map(|vh| json!({
            "name": vh.name,
            "domains": vh.domains.iter().map(domain).collect::<Vec<_>>(),
            "routes": vh.routes.iter().map(|r| json!({
                "match": path(&r.matcher.path),
                "case_sensitive": r.matcher.case_sensitive,
                "headers": r.matcher.headers.len(),
                "action": match &r.action {
                    RouteAction::Forward(f) => json!({
                        "cluster": match &f.cluster {
                            ClusterSpecifier::Cluster(c) => json!(c),
                            ClusterSpecifier::WeightedClusters(ws) => json!(ws.iter().map(|w| json!({
                                "name": w.name, "weight": w.weight,
                            })).collect::<Vec<_>>()),
                            ClusterSpecifier::ClusterSpecifierPlugin(p) => json!({"plugin": p}),
                        },
                        "timeout": f.timeout.map(|d| d.as_secs_f64()),
                        "max_stream_duration": f.effective_max_stream_duration().map(|d| d.as_secs_f64()),
                        "retry_policy": f.retry_policy.as_ref().map(|p| json!({
                            "num_retries": p.num_retries, "max_attempts": p.max_attempts,
                        })),
                        "hash_policies": f.hash_policies.len(),
                    }),
                    RouteAction::NonForwarding => json!("non_forwarding"),
                    RouteAction::Unsupported => json!("unsupported"),
                },
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// What has been printed, to keep repeated errors and the per-resource echo of a
/// connectivity loss off the screen.
#[derive(Default)]
struct Printer {
    json: bool,
    verbose: bool,
    /// The connection is known to be down.
    lost: bool,
    /// Streams that started (a stream that never did failed to connect, which the
    /// connect failure already reported).
    started: BTreeSet<StreamId>,
    /// The last error printed per resource, until a value arrives.
    last_error: HashMap<(Kind, String), String>,
}

impl Printer {
    fn update(&mut self, u: &Update) {
        let label = u.kind.label();
        let key = (u.kind, u.name.clone());
        match &u.event {
            Ok(r) => {
                self.last_error.remove(&key);
                if self.json {
                    let doc = json!({"type": label, "name": u.name, "resource": to_json(r)});
                    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
                } else {
                    say!("{} {}", stamp(), summary(&u.name, r));
                }
            }
            Err((ambient, e)) => {
                // A lost connection is reported once, by the channel; resources that keep
                // their value need no line each.
                if e.kind == ErrorKind::Connectivity
                    && (*ambient || self.last_error.contains_key(&key))
                {
                    return;
                }
                let what = match e.kind {
                    ErrorKind::DoesNotExist => "DOES NOT EXIST",
                    ErrorKind::Timeout => "timed out",
                    ErrorKind::Invalid => "REJECTED (NACKed)",
                    ErrorKind::DeletionIgnored => "deleted by the server; cached value kept",
                    ErrorKind::Connectivity => "no value yet, server unreachable",
                    ErrorKind::ServerReported => "RESOURCE ERROR from the server",
                    _ => "ERROR",
                };
                let keep = if *ambient {
                    " (the last good value stays in use)"
                } else {
                    ""
                };
                let line = format!("{label} {}: {what}{keep}: {}", u.name, e.status.message);
                if self.last_error.get(&key) == Some(&line) {
                    return;
                }
                say!("{} {line}", stamp());
                self.last_error.insert(key, line);
            }
        }
    }

    fn channel_event(&mut self, e: &ChannelEvent) {
        match e {
            ChannelEvent::StreamRequested {
                server_uri, stream, ..
            } if self.verbose || !self.lost => {
                say!("{} server {server_uri}: opening ADS {stream}", stamp(),)
            }
            ChannelEvent::Connecting { server_uri, .. } if self.verbose => {
                say!("{} server {server_uri}: connecting", stamp())
            }
            ChannelEvent::Connected {
                server_uri,
                reused: false,
                ..
            } => {
                say!(
                    "{} server {server_uri}: connected; this is the xDS server in use",
                    stamp()
                );
            }
            ChannelEvent::StreamStarted { stream, .. } => {
                self.started.insert(*stream);
            }
            ChannelEvent::ConnectFailed {
                server_uri, reason, ..
            } => {
                if self.lost {
                    say!(
                        "{} server {server_uri}: reconnect failed: {reason}",
                        stamp()
                    );
                } else {
                    say!(
                        "{} CONNECTIVITY LOST: cannot connect to {server_uri}: {reason}",
                        stamp()
                    );
                }
                self.lost = true;
            }
            ChannelEvent::StreamClosed {
                server_uri,
                stream,
                status,
                ..
            } => {
                if !self.started.remove(stream) {
                    return; // never started: the connect failure said why
                }
                if status.code != Code::OK && !self.lost {
                    say!(
                        "{} CONNECTIVITY LOST: ADS stream to {server_uri} failed: {status}",
                        stamp()
                    );
                    self.lost = true;
                } else {
                    say!(
                        "{} server {server_uri}: ADS stream closed: {status}",
                        stamp()
                    );
                }
            }
            ChannelEvent::ResponseReceived { server_uri, .. } if self.lost => {
                self.lost = false;
                self.last_error
                    .retain(|_, line| !line.contains("server unreachable"));
                say!(
                    "{} CONNECTIVITY RECOVERED: server {server_uri} is responding again",
                    stamp()
                );
            }
            ChannelEvent::RequestSent {
                type_url,
                version,
                nonce,
                nack: Some(detail),
                ..
            } => {
                say!(
                    "{} NACK {} (keeping version {:?}, response {nonce}): {detail}",
                    stamp(),
                    short_type(type_url),
                    version
                );
            }
            ChannelEvent::RequestSent {
                type_url,
                version,
                nonce,
                resource_names,
                nack: None,
                ..
            } if self.verbose => {
                if nonce.is_empty() {
                    say!(
                        "{} subscribe {} {:?}",
                        stamp(),
                        short_type(type_url),
                        resource_names
                    );
                } else {
                    say!(
                        "{} ACK {} version {version} ({nonce})",
                        stamp(),
                        short_type(type_url)
                    );
                }
            }
            ChannelEvent::ConnectionClosed {
                server_uri,
                error: Some(error),
                ..
            } if self.verbose => {
                say!(
                    "{} server {server_uri}: connection closed: {error}",
                    stamp()
                )
            }
            _ => {}
        }
    }
}

/// Dumps the pool's CSDS response: the same `ClientStatusResponse` the
/// `ClientStatusDiscoveryService` serves (`--csds-listen`), one block per target.
async fn print_csds(pool: &ClientPool, as_json: bool) {
    let response = pool.csds_response().await;
    if as_json {
        let doc: Vec<Value> = response
            .config
            .iter()
            .flat_map(|config| {
                config.generic_xds_configs.iter().map(|c| {
                    json!({
                        "client_scope": config.client_scope,
                        "type_url": c.type_url, "name": c.name, "version_info": c.version_info,
                        "client_status": c.client_status, "bytes": c.xds_config.as_ref().map(|a| a.value.len()),
                        "error_state": c.error_state.as_ref().map(|e| json!({"details": e.details, "version_info": e.version_info})),
                    })
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"csds": doc})).unwrap_or_default()
        );
        return;
    }
    for config in &response.config {
        println!(
            "\nCSDS of {} ({} resources):",
            config.client_scope,
            config.generic_xds_configs.len()
        );
        println!(
            "  {:<4} {:<22} {:<15} {:<8} error",
            "type", "name", "status", "version"
        );
        for r in &config.generic_xds_configs {
            let status = ClientResourceStatus::try_from(r.client_status)
                .map_or("UNKNOWN", |s| s.as_str_name());
            let error = r
                .error_state
                .as_ref()
                .map(|e| e.details.as_str())
                .unwrap_or_default();
            println!(
                "  {:<4} {:<22} {:<15} {:<8} {error}",
                short_type(&r.type_url),
                r.name,
                status,
                r.version_info
            );
        }
    }
}

// ----- the demo -----

/// The demo mesh plus two clusters that go wrong: `legacy` is never served (it will
/// not exist) and `beta` gets a TP3 resource error.
fn demo_routes(api_v2_weight: u32) -> Any {
    resources::route_config_with(
        demo::ROUTE_CONFIG,
        &[demo::LISTENER],
        &[
            PrefixRoute {
                prefix: "/legacy".into(),
                target: RouteTarget::Cluster("legacy".into()),
            },
            PrefixRoute {
                prefix: "/beta".into(),
                target: RouteTarget::Cluster("beta".into()),
            },
            PrefixRoute {
                prefix: "/api".into(),
                target: RouteTarget::Weighted(vec![
                    ("api-v1".into(), 100 - api_v2_weight),
                    ("api-v2".into(), api_v2_weight),
                ]),
            },
            PrefixRoute {
                prefix: "/".into(),
                target: RouteTarget::Cluster("web".into()),
            },
        ],
    )
}

fn demo_note(text: &str) {
    say!("{} ── demo server: {text}", stamp());
}

/// Serves the mesh, then plays a timeline of changes and failures.
async fn run_demo_script(server: Arc<LoopbackServer>) {
    let sleep_until = |secs: f64| {
        let start = *START.get_or_init(tokio::time::Instant::now);
        tokio::time::sleep_until(start + Duration::from_secs_f64(secs))
    };
    sleep_until(2.5).await;
    demo_note("EDS v2: web scales to 4 endpoints, one UNHEALTHY");
    server.set_resources(EDS, "2", demo::all_endpoints(2));
    sleep_until(4.0).await;
    demo_note("CDS v2: api-v2 becomes STATIC (invalid for gRPC)");
    let mut clusters = vec![
        resources::cluster("web"),
        resources::cluster("api-v1"),
        resources::invalid_cluster("api-v2"),
    ];
    server.set_resources(CDS, "2", clusters.clone());
    sleep_until(5.5).await;
    demo_note("CDS v3 fixes api-v2; RDS v2 shifts /api to 50% api-v2");
    clusters[2] = resources::cluster_with("api-v2", 2048);
    server.set_resources(CDS, "3", clusters);
    server.set_resources(RDS, "2", vec![demo_routes(50)]);
    sleep_until(7.0).await;
    demo_note("crashing (down for 2 s)");
    server.stop().await;
    sleep_until(9.0).await;
    demo_note("back on the same port");
    server.restart();
    sleep_until(10.5).await;
    demo_note("EDS v3: api-v1 drained endpoint removed");
    let mut eds = demo::all_endpoints(2);
    eds[1] = resources::endpoints_with(
        "api-v1",
        &[resources::Locality {
            region: "eu-west".into(),
            zone: "eu-west-1a".into(),
            weight: 1,
            priority: 0,
            hosts: vec![resources::Host {
                address: "10.0.3.10".into(),
                port: 9090,
                health: HealthStatus::Healthy,
                weight: Some(1),
            }],
        }],
    );
    server.set_resources(EDS, "3", eds);
}

fn start_demo_server() -> Arc<LoopbackServer> {
    let server = LoopbackServer::start();
    server.set_resources(LDS, "1", vec![demo::listener()]);
    server.set_resources(RDS, "1", vec![demo_routes(10)]);
    server.set_resources(CDS, "1", demo::clusters());
    server.set_resource_errors(
        CDS,
        "1",
        vec![resources::resource_error(
            "beta",
            Code::PERMISSION_DENIED,
            "cluster beta is not visible to this node",
        )],
    );
    server.set_resources(EDS, "1", demo::all_endpoints(1));
    Arc::new(server)
}

// ----- main -----

enum Source {
    Bootstrap(Box<Bootstrap>),
    Demo,
}

fn choose_source(args: &Args) -> Result<Source, String> {
    if let Some(path) = &args.bootstrap {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        return Bootstrap::from_json_str(&text)
            .map(|b| Source::Bootstrap(Box::new(b)))
            .map_err(|e| format!("{path}: {e}"));
    }
    if let Some(server) = &args.server {
        let json = json!({
            "xds_servers": [{"server_uri": server, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
            "node": {"id": args.node_id, "cluster": "xds-cli"},
        });
        return Bootstrap::from_json_value(&json)
            .map(|b| Source::Bootstrap(Box::new(b)))
            .map_err(|e| e.to_string());
    }
    match load_bootstrap_from_env() {
        Ok(b) => Ok(Source::Bootstrap(Box::new(b))),
        Err(e) if e.kind == xds_adapter_tokio::xds_proto_core::bootstrap::BootstrapErrorKind::NotConfigured => {
            Ok(Source::Demo)
        }
        Err(e) => Err(format!("bootstrap from the environment: {e}")),
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    JSON_MODE.store(args.json, std::sync::atomic::Ordering::Relaxed);
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    START.get_or_init(tokio::time::Instant::now);
    let source = match choose_source(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xds: {e}");
            std::process::exit(2);
        }
    };
    let demo = matches!(source, Source::Demo);
    let (bootstrap, demo_server) = match source {
        Source::Bootstrap(b) => (*b, None),
        Source::Demo => {
            let server = start_demo_server();
            say!(
                "{} no xDS server given: started the demo management server on {}",
                stamp(),
                server.uri()
            );
            let json = server.bootstrap_json("xds-cli-demo", None);
            (
                Bootstrap::from_json_str(&json).expect("demo bootstrap"),
                Some(server),
            )
        }
    };
    let mut chain = Chain {
        root: args
            .listener
            .clone()
            .or_else(|| demo.then(|| demo::LISTENER.to_string())),
        ..Chain::default()
    };
    for (kind, names) in [
        (Kind::Lds, &args.lds),
        (Kind::Rds, &args.rds),
        (Kind::Cds, &args.cds),
        (Kind::Eds, &args.eds),
    ] {
        chain.fixed.extend(names.iter().map(|n| (kind, n.clone())));
    }
    if chain.root.is_none() && chain.fixed.is_empty() {
        eprintln!("xds: nothing to watch: give --listener NAME, or --lds/--rds/--cds/--eds NAME");
        std::process::exit(2);
    }
    let resource_timeout = args.resource_timeout.or(demo.then_some(3.0));
    let mut builder = Client::builder(bootstrap).user_agent("xds-cli", env!("CARGO_PKG_VERSION"));
    if let Some(t) = resource_timeout {
        builder = builder.resource_timeout(Duration::from_secs_f64(t));
    }
    let pool = match builder.build_pool() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xds: {e}");
            std::process::exit(2);
        }
    };
    let target = args.target.clone().unwrap_or_else(|| match &chain.root {
        Some(root) => format!("xds:///{root}"),
        None => "xds-cli".to_string(),
    });
    let client = pool.get_or_create(&target);
    let csds_server = match &args.csds_listen {
        Some(addr) => match CsdsServer::serve(pool.clone(), addr.as_str()).await {
            Ok(server) => {
                say!(
                    "{} serving CSDS on {} (client_scope {target:?})",
                    stamp(),
                    server.local_addr()
                );
                Some(server)
            }
            Err(e) => {
                eprintln!("xds: cannot serve CSDS on {addr}: {e}");
                std::process::exit(2);
            }
        },
        None => None,
    };
    let servers: Vec<&str> = client
        .bootstrap()
        .xds_servers
        .iter()
        .map(|s| s.server_uri.as_str())
        .collect();
    say!(
        "{} xDS servers from the bootstrap: {}",
        stamp(),
        servers.join(", ")
    );
    if let Some(root) = &chain.root {
        say!(
            "{} following listener {root:?}: LDS → RDS → CDS → EDS",
            stamp()
        );
    }

    let mut channel_events = client.channel_events();
    let mut watches = Watches {
        client: client.clone(),
        streams: SelectAll::new(),
        handles: HashMap::new(),
    };
    reconcile(&chain, &mut watches).await;

    let script = demo_server
        .clone()
        .map(|s| tokio::spawn(run_demo_script(s)));
    let duration = args.duration.or(demo.then_some(12.0));
    let deadline = async {
        match duration {
            Some(secs) => tokio::time::sleep(Duration::from_secs_f64(secs)).await,
            None => futures::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut printer = Printer {
        json: args.json,
        verbose: args.verbose,
        ..Printer::default()
    };
    loop {
        tokio::select! {
            _ = &mut deadline => {
                say!("{} --duration reached", stamp());
                break;
            }
            _ = &mut ctrl_c => {
                say!("{} interrupted", stamp());
                break;
            }
            Some(e) = channel_events.next() => printer.channel_event(&e),
            Some(u) = next_update(&mut watches.streams) => {
                printer.update(&u);
                chain.apply(&u);
                reconcile(&chain, &mut watches).await;
            }
        }
    }
    if args.csds || demo {
        print_csds(&pool, args.json).await;
    }
    if let Some(server) = csds_server {
        server.shutdown().await;
    }
    if let Some(s) = script {
        s.abort();
    }
    drop(watches);
    client.shutdown().await;
    if let Some(server) = demo_server {
        server.stop().await;
    }
}

/// The next update of any watch; pending (instead of ending) while none is open.
async fn next_update(streams: &mut SelectAll<BoxStream<'static, Update>>) -> Option<Update> {
    if streams.is_empty() {
        return futures::future::pending().await;
    }
    streams.next().await
}
