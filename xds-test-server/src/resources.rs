//! Builders of Envoy resources for tests and the demo, from the core's prost types,
//! wrapped in `google.protobuf.Any`.

use prost::Message;
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster;
use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint;
use xds_proto_core::pb::envoy::config::listener::v3 as listener;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::extensions::filters::http::router::v3::Router;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::envoy::service::discovery::v3::{ResourceError, ResourceName};
use xds_proto_core::pb::google::protobuf::{Any, UInt32Value};
use xds_proto_core::resource::type_url;

/// The type URL of the HttpConnectionManager filter config.
pub const HCM_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
/// The type URL of the router filter config.
pub const ROUTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

/// Packs a message into an `Any` with the given type URL.
pub fn any(type_url: &str, message: &impl Message) -> Any {
    Any {
        type_url: type_url.to_string(),
        value: message.encode_to_vec().into(),
    }
}

/// The name of a Listener, RouteConfiguration, Cluster or ClusterLoadAssignment, if
/// the bytes decode as that type.
pub fn resource_name(resource: &Any) -> Option<String> {
    let bytes = resource.value.as_ref();
    let name = match resource.type_url.as_str() {
        type_url::LISTENER => listener::Listener::decode(bytes).ok()?.name,
        type_url::ROUTE_CONFIGURATION => route::RouteConfiguration::decode(bytes).ok()?.name,
        type_url::CLUSTER => cluster::Cluster::decode(bytes).ok()?.name,
        type_url::CLUSTER_LOAD_ASSIGNMENT => {
            endpoint::ClusterLoadAssignment::decode(bytes)
                .ok()?
                .cluster_name
        }
        _ => return None,
    };
    (!name.is_empty()).then_some(name)
}

fn ads() -> core::ConfigSource {
    core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
            core::AggregatedConfigSource {},
        )),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    }
}

/// A client (API) listener whose HttpConnectionManager takes its routes from RDS.
pub fn listener(name: &str, route_config_name: &str) -> Any {
    let manager = hcm::HttpConnectionManager {
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(
            hcm::Rds {
                config_source: Some(ads()),
                route_config_name: route_config_name.to_string(),
            },
        )),
        http_filters: vec![hcm::HttpFilter {
            name: "envoy.filters.http.router".to_string(),
            config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(
                ROUTER_TYPE_URL,
                &Router::default(),
            ))),
            ..Default::default()
        }],
        ..Default::default()
    };
    let l = listener::Listener {
        name: name.to_string(),
        api_listener: Some(listener::ApiListener {
            api_listener: Some(any(HCM_TYPE_URL, &manager)),
        }),
        ..Default::default()
    };
    any(type_url::LISTENER, &l)
}

/// A listener that fails validation: no api_listener and no address.
pub fn invalid_listener(name: &str) -> Any {
    any(
        type_url::LISTENER,
        &listener::Listener {
            name: name.to_string(),
            ..Default::default()
        },
    )
}

/// Where a route sends its requests.
#[derive(Clone, Debug)]
pub enum RouteTarget {
    /// One cluster.
    Cluster(String),
    /// Weighted clusters: (name, weight).
    Weighted(Vec<(String, u32)>),
}

/// A route matching a path prefix.
#[derive(Clone, Debug)]
pub struct PrefixRoute {
    /// The path prefix ("" or "/" matches everything).
    pub prefix: String,
    /// Where it goes.
    pub target: RouteTarget,
}

/// A route configuration with one virtual host for `domains`.
pub fn route_config_with(name: &str, domains: &[&str], routes: &[PrefixRoute]) -> Any {
    let routes = routes
        .iter()
        .map(|r| route::Route {
            r#match: Some(route::RouteMatch {
                path_specifier: Some(route::route_match::PathSpecifier::Prefix(r.prefix.clone())),
                ..Default::default()
            }),
            action: Some(route::route::Action::Route(route::RouteAction {
                cluster_specifier: Some(match &r.target {
                    RouteTarget::Cluster(c) => {
                        route::route_action::ClusterSpecifier::Cluster(c.clone())
                    }
                    RouteTarget::Weighted(ws) => {
                        route::route_action::ClusterSpecifier::WeightedClusters(
                            route::WeightedCluster {
                                clusters: ws
                                    .iter()
                                    .map(|(c, w)| route::weighted_cluster::ClusterWeight {
                                        name: c.clone(),
                                        weight: Some(UInt32Value { value: *w }),
                                        ..Default::default()
                                    })
                                    .collect(),
                                ..Default::default()
                            },
                        )
                    }
                }),
                ..Default::default()
            })),
            ..Default::default()
        })
        .collect();
    let rc = route::RouteConfiguration {
        name: name.to_string(),
        virtual_hosts: vec![route::VirtualHost {
            name: format!("{name}-vhost"),
            domains: domains.iter().map(|d| d.to_string()).collect(),
            routes,
            ..Default::default()
        }],
        ..Default::default()
    };
    any(type_url::ROUTE_CONFIGURATION, &rc)
}

/// A route configuration sending every path of every domain to `cluster`.
pub fn route_config(name: &str, cluster: &str) -> Any {
    route_config_with(
        name,
        &["*"],
        &[PrefixRoute {
            prefix: String::new(),
            target: RouteTarget::Cluster(cluster.into()),
        }],
    )
}

/// An EDS cluster fetching its endpoints over ADS, with a max_requests circuit breaker
/// (different values give different versions of one cluster).
pub fn cluster_with(name: &str, max_requests: u32) -> Any {
    let c = cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::cluster::EdsClusterConfig {
            eds_config: Some(ads()),
            service_name: String::new(),
        }),
        lb_policy: cluster::cluster::LbPolicy::RoundRobin as i32,
        circuit_breakers: Some(cluster::CircuitBreakers {
            thresholds: vec![cluster::circuit_breakers::Thresholds {
                max_requests: Some(UInt32Value {
                    value: max_requests,
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    any(type_url::CLUSTER, &c)
}

/// An EDS cluster with 1024 max requests.
pub fn cluster(name: &str) -> Any {
    cluster_with(name, 1024)
}

/// An EDS cluster padded to about `pad_bytes` bytes (with a long `alt_stat_name`,
/// which clients ignore), for message-size tests.
pub fn padded_cluster(name: &str, pad_bytes: usize) -> Any {
    let mut c =
        cluster::Cluster::decode(cluster(name).value.as_ref()).expect("our own cluster decodes");
    c.alt_stat_name = "x".repeat(pad_bytes);
    any(type_url::CLUSTER, &c)
}

/// A cluster that fails validation: discovery type STATIC, which gRPC does not accept
/// in CDS.
pub fn invalid_cluster(name: &str) -> Any {
    let c = cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Static as i32,
        )),
        ..Default::default()
    };
    any(type_url::CLUSTER, &c)
}

/// One endpoint of an assignment.
#[derive(Clone, Debug)]
pub struct Host {
    /// IP address.
    pub address: String,
    /// Port.
    pub port: u32,
    /// Health status (`core::HealthStatus` as i32).
    pub health: core::HealthStatus,
    /// Load-balancing weight (None: unset).
    pub weight: Option<u32>,
}

impl Host {
    /// A healthy endpoint on 127.0.0.1 without a weight.
    pub fn healthy(port: u32) -> Host {
        Host {
            address: "127.0.0.1".into(),
            port,
            health: core::HealthStatus::Healthy,
            weight: None,
        }
    }
}

/// A locality of an assignment.
#[derive(Clone, Debug)]
pub struct Locality {
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// The locality's weight.
    pub weight: u32,
    /// Priority (0 is the highest).
    pub priority: u32,
    /// Endpoints.
    pub hosts: Vec<Host>,
}

/// An endpoint assignment with these localities.
pub fn endpoints_with(cluster_name: &str, localities: &[Locality]) -> Any {
    let cla = endpoint::ClusterLoadAssignment {
        cluster_name: cluster_name.to_string(),
        endpoints: localities
            .iter()
            .map(|l| endpoint::LocalityLbEndpoints {
                locality: Some(core::Locality {
                    region: l.region.clone(),
                    zone: l.zone.clone(),
                    sub_zone: String::new(),
                }),
                load_balancing_weight: Some(UInt32Value { value: l.weight }),
                priority: l.priority,
                lb_endpoints: l
                    .hosts
                    .iter()
                    .map(|h| endpoint::LbEndpoint {
                        host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                            endpoint::Endpoint {
                                address: Some(core::Address {
                                    address: Some(core::address::Address::SocketAddress(
                                        core::SocketAddress {
                                            address: h.address.clone(),
                                            port_specifier: Some(
                                                core::socket_address::PortSpecifier::PortValue(
                                                    h.port,
                                                ),
                                            ),
                                            ..Default::default()
                                        },
                                    )),
                                }),
                                ..Default::default()
                            },
                        )),
                        health_status: h.health as i32,
                        load_balancing_weight: h.weight.map(|value| UInt32Value { value }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    any(type_url::CLUSTER_LOAD_ASSIGNMENT, &cla)
}

/// An endpoint assignment with one locality (r1/z1, weight 1) holding one healthy
/// endpoint per port on 127.0.0.1.
pub fn endpoints(cluster_name: &str, ports: &[u32]) -> Any {
    endpoints_with(
        cluster_name,
        &[Locality {
            region: "r1".into(),
            zone: "z1".into(),
            weight: 1,
            priority: 0,
            hosts: ports.iter().map(|p| Host::healthy(*p)).collect(),
        }],
    )
}

/// A TP3 `resource_errors` entry for `name`.
pub fn resource_error(name: &str, code: xds_proto_core::Code, message: &str) -> ResourceError {
    ResourceError {
        resource_name: Some(ResourceName {
            name: name.to_string(),
            ..Default::default()
        }),
        error_detail: Some(xds_proto_core::pb::google::rpc::Status {
            code: code.0,
            message: message.to_string(),
            details: Vec::new(),
        }),
    }
}
