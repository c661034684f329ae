//! Server listeners (gRFC A36): the Listener resource an xDS-enabled gRPC server
//! subscribes to for the address it listens on, with its filter chains, each an
//! HttpConnectionManager whose routes carry `non_forwarding_action`.
//!
//! What gRPC requires (gRPC-Go's `processServerSideListener` and filter chain manager):
//! an `address.socket_address` equal to the server's listening address and port; no
//! `listener_filters` and no `use_original_dst`; at least one supported filter chain
//! or a `default_filter_chain`, no two chains with the same match; in each chain one
//! network filter, named, with an `HttpConnectionManager` `typed_config` (routes inline
//! or from RDS over ADS, HTTP filters ending with the router); and a `transport_socket`,
//! when set, named `envoy.transport_sockets.tls` holding a `DownstreamTlsContext`. An
//! RPC whose route has any other action than `non_forwarding_action` fails with
//! UNAVAILABLE on the server.

use std::net::SocketAddr;

use xds_proto_core::pb::envoy::config::listener::v3 as listener;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url;

use super::{HCM_TYPE_URL, any, hcm_with, non_forwarding, prefix, routes_config, socket_address};

/// The `server_listener_resource_name_template` of gRPC's examples and of Traffic
/// Director; `%s` stands for the listening address.
pub const SERVER_LISTENER_TEMPLATE: &str = "grpc/server?xds.resource.listening_address=%s";

/// The name of the Listener a gRPC server listening on `addr` subscribes to: the
/// bootstrap's `template` with `%s` replaced by `addr` (`127.0.0.1:50051`,
/// `[::1]:50051`), as gRPC-Go does. A template without `%s` is the name itself.
/// (An `xdstp:` template would need `addr` percent-encoded, A47; this does not.)
pub fn server_listener_name(template: &str, addr: SocketAddr) -> String {
    template.replace("%s", &addr.to_string())
}

/// Routes for a server that serves every RPC: one virtual host for every authority
/// (`*`) whose one route matches every path with `non_forwarding_action`.
pub fn server_routes(name: &str) -> route::RouteConfiguration {
    routes_config(name, vec![non_forwarding(prefix("/"))])
}

/// A filter chain named `name` with no match criteria (it takes every connection) and
/// `manager` as its one network filter. It has no `transport_socket`, so connections
/// are plaintext; set one holding a `DownstreamTlsContext` for TLS (A29).
pub fn server_filter_chain(
    name: &str,
    manager: &hcm::HttpConnectionManager,
) -> listener::FilterChain {
    listener::FilterChain {
        name: name.to_string(),
        filters: vec![listener::Filter {
            name: "envoy.filters.network.http_connection_manager".to_string(),
            config_type: Some(listener::filter::ConfigType::TypedConfig(any(
                HCM_TYPE_URL,
                manager,
            ))),
        }],
        ..Default::default()
    }
}

/// A server listener named `name` on `addr` with these filter chains and no default
/// chain.
pub fn server_listener_msg(
    name: &str,
    addr: SocketAddr,
    filter_chains: Vec<listener::FilterChain>,
) -> listener::Listener {
    listener::Listener {
        name: name.to_string(),
        address: Some(socket_address(
            &addr.ip().to_string(),
            u32::from(addr.port()),
        )),
        filter_chains,
        ..Default::default()
    }
}

/// The Listener that makes a gRPC server on `addr` serve every RPC in plaintext: named
/// after `template` ([`server_listener_name`]), one filter chain with inline
/// [`server_routes`] and the router.
pub fn serving_listener(template: &str, addr: SocketAddr) -> Any {
    let routes =
        hcm::http_connection_manager::RouteSpecifier::RouteConfig(server_routes("server-routes"));
    let chain = server_filter_chain("serve-all", &hcm_with(routes, None));
    let name = server_listener_name(template, addr);
    any(
        type_url::LISTENER,
        &server_listener_msg(&name, addr, vec![chain]),
    )
}
