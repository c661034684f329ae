//! What the CLI shows of a resource: the four resource types as one [`Resource`], a
//! watch's updates as [`Update`]s, and each resource as a readable summary or as JSON.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use xds_adapter_tokio::xds_proto_core::resource::endpoint::EndpointsResource;
use xds_adapter_tokio::xds_proto_core::resource::listener::{
    ListenerKind, ListenerResource, RouteSource,
};
use xds_adapter_tokio::xds_proto_core::resource::route::{
    ClusterSpecifier, DomainPattern, PathMatcher, RouteAction, RouteConfigResource,
};
use xds_adapter_tokio::xds_proto_core::resource::{ClusterResource, ClusterType, type_url};
use xds_adapter_tokio::xds_proto_core::resource::{ResourceTypeInfo, ResourceValue};
use xds_adapter_tokio::xds_proto_core::{WatchEvent, XdsError};
use xds_adapter_tokio::{Cds, Eds, Lds, RawWatchStream, Rds};

/// Which of the four types a watch is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Lds,
    Rds,
    Cds,
    Eds,
}

impl Kind {
    /// The core's description of the type, to watch it by ([`Client::watch_type`]).
    ///
    /// [`Client::watch_type`]: xds_adapter_tokio::Client::watch_type
    pub(crate) fn type_info(self) -> ResourceTypeInfo {
        match self {
            Kind::Lds => ResourceTypeInfo::of::<Lds>(),
            Kind::Rds => ResourceTypeInfo::of::<Rds>(),
            Kind::Cds => ResourceTypeInfo::of::<Cds>(),
            Kind::Eds => ResourceTypeInfo::of::<Eds>(),
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Lds => "LDS",
            Kind::Rds => "RDS",
            Kind::Cds => "CDS",
            Kind::Eds => "EDS",
        }
    }
}

pub(crate) fn short_type(url: &str) -> &'static str {
    match url {
        type_url::LISTENER => "LDS",
        type_url::ROUTE_CONFIGURATION => "RDS",
        type_url::CLUSTER => "CDS",
        type_url::CLUSTER_LOAD_ASSIGNMENT => "EDS",
        _ => "?DS",
    }
}

/// A decoded resource of one of the four types.
#[derive(Clone, Debug)]
pub(crate) enum Resource {
    Listener(Arc<ListenerResource>),
    Routes(Arc<RouteConfigResource>),
    Cluster(Arc<ClusterResource>),
    Endpoints(Arc<EndpointsResource>),
}

/// An update of a single watch (`--lds/--rds/--cds/--eds`).
pub(crate) struct Update {
    pub(crate) kind: Kind,
    pub(crate) name: String,
    /// The value, or the error and whether it is ambient (the last value stays).
    pub(crate) event: Result<Resource, (bool, XdsError)>,
}

impl Resource {
    /// A watched value of the type `kind` stands for; `None` for a value of another
    /// type (the core never sends one).
    fn of(kind: Kind, value: &ResourceValue) -> Option<Resource> {
        Some(match kind {
            Kind::Lds => Resource::Listener(value.to_arc::<Lds>()?),
            Kind::Rds => Resource::Routes(value.to_arc::<Rds>()?),
            Kind::Cds => Resource::Cluster(value.to_arc::<Cds>()?),
            Kind::Eds => Resource::Endpoints(value.to_arc::<Eds>()?),
        })
    }
}

/// A watch of `kind` (made with [`Kind::type_info`]) as a stream of [`Update`]s.
pub(crate) fn tag(stream: RawWatchStream, kind: Kind) -> BoxStream<'static, Update> {
    let name = stream.name().to_string();
    stream
        .filter_map(move |event| {
            let event = match event {
                WatchEvent::Changed(Ok(v)) => Resource::of(kind, &v).map(Ok),
                WatchEvent::Changed(Err(e)) => Some(Err((false, e))),
                WatchEvent::AmbientError(e) => Some(Err((true, e))),
                _ => None,
            };
            let name = name.clone();
            async move { event.map(|event| Update { kind, name, event }) }
        })
        .boxed()
}

/// The indentation of continuation lines, under the time stamp.
pub(crate) const INDENT: &str = "           ";

pub(crate) fn domain(d: &DomainPattern) -> String {
    match d {
        DomainPattern::Exact(s) => s.clone(),
        DomainPattern::Suffix(s) => format!("*{s}"),
        DomainPattern::Prefix(s) => format!("{s}*"),
        DomainPattern::Any => "*".into(),
        other => format!("{other:?}"),
    }
}

pub(crate) fn path(p: &PathMatcher) -> String {
    match p {
        PathMatcher::Prefix(s) => format!("prefix {s:?}"),
        PathMatcher::Path(s) => format!("path {s:?}"),
        PathMatcher::SafeRegex(r) => format!("regex {:?}", r.pattern()),
        other => format!("{other:?}"),
    }
}

pub(crate) fn target(a: &RouteAction) -> String {
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
            other => format!("{other:?}"),
        },
        RouteAction::NonForwarding => "(non-forwarding)".into(),
        RouteAction::Unsupported => "(unsupported action: RPCs fail)".into(),
        other => format!("{other:?}"),
    }
}

pub(crate) fn summary(name: &str, r: &Resource) -> String {
    match r {
        Resource::Listener(l) => listener_summary(name, &l.kind),
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
                other => format!("{other:?}"),
            };
            format!(
                "CDS {name}: {ty}, lb {:?}, max_requests {}",
                c.lb_policy, c.max_requests
            )
        }
        Resource::Endpoints(e) => endpoints_summary(name, e),
    }
}

fn listener_summary(name: &str, kind: &ListenerKind) -> String {
    match kind {
        ListenerKind::Client(hcm) => {
            let routes = match &hcm.route_config {
                RouteSource::Rds(n) => format!("routes from RDS {n:?}"),
                RouteSource::Inline(rc) => {
                    format!("{} inline virtual hosts", rc.virtual_hosts.len())
                }
                other => format!("{other:?}"),
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
        other => format!("{other:?}"),
    }
}

fn endpoints_summary(name: &str, e: &EndpointsResource) -> String {
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

pub(crate) fn to_json(r: &Resource) -> Value {
    match r {
        Resource::Listener(l) => {
            let kind = match &l.kind {
                ListenerKind::Client(hcm) => json!({
                    "client": {
                        "route_config": match &hcm.route_config {
                            RouteSource::Rds(n) => json!({"rds": n}),
                            RouteSource::Inline(rc) => json!({"inline": routes_json(rc)}),
                            other => json!(format!("{other:?}")),
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
                other => json!(format!("{other:?}")),
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
                other => json!(format!("{other:?}")),
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

pub(crate) fn routes_json(rc: &RouteConfigResource) -> Value {
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
                            other => json!(format!("{other:?}")),
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
                    other => json!(format!("{other:?}")),
                },
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
