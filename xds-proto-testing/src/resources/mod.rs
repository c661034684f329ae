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
//!   socket address with an IP literal and a `port_value` up to 65535;
//! - a TLS transport socket (A29) takes its certificates from certificate provider
//!   instances the client's bootstrap defines: a cluster's `UpstreamTlsContext` needs
//!   roots, a server filter chain's `DownstreamTlsContext` needs an identity (see
//!   [`upstream_tls_context`] and [`downstream_tls_context`]).

use prost::Message;
use xds_proto_core::bootstrap::{CertificateProviderConfig, FileWatcherConfig};
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster_pb;
use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint_pb;
use xds_proto_core::pb::envoy::config::listener::v3 as listener_pb;
use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_proto_core::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use xds_proto_core::pb::envoy::service::discovery::v3::{Resource, ResourceError, ResourceName};
use xds_proto_core::pb::envoy::r#type::matcher::v3 as matcher;
use xds_proto_core::pb::google::protobuf::{self as pbuf, Any};
use xds_proto_core::resource::type_url;

mod cluster;
mod endpoint;
mod filter;
mod listener;
pub mod mesh;
mod rbac;
mod route;
mod server_listener;

pub use cluster::*;
pub use endpoint::*;
pub use filter::*;
pub use listener::*;
pub use rbac::*;
pub use route::*;
pub use server_listener::*;

pub use xds_proto_core::resource::listener::{
    HTTP_CONNECTION_MANAGER_TYPE_URL as HCM_TYPE_URL, ROUTER_FILTER_TYPE_URL as ROUTER_TYPE_URL,
};
/// The type URL of an aggregate cluster's config (A37).
pub const AGGREGATE_CLUSTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig";
/// The type URL of a cluster's TLS transport socket config.
pub const UPSTREAM_TLS_CONTEXT_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
/// The type URL of a server filter chain's TLS transport socket config.
pub const DOWNSTREAM_TLS_CONTEXT_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";

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

/// A config source naming the server that sent the resource (`self`): the only
/// `lrs_server` gRPC accepts in a cluster.
pub fn self_config_source() -> core::ConfigSource {
    core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Self_(
            core::SelfConfigSource::default(),
        )),
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

/// A `transport_socket` named `envoy.transport_sockets.tls` carrying `context` (an
/// `UpstreamTlsContext` or a `DownstreamTlsContext`, with its type URL).
pub fn tls_transport_socket(type_url: &str, context: &impl Message) -> core::TransportSocket {
    core::TransportSocket {
        name: "envoy.transport_sockets.tls".to_string(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(
            type_url, context,
        ))),
    }
}

/// A `CertificateProviderPluginInstance` naming the bootstrap instance `instance` (the
/// certificate name is left empty: `file_watcher` ignores it).
pub fn provider_instance(instance: &str) -> tls::CertificateProviderPluginInstance {
    tls::CertificateProviderPluginInstance {
        instance_name: instance.to_string(),
        certificate_name: String::new(),
    }
}

/// An `exact` string matcher, case-sensitive (for a DNS SAN, A29 compares by DNS rules:
/// case-insensitive, wildcards in the certificate).
pub fn exact_matcher(value: &str) -> matcher::StringMatcher {
    matcher::StringMatcher {
        match_pattern: Some(matcher::string_matcher::MatchPattern::Exact(
            value.to_string(),
        )),
        ignore_case: false,
    }
}

/// A bootstrap `certificate_providers` entry, as JSON text, for a `file_watcher`
/// instance with these files, reread every `refresh_interval`. gRPC needs a certificate
/// and its key together, and at least one of them or a CA file.
///
/// ```
/// # use std::time::Duration;
/// # use xds_proto_testing::resources::file_watcher_provider_json;
/// let entry = file_watcher_provider_json(Some("/c.pem"), Some("/k.pem"), Some("/ca.pem"),
///     Duration::from_secs(5));
/// let bootstrap = format!(r#"{{"xds_servers": [{{"server_uri": "localhost:1",
///     "channel_creds": [{{"type": "insecure"}}]}}],
///     "certificate_providers": {{"mesh": {entry}}}}}"#);
/// assert!(xds_proto_core::Bootstrap::from_json_str(&bootstrap).is_ok());
/// ```
pub fn file_watcher_provider_json(
    certificate_file: Option<&str>,
    private_key_file: Option<&str>,
    ca_certificate_file: Option<&str>,
    refresh_interval: std::time::Duration,
) -> String {
    let config = FileWatcherConfig {
        certificate_file: certificate_file.map(str::to_string),
        private_key_file: private_key_file.map(str::to_string),
        ca_certificate_file: ca_certificate_file.map(str::to_string),
        spiffe_trust_bundle_map_file: None,
        refresh_interval,
    };
    CertificateProviderConfig::FileWatcher(config)
        .to_json()
        .to_string()
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
