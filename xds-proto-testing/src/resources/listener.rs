//! Listener builders: client (API) listeners over an HttpConnectionManager with routes
//! from RDS or inline, server listeners (with TLS, A29), and a listener that fails
//! validation.

use std::time::Duration;

use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::listener::v3 as listener;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::extensions::filters::http::router::v3::Router;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url;

use xds_proto_core::pb::envoy::extensions::transport_sockets::tls::v3 as tls;

use super::server_listener::{server_filter_chain, server_routes};
use super::{
    DOWNSTREAM_TLS_CONTEXT_TYPE_URL, HCM_TYPE_URL, ROUTER_TYPE_URL, ads_config_source, any,
    pb_duration, provider_instance, socket_address, tls_transport_socket,
};

/// The router HTTP filter, named `envoy.filters.http.router`. gRPC requires it as the
/// last filter of every chain (and nowhere else); each filter needs a non-empty name,
/// unique in its chain, and a `typed_config`.
pub fn router_filter() -> hcm::HttpFilter {
    hcm::HttpFilter {
        name: "envoy.filters.http.router".to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(
            ROUTER_TYPE_URL,
            &Router::default(),
        ))),
        ..Default::default()
    }
}

/// The HttpConnectionManager of a client listener that takes its routes from the route
/// configuration `route_config_name` over ADS, with the router as its only filter.
///
/// gRPC requires: a route specifier (`rds` or `route_config`; `scoped_routes` is
/// rejected); for `rds`, a config source that is `ads` or `self` and a non-empty
/// `route_config_name`; HTTP filters ending with the router; `xff_num_trusted_hops`
/// zero and no `original_ip_detection_extensions`; a valid `max_stream_duration` when
/// set.
pub fn hcm_rds(route_config_name: &str) -> hcm::HttpConnectionManager {
    hcm::HttpConnectionManager {
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(
            hcm::Rds {
                config_source: Some(ads_config_source()),
                route_config_name: route_config_name.to_string(),
            },
        )),
        http_filters: vec![router_filter()],
        ..Default::default()
    }
}

/// An HttpConnectionManager with these routes (RDS or inline) and, when given, a
/// `common_http_protocol_options.max_stream_duration` (A31). The requirements are
/// those of [`hcm_rds`]; inline routes must be a valid route configuration.
pub fn hcm_with(
    routes: hcm::http_connection_manager::RouteSpecifier,
    max_stream_duration: Option<Duration>,
) -> hcm::HttpConnectionManager {
    hcm::HttpConnectionManager {
        route_specifier: Some(routes),
        common_http_protocol_options: max_stream_duration.map(|d| core::HttpProtocolOptions {
            max_stream_duration: Some(pb_duration(d)),
            ..Default::default()
        }),
        ..hcm_rds("unused")
    }
}

/// A client (API) listener named `name` over `manager`. gRPC requires
/// `api_listener.api_listener` to be an `Any` of type [`HCM_TYPE_URL`] holding a
/// valid HttpConnectionManager (see [`hcm_rds`]).
pub fn client_listener_msg(name: &str, manager: &hcm::HttpConnectionManager) -> listener::Listener {
    listener::Listener {
        name: name.to_string(),
        api_listener: Some(listener::ApiListener {
            api_listener: Some(any(HCM_TYPE_URL, manager)),
        }),
        ..Default::default()
    }
}

/// [`client_listener_msg`] as an `Any`.
pub fn listener_of(name: &str, manager: &hcm::HttpConnectionManager) -> Any {
    any(type_url::LISTENER, &client_listener_msg(name, manager))
}

/// A client listener whose routes come from the route configuration
/// `route_config_name` over ADS ([`hcm_rds`]).
pub fn listener_msg(name: &str, route_config_name: &str) -> listener::Listener {
    client_listener_msg(name, &hcm_rds(route_config_name))
}

/// [`listener_msg`] as an `Any`.
pub fn listener(name: &str, route_config_name: &str) -> Any {
    any(type_url::LISTENER, &listener_msg(name, route_config_name))
}

/// A client listener with its route configuration inline and an optional HCM
/// `max_stream_duration`; `rc` must itself be valid (see [`route_config_of`]).
///
/// [`route_config_of`]: super::route_config_of
pub fn listener_inline(
    name: &str,
    rc: route::RouteConfiguration,
    max_stream_duration: Option<Duration>,
) -> Any {
    listener_of(
        name,
        &hcm_with(
            hcm::http_connection_manager::RouteSpecifier::RouteConfig(rc),
            max_stream_duration,
        ),
    )
}

/// A client listener on RDS (`rds`) with an optional HCM `max_stream_duration`.
pub fn listener_rds(name: &str, rds: &str, max_stream_duration: Option<Duration>) -> Any {
    let routes = hcm_rds(rds)
        .route_specifier
        .expect("hcm_rds sets the routes");
    listener_of(name, &hcm_with(routes, max_stream_duration))
}

/// A server listener on `0.0.0.0:8080` (an `address`, no `api_listener`) whose one
/// filter chain serves every RPC ([`super::server_filter_chain`] over
/// [`super::server_routes`]). gRPC requires a `socket_address` with a `port_value` up
/// to 65535 and a filter chain or a default one (see `server_listener.rs` for the
/// rest of A36's rules); a client that asked for a client listener gets a server one
/// and treats it as such.
pub fn server_listener(name: &str) -> Any {
    let routes = hcm::http_connection_manager::RouteSpecifier::RouteConfig(super::server_routes(
        "server-routes",
    ));
    any(
        type_url::LISTENER,
        &listener::Listener {
            name: name.to_string(),
            address: Some(socket_address("0.0.0.0", 8080)),
            filter_chains: vec![super::server_filter_chain(
                "serve-all",
                &hcm_with(routes, None),
            )],
            ..Default::default()
        },
    )
}

/// A listener that fails validation: neither an `api_listener` nor an `address`.
pub fn invalid_listener(name: &str) -> Any {
    any(
        type_url::LISTENER,
        &listener::Listener {
            name: name.to_string(),
            ..Default::default()
        },
    )
}

/// A `DownstreamTlsContext` as gRPC accepts it (A29): the server's certificate from the
/// certificate provider instance `identity_instance`; with `client_roots_instance`, the
/// server asks for client certificates and verifies them against that instance's roots
/// (mTLS), refusing a client without one when `require_client_certificate`.
///
/// gRPC requires of a `DownstreamTlsContext`: a `tls_certificate_provider_instance`;
/// a validation context, when set, with a `ca_certificate_provider_instance` and no SAN
/// matchers or system roots; `require_client_certificate` only with a validation
/// context; every instance named in the server's bootstrap `certificate_providers`; no
/// `require_sni`, an `ocsp_staple_policy` of `LENIENT_STAPLING`, none of the
/// `CommonTlsContext` fields gRPC NACKs (see
/// [`upstream_tls_context`](super::upstream_tls_context)).
pub fn downstream_tls_context(
    identity_instance: &str,
    client_roots_instance: Option<&str>,
    require_client_certificate: bool,
) -> tls::DownstreamTlsContext {
    let validation = client_roots_instance.map(|roots| {
        tls::common_tls_context::ValidationContextType::ValidationContext(
            tls::CertificateValidationContext {
                ca_certificate_provider_instance: Some(provider_instance(roots)),
                ..Default::default()
            },
        )
    });
    tls::DownstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            tls_certificate_provider_instance: Some(provider_instance(identity_instance)),
            validation_context_type: validation,
            ..Default::default()
        }),
        require_client_certificate: require_client_certificate
            .then_some(xds_proto_core::pb::google::protobuf::BoolValue { value: true }),
        ..Default::default()
    }
}

/// A server listener named `name` on `host:port` whose only filter chain is
/// [`server_filter_chain`] with `context` (TLS when given). For a static LDS (the
/// server's listener name is its bootstrap's `server_listener_resource_name_template`
/// with the address).
pub fn tls_server_listener_msg(
    name: &str,
    host: &str,
    port: u32,
    context: Option<&tls::DownstreamTlsContext>,
) -> listener::Listener {
    let routes =
        hcm::http_connection_manager::RouteSpecifier::RouteConfig(server_routes("inbound"));
    listener::Listener {
        name: name.to_string(),
        address: Some(socket_address(host, port)),
        filter_chains: vec![listener::FilterChain {
            transport_socket: context
                .map(|c| tls_transport_socket(DOWNSTREAM_TLS_CONTEXT_TYPE_URL, c)),
            ..server_filter_chain("tls", &hcm_with(routes, None))
        }],
        ..Default::default()
    }
}

/// In one line, a server listener on `host:port` with mTLS: the server's certificate
/// and the roots that verify clients both from the provider instance `instance`, a
/// client certificate required.
pub fn mtls_server_listener(name: &str, host: &str, port: u32, instance: &str) -> Any {
    let context = downstream_tls_context(instance, Some(instance), true);
    any(
        type_url::LISTENER,
        &tls_server_listener_msg(name, host, port, Some(&context)),
    )
}
