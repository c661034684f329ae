//! Valid xDS resources for scenarios, built from the core's prost types and wrapped
//! in `google.protobuf.Any`: a client listener pointing at RDS, a route configuration
//! sending everything to one cluster, an EDS cluster, and an endpoint assignment.

use prost::Message;
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster;
use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint;
use xds_proto_core::pb::envoy::config::listener::v3 as listener;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::extensions::filters::http::router::v3::Router;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::google::protobuf::{Any, UInt32Value};
use xds_proto_core::resource::type_url;

const HCM_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

/// Packs a message into an `Any` with the given type URL.
pub fn any(type_url: &str, message: &impl Message) -> Any {
    Any {
        type_url: type_url.to_string(),
        value: message.encode_to_vec().into(),
    }
}

fn ads() -> core::ConfigSource {
    core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
            core::AggregatedConfigSource {},
        )),
        ..Default::default()
    }
}

/// The HttpConnectionManager of a client listener that takes its routes from RDS.
pub fn hcm_rds(route_config_name: &str) -> hcm::HttpConnectionManager {
    hcm::HttpConnectionManager {
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(
            hcm::Rds {
                config_source: Some(ads()),
                route_config_name: route_config_name.to_string(),
            },
        )),
        http_filters: vec![hcm::HttpFilter {
            name: "router".to_string(),
            config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(
                ROUTER_TYPE_URL,
                &Router::default(),
            ))),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A client (API) listener whose routes come from the route configuration `route_config_name`.
pub fn listener_msg(name: &str, route_config_name: &str) -> listener::Listener {
    listener::Listener {
        name: name.to_string(),
        api_listener: Some(listener::ApiListener {
            api_listener: Some(any(HCM_TYPE_URL, &hcm_rds(route_config_name))),
        }),
        ..Default::default()
    }
}

/// [`listener_msg`] as an `Any`.
pub fn listener(name: &str, route_config_name: &str) -> Any {
    any(type_url::LISTENER, &listener_msg(name, route_config_name))
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

/// A route configuration with one virtual host for `*` routing every path to `cluster`.
pub fn route_config_msg(name: &str, cluster: &str) -> route::RouteConfiguration {
    route::RouteConfiguration {
        name: name.to_string(),
        virtual_hosts: vec![route::VirtualHost {
            name: "all".to_string(),
            domains: vec!["*".to_string()],
            routes: vec![route::Route {
                r#match: Some(route::RouteMatch {
                    path_specifier: Some(route::route_match::PathSpecifier::Prefix(String::new())),
                    ..Default::default()
                }),
                action: Some(route::route::Action::Route(route::RouteAction {
                    cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(
                        cluster.to_string(),
                    )),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// [`route_config_msg`] as an `Any`.
pub fn route_config(name: &str, cluster: &str) -> Any {
    any(
        type_url::ROUTE_CONFIGURATION,
        &route_config_msg(name, cluster),
    )
}

/// An EDS cluster fetching its endpoints over ADS (service name = its name for xdstp
/// names, unset otherwise), with the given max_requests
/// circuit breaker (so tests can produce distinct versions of one cluster).
pub fn cluster_msg(name: &str, max_requests: u32) -> cluster::Cluster {
    cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::cluster::EdsClusterConfig {
            eds_config: Some(ads()),
            // gRPC requires an explicit EDS service name for xdstp: cluster names.
            service_name: if name.starts_with("xdstp:") {
                name.to_string()
            } else {
                String::new()
            },
        }),
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
    }
}

/// [`cluster_msg`] with 1024 max requests, as an `Any`.
pub fn cluster(name: &str) -> Any {
    any(type_url::CLUSTER, &cluster_msg(name, 1024))
}

/// [`cluster_msg`] with the given max requests, as an `Any`.
pub fn cluster_v(name: &str, max_requests: u32) -> Any {
    any(type_url::CLUSTER, &cluster_msg(name, max_requests))
}

/// A cluster that fails validation: STATIC discovery type.
pub fn invalid_cluster(name: &str) -> Any {
    let mut c = cluster_msg(name, 1024);
    c.cluster_discovery_type = Some(cluster::cluster::ClusterDiscoveryType::Type(
        cluster::cluster::DiscoveryType::Static as i32,
    ));
    any(type_url::CLUSTER, &c)
}

/// An endpoint assignment with one locality holding one endpoint per port on 127.0.0.1.
pub fn endpoints_msg(name: &str, ports: &[u32]) -> endpoint::ClusterLoadAssignment {
    endpoint::ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints: vec![endpoint::LocalityLbEndpoints {
            locality: Some(core::Locality {
                region: "r1".to_string(),
                zone: "z1".to_string(),
                sub_zone: String::new(),
            }),
            load_balancing_weight: Some(UInt32Value { value: 1 }),
            lb_endpoints: ports
                .iter()
                .map(|port| endpoint::LbEndpoint {
                    host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                        endpoint::Endpoint {
                            address: Some(core::Address {
                                address: Some(core::address::Address::SocketAddress(
                                    core::SocketAddress {
                                        address: "127.0.0.1".to_string(),
                                        port_specifier: Some(
                                            core::socket_address::PortSpecifier::PortValue(*port),
                                        ),
                                        ..Default::default()
                                    },
                                )),
                            }),
                            ..Default::default()
                        },
                    )),
                    health_status: core::HealthStatus::Healthy as i32,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// [`endpoints_msg`] as an `Any`.
pub fn endpoints(name: &str, ports: &[u32]) -> Any {
    any(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        &endpoints_msg(name, ports),
    )
}
