//! Builders of xDS resources from the core's prost types: Listener (client and server),
//! RouteConfiguration, Cluster and ClusterLoadAssignment, each as its message (`*_msg`,
//! or the message builders of routes) and packed in a `google.protobuf.Any`, valid by
//! default and deliberately invalid where a test needs a NACK. [`mesh`] holds the large
//! Istio-like fixtures of the benchmarks.
//!
//! Every builder's documentation says which of its fields gRPC (and so the core's
//! decoders) requires for the resource to be accepted. In short:
//! - a client Listener needs an `api_listener` holding an `HttpConnectionManager` whose
//!   routes come from RDS (config source ADS or self, non-empty name) or inline, and
//!   whose HTTP filters end with the router, each filter named once with a typed config;
//!   a server Listener (A36, [`serving_listener`]) needs the server's own address and
//!   filter chains whose HttpConnectionManager routes carry `non_forwarding_action`;
//! - a route needs a matcher with a path specifier (prefix, path or safe_regex) and, to
//!   forward, a non-empty cluster, weighted clusters with a non-zero sum, or a declared
//!   cluster specifier plugin;
//! - a Cluster needs a discovery type gRPC supports: EDS (config source ADS or self,
//!   and a service name when the cluster name is `xdstp:`), LOGICAL_DNS (one locality,
//!   one endpoint, host and port) or aggregate (a non-empty child list);
//! - a ClusterLoadAssignment's localities count only with a non-zero weight, need a
//!   `locality`, and their priorities must be contiguous from 0; every endpoint needs a
//!   socket address with an IP literal and a `port_value` up to 65535.

use prost::Message;
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster_pb;
use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint_pb;
use xds_proto_core::pb::envoy::config::listener::v3 as listener_pb;
use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_proto_core::pb::envoy::service::discovery::v3::{Resource, ResourceError, ResourceName};
use xds_proto_core::pb::google::protobuf::{self as pbuf, Any};
use xds_proto_core::resource::type_url;

mod cluster;
mod endpoint;
mod listener;
pub mod mesh;
mod route;
mod server_listener;

pub use cluster::*;
pub use endpoint::*;
pub use listener::*;
pub use route::*;
pub use server_listener::*;

pub use xds_proto_core::resource::listener::{
    HTTP_CONNECTION_MANAGER_TYPE_URL as HCM_TYPE_URL, ROUTER_FILTER_TYPE_URL as ROUTER_TYPE_URL,
};
/// The type URL of an aggregate cluster's config (A37).
pub const AGGREGATE_CLUSTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig";
/// The type URL of the TLS transport socket's config.
pub const UPSTREAM_TLS_CONTEXT_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";

/// Packs a message into an `Any` with the given type URL.
pub fn any(type_url: &str, message: &impl Message) -> Any {
    Any {
        type_url: type_url.to_string(),
        value: message.encode_to_vec().into(),
    }
}

/// A config source pointing at the ADS stream (API version V3). gRPC accepts only `ads`
/// or `self` as the config source of RDS in a listener and of EDS in a cluster.
pub fn ads_config_source() -> core::ConfigSource {
    core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
            core::AggregatedConfigSource {},
        )),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    }
}

/// A socket address `host:port`. Endpoints need an IP literal and a port up to 65535;
/// LOGICAL_DNS clusters take a host name and a port from 1 to 65535.
pub fn socket_address(host: &str, port: u32) -> core::Address {
    core::Address {
        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
            address: host.to_string(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

/// A `google.protobuf.Duration` (gRPC rejects negative and out-of-range ones).
pub fn pb_duration(d: std::time::Duration) -> pbuf::Duration {
    pbuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// A raw `google.protobuf.Duration`, which may be negative or out of range, for tests
/// of the validation.
pub fn raw_duration(seconds: i64, nanos: i32) -> pbuf::Duration {
    pbuf::Duration { seconds, nanos }
}

/// `resource` wrapped in an `envoy.service.discovery.v3.Resource` named `name`, as a
/// server may send it; the client unwraps it and takes the inner resource.
pub fn wrap_resource(name: &str, resource: Any) -> Any {
    any(
        type_url::RESOURCE_WRAPPER,
        &Resource {
            name: name.to_string(),
            resource: Some(resource),
            ..Default::default()
        },
    )
}

/// A TP3 `resource_errors` entry for `name`: the server reports this status instead of
/// the resource. It needs the resource name and an error detail.
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

/// The name of a Listener, RouteConfiguration, Cluster or ClusterLoadAssignment, if the
/// bytes decode as that type and the name is not empty.
pub fn resource_name(resource: &Any) -> Option<String> {
    let bytes = resource.value.as_ref();
    let name = match resource.type_url.as_str() {
        type_url::LISTENER => listener_pb::Listener::decode(bytes).ok()?.name,
        type_url::ROUTE_CONFIGURATION => route_pb::RouteConfiguration::decode(bytes).ok()?.name,
        type_url::CLUSTER => cluster_pb::Cluster::decode(bytes).ok()?.name,
        type_url::CLUSTER_LOAD_ASSIGNMENT => {
            endpoint_pb::ClusterLoadAssignment::decode(bytes)
                .ok()?
                .cluster_name
        }
        _ => return None,
    };
    (!name.is_empty()).then_some(name)
}
