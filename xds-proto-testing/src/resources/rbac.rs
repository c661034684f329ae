//! RBAC (gRFC A41) for server filter chains: the `envoy.extensions.filters.http.rbac.v3`
//! filter and its per-route override, with the policies tests and benchmarks need
//! (paths, headers, the client certificate's identity, `any`) and A59's stdout audit
//! logger. What gRPC accepts: an action of ALLOW, DENY or LOG; policies with at least
//! one permission and one principal, no CEL `condition`; header matchers not on `grpc-`
//! or `:scheme`; audit loggers of a known type unless `is_optional`.

use xds_proto_core::filter::rbac::{RBAC_PER_ROUTE_TYPE_URL, RBAC_TYPE_URL};
use xds_proto_core::pb::envoy::config::core::v3::TypedExtensionConfig;
use xds_proto_core::pb::envoy::config::listener::v3 as listener;
use xds_proto_core::pb::envoy::config::rbac::v3 as rbac;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::extensions::filters::http::rbac::v3 as filter;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::envoy::extensions::rbac::audit_loggers::stream::v3::StdoutAuditLog;
use xds_proto_core::pb::envoy::r#type::matcher::v3 as matcher;
use xds_proto_core::pb::google::protobuf::Any;

use super::{any, exact_matcher, hcm_with, router_filter, server_filter_chain};

pub use rbac::rbac::Action as RbacAction;

const STDOUT_AUDIT_LOG_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog";

/// A permission on the RPC's method path, exactly `path` (`/package.Service/Method`).
pub fn path_permission(path: &str) -> rbac::Permission {
    rbac::Permission {
        rule: Some(rbac::permission::Rule::UrlPath(matcher::PathMatcher {
            rule: Some(matcher::path_matcher::Rule::Path(exact_matcher(path))),
        })),
    }
}

/// A permission on the request header `name` being exactly `value`.
pub fn header_permission(name: &str, value: &str) -> rbac::Permission {
    rbac::Permission {
        rule: Some(rbac::permission::Rule::Header(route::HeaderMatcher {
            name: name.to_owned(),
            header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(
                exact_matcher(value),
            )),
            ..Default::default()
        })),
    }
}

/// A permission every RPC has.
pub fn any_permission() -> rbac::Permission {
    rbac::Permission {
        rule: Some(rbac::permission::Rule::Any(true)),
    }
}

/// A principal every peer is.
pub fn any_principal() -> rbac::Principal {
    rbac::Principal {
        identifier: Some(rbac::principal::Identifier::Any(true)),
    }
}

/// A principal authenticated by a client certificate whose identity is exactly `name`
/// (A41's `principal_name`: a URI SAN such as a SPIFFE ID, a DNS SAN, or the subject).
pub fn principal_name(name: &str) -> rbac::Principal {
    rbac::Principal {
        identifier: Some(rbac::principal::Identifier::Authenticated(
            rbac::principal::Authenticated {
                principal_name: Some(exact_matcher(name)),
            },
        )),
    }
}

/// A principal whose connection comes directly from `address/prefix_len`
/// (`direct_remote_ip`).
pub fn remote_ip_principal(address: &str, prefix_len: u32) -> rbac::Principal {
    rbac::Principal {
        identifier: Some(rbac::principal::Identifier::DirectRemoteIp(
            xds_proto_core::pb::envoy::config::core::v3::CidrRange {
                address_prefix: address.to_owned(),
                prefix_len: Some(xds_proto_core::pb::google::protobuf::UInt32Value {
                    value: prefix_len,
                }),
            },
        )),
    }
}

/// A policy that matches when one of `permissions` and one of `principals` do.
pub fn rbac_policy(
    permissions: Vec<rbac::Permission>,
    principals: Vec<rbac::Principal>,
) -> rbac::Policy {
    rbac::Policy {
        permissions,
        principals,
        ..Default::default()
    }
}

/// RBAC rules: `action` with these named policies and no audit logging.
pub fn rbac_rules(action: RbacAction, policies: Vec<(&str, rbac::Policy)>) -> rbac::Rbac {
    rbac::Rbac {
        action: action as i32,
        policies: policies
            .into_iter()
            .map(|(name, policy)| (name.to_owned(), policy))
            .collect(),
        audit_logging_options: None,
    }
}

/// The same rules audited by A59's stdout logger (named `stdout`) on denied RPCs.
pub fn audited_on_deny(mut rules: rbac::Rbac) -> rbac::Rbac {
    rules.audit_logging_options = Some(rbac::rbac::AuditLoggingOptions {
        audit_condition: rbac::rbac::audit_logging_options::AuditCondition::OnDeny as i32,
        logger_configs: vec![rbac::rbac::audit_logging_options::AuditLoggerConfig {
            audit_logger: Some(TypedExtensionConfig {
                name: "stdout".to_owned(),
                typed_config: Some(any(STDOUT_AUDIT_LOG_TYPE_URL, &StdoutAuditLog {})),
            }),
            is_optional: false,
        }],
    });
    rules
}

/// An RBAC filter named `name` enforcing `rules`, for `http_filters` (before the router).
pub fn rbac_filter(name: &str, rules: rbac::Rbac) -> hcm::HttpFilter {
    let config = filter::Rbac {
        rules: Some(rules),
        ..Default::default()
    };
    hcm::HttpFilter {
        name: name.to_owned(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(
            RBAC_TYPE_URL,
            &config,
        ))),
        ..Default::default()
    }
}

/// An `RBACPerRoute` for a route's or virtual host's `typed_per_filter_config` (keyed
/// by the filter's name): `Some` replaces the filter's rules for the route, `None`
/// disables the filter there (A41).
pub fn rbac_per_route(rules: Option<rbac::Rbac>) -> Any {
    let rbac = rules.map(|rules| filter::Rbac {
        rules: Some(rules),
        ..Default::default()
    });
    any(RBAC_PER_ROUTE_TYPE_URL, &filter::RbacPerRoute { rbac })
}

/// A server filter chain named `name` (no match criteria) with inline `routes` and
/// `filters` before the router; set its `transport_socket` for TLS.
pub fn rbac_filter_chain(
    name: &str,
    routes: route::RouteConfiguration,
    filters: Vec<hcm::HttpFilter>,
) -> listener::FilterChain {
    let mut manager = hcm_with(
        hcm::http_connection_manager::RouteSpecifier::RouteConfig(routes),
        None,
    );
    manager.http_filters = filters;
    manager.http_filters.push(router_filter());
    server_filter_chain(name, &manager)
}
