//! What the CLI shows of a resource: the four resource types as one [`Resource`], a
//! watch's updates as [`Update`]s, and each resource as a readable summary or as JSON,
//! security configs (A29) included.

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
use xds_adapter_tokio::xds_proto_core::security::san::describe_matcher;
use xds_adapter_tokio::xds_proto_core::security::{
    CertificateProviderInstance, DownstreamTls, RootCertificates, UpstreamTls,
};
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
            let mut out = format!(
                "CDS {name}: {ty}, lb {:?}, max_requests {}",
                c.lb_policy, c.max_requests
            );
            if let Some(tls) = &c.tls {
                out.push_str(&format!("\n{INDENT}{}", upstream_tls_summary(tls)));
            }
            out
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
        ListenerKind::Server(server) => {
            let (address, port) = (&server.address, server.port);
            let (filter_chains, default_filter_chain) =
                (&server.filter_chains, &server.default_filter_chain);
            let mut out = format!(
                "LDS {name}: server listener on {address}:{port}, {} filter chains",
                filter_chains.len()
            );
            for fc in filter_chains.iter().chain(default_filter_chain.as_deref()) {
                let tls = fc.tls.as_ref().map_or_else(
                    || "plaintext (fallback credentials)".into(),
                    downstream_tls_summary,
                );
                out.push_str(&format!("\n{INDENT}chain {:?}: {tls}", fc.name));
            }
            out
        }
        other => format!("{other:?}"),
    }
}

fn instance(p: &CertificateProviderInstance) -> String {
    if p.certificate_name.is_empty() {
        format!("{:?}", p.instance_name)
    } else {
        format!("{:?}/{:?}", p.instance_name, p.certificate_name)
    }
}

fn roots(r: &RootCertificates) -> String {
    match r {
        RootCertificates::Provider(p) => instance(p),
        RootCertificates::System => "system roots".into(),
        other => format!("{other:?}"),
    }
}

/// A cluster's security in one line: `mTLS identity "mesh", roots "mesh", SANs [...]`.
pub(crate) fn upstream_tls_summary(tls: &UpstreamTls) -> String {
    let mut out = match &tls.identity {
        Some(identity) => format!(
            "mTLS identity {}, roots {}",
            instance(identity),
            roots(&tls.roots)
        ),
        None => format!("TLS roots {}", roots(&tls.roots)),
    };
    if !tls.match_subject_alt_names.is_empty() {
        let sans: Vec<String> = tls
            .match_subject_alt_names
            .iter()
            .map(describe_matcher)
            .collect();
        out.push_str(&format!(", SANs [{}]", sans.join(", ")));
    }
    if let Some(sni) = &tls.sni {
        out.push_str(&format!(", sni {sni:?}"));
    }
    if tls.auto_host_sni {
        out.push_str(", auto_host_sni");
    }
    if tls.auto_sni_san_validation {
        out.push_str(", auto_sni_san_validation");
    }
    out
}

fn downstream_tls_summary(tls: &DownstreamTls) -> String {
    match (&tls.client_roots, tls.require_client_certificate) {
        (None, _) => format!("TLS identity {}", instance(&tls.identity)),
        (Some(r), required) => format!(
            "mTLS identity {}, client roots {}, client certificate {}",
            instance(&tls.identity),
            instance(r),
            if required { "required" } else { "optional" }
        ),
    }
}

fn instance_json(p: &CertificateProviderInstance) -> Value {
    json!({"instance_name": &*p.instance_name, "certificate_name": p.certificate_name})
}

pub(crate) fn upstream_tls_json(tls: &UpstreamTls) -> Value {
    json!({
        "identity": tls.identity.as_ref().map(instance_json),
        "roots": match &tls.roots {
            RootCertificates::Provider(p) => instance_json(p),
            RootCertificates::System => json!("system_root_certs"),
            other => json!(format!("{other:?}")),
        },
        "match_subject_alt_names": tls.match_subject_alt_names.iter().map(describe_matcher).collect::<Vec<_>>(),
        "sni": tls.sni,
        "auto_host_sni": tls.auto_host_sni,
        "auto_sni_san_validation": tls.auto_sni_san_validation,
    })
}

fn downstream_tls_json(tls: &DownstreamTls) -> Value {
    json!({
        "identity": instance_json(&tls.identity),
        "client_roots": tls.client_roots.as_ref().map(instance_json),
        "require_client_certificate": tls.require_client_certificate,
    })
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
                            "name": f.name, "type_url": f.config.type_url(), "is_optional": f.is_optional,
                        })).collect::<Vec<_>>(),
                        "max_stream_duration": hcm.max_stream_duration.map(|d| d.as_secs_f64()),
                    }
                }),
                ListenerKind::Server(server) => {
                    let (address, port) = (&server.address, server.port);
                    let (filter_chains, default_filter_chain) =
                        (&server.filter_chains, &server.default_filter_chain);
                    let chain = |fc: &xds_adapter_tokio::xds_proto_core::resource::FilterChain| json!({"name": fc.name, "tls": fc.tls.as_ref().map(downstream_tls_json)});
                    json!({
                        "server": {"address": address, "port": port,
                                   "filter_chains": filter_chains.iter().map(chain).collect::<Vec<_>>(),
                                   "default_filter_chain": default_filter_chain.as_deref().map(chain)}
                    })
                }
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
            "tls": c.tls.as_ref().map(upstream_tls_json),
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

#[cfg(test)]
mod tests {
    use super::*;
    use xds_adapter_tokio::xds_proto_core::resource::LbPolicy;
    use xds_adapter_tokio::xds_proto_core::resource::listener::FilterChain;
    use xds_adapter_tokio::xds_proto_core::resource::route::StringMatcher;

    fn provider(name: &str) -> CertificateProviderInstance {
        CertificateProviderInstance {
            instance_name: name.into(),
            certificate_name: "".into(),
        }
    }

    #[test]
    fn a_cluster_shows_its_security_config() {
        let tls = UpstreamTls {
            identity: Some(provider("mesh")),
            roots: RootCertificates::Provider(CertificateProviderInstance {
                instance_name: "mesh".into(),
                certificate_name: "ROOTCA".into(),
            }),
            match_subject_alt_names: vec![StringMatcher::Exact {
                value: "spiffe://td/server".into(),
                ignore_case: false,
            }]
            .into(),
            sni: Some("server.example".into()),
            auto_host_sni: false,
            auto_sni_san_validation: true,
        };
        let cluster = ClusterResource {
            name: "c".into(),
            cluster_type: ClusterType::Eds { service_name: None },
            lb_policy: LbPolicy::RoundRobin,
            lrs_server: false,
            max_requests: 1024,
            tls: Some(tls),
            outlier_detection: None,
            override_host_status: Default::default(),
        };
        let r = Resource::Cluster(Arc::new(cluster));
        assert_eq!(
            summary("c", &r),
            format!(
                "CDS c: EDS, lb RoundRobin, max_requests 1024\n{INDENT}mTLS identity \"mesh\", \
                 roots \"mesh\"/\"ROOTCA\", SANs [exact \"spiffe://td/server\"], sni \
                 \"server.example\", auto_sni_san_validation"
            )
        );
        assert_eq!(
            to_json(&r)["tls"],
            json!({
                "identity": {"instance_name": "mesh", "certificate_name": ""},
                "roots": {"instance_name": "mesh", "certificate_name": "ROOTCA"},
                "match_subject_alt_names": ["exact \"spiffe://td/server\""],
                "sni": "server.example",
                "auto_host_sni": false,
                "auto_sni_san_validation": true,
            })
        );
    }

    #[test]
    fn a_server_listener_shows_each_chains_security() {
        use xds_adapter_tokio::xds_proto_core::resource::listener::{
            FilterChainMatch, HttpConnectionManager, RouteSource, ServerListener,
        };
        let chain = |name: &str, tls| FilterChain {
            name: name.into(),
            filter_chain_match: FilterChainMatch::default(),
            http_connection_manager: HttpConnectionManager {
                route_config: RouteSource::Rds("routes".into()),
                http_filters: Vec::new(),
                max_stream_duration: None,
            },
            tls,
        };
        let kind = ListenerKind::Server(ServerListener {
            address: "0.0.0.0".into(),
            port: 8443,
            filter_chains: vec![chain(
                "mtls",
                Some(DownstreamTls {
                    identity: provider("mesh"),
                    client_roots: Some(provider("mesh")),
                    require_client_certificate: true,
                }),
            )],
            default_filter_chain: Some(Box::new(chain("plain", None))),
        });
        assert_eq!(
            listener_summary("l", &kind),
            format!(
                "LDS l: server listener on 0.0.0.0:8443, 1 filter chains\n{INDENT}chain \
                 \"mtls\": mTLS identity \"mesh\", client roots \"mesh\", client certificate \
                 required\n{INDENT}chain \"plain\": plaintext (fallback credentials)"
            )
        );
    }
}
