//! Route builders: matchers (prefix, path, regex, headers, runtime fractions), actions
//! (one cluster, weighted clusters, a cluster specifier plugin, timeouts, retries),
//! virtual hosts and route configurations, including the simple prefix-route tables of
//! the demo and the one-cluster configuration of the scenarios.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::r#type::matcher::v3 as matcher;
use xds_proto_core::pb::envoy::r#type::v3 as types;
use xds_proto_core::pb::google::protobuf::{Any, BoolValue, UInt32Value};
use xds_proto_core::resource::route::RouteConfigResource;
use xds_proto_core::resource::type_url;

use super::{any, pb_duration};

/// Matches paths starting with `p` (`""` and `"/"` match everything). gRPC requires
/// every route to have a `match` with a path specifier: `prefix`, `path` or `safe_regex`.
pub fn prefix(p: &str) -> route::RouteMatch {
    route::RouteMatch {
        path_specifier: Some(route::route_match::PathSpecifier::Prefix(p.to_string())),
        ..Default::default()
    }
}

/// Matches the path `p` exactly.
pub fn path(p: &str) -> route::RouteMatch {
    route::RouteMatch {
        path_specifier: Some(route::route_match::PathSpecifier::Path(p.to_string())),
        ..Default::default()
    }
}

/// Matches paths that fully match the regex `r` (RE2 syntax; an invalid regex is a NACK).
pub fn regex(r: &str) -> route::RouteMatch {
    route::RouteMatch {
        path_specifier: Some(route::route_match::PathSpecifier::SafeRegex(
            matcher::RegexMatcher {
                regex: r.to_string(),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// The same matcher with `case_sensitive` set.
pub fn case_sensitive(mut m: route::RouteMatch, value: bool) -> route::RouteMatch {
    m.case_sensitive = Some(BoolValue { value });
    m
}

/// The same matcher with one more header matcher.
pub fn with_header(mut m: route::RouteMatch, h: route::HeaderMatcher) -> route::RouteMatch {
    m.headers.push(h);
    m
}

/// The same matcher with a runtime fraction of `per_million` / 1,000,000.
pub fn with_fraction(mut m: route::RouteMatch, per_million: u32) -> route::RouteMatch {
    m.runtime_fraction = Some(core::RuntimeFractionalPercent {
        default_value: Some(types::FractionalPercent {
            numerator: per_million,
            denominator: types::fractional_percent::DenominatorType::Million as i32,
        }),
        runtime_key: String::new(),
    });
    m
}

/// A header matcher. gRPC requires a non-empty `name` and a match specifier.
pub fn header(
    name: &str,
    spec: route::header_matcher::HeaderMatchSpecifier,
    invert: bool,
) -> route::HeaderMatcher {
    #[allow(deprecated)]
    route::HeaderMatcher {
        name: name.to_string(),
        header_match_specifier: Some(spec),
        invert_match: invert,
        ..Default::default()
    }
}

/// A `string_match` specifier.
pub fn string_match(
    pattern: matcher::string_matcher::MatchPattern,
    ignore_case: bool,
) -> route::header_matcher::HeaderMatchSpecifier {
    route::header_matcher::HeaderMatchSpecifier::StringMatch(matcher::StringMatcher {
        match_pattern: Some(pattern),
        ignore_case,
    })
}

/// A `RegexMatcher`.
pub fn regex_matcher(r: &str) -> matcher::RegexMatcher {
    matcher::RegexMatcher {
        regex: r.to_string(),
        ..Default::default()
    }
}

/// An `Int64Range`.
pub fn range(start: i64, end: i64) -> types::Int64Range {
    types::Int64Range { start, end }
}

/// A route action sending to one cluster (gRPC requires a non-empty name).
pub fn cluster_action(name: &str) -> route::RouteAction {
    route::RouteAction {
        cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(
            name.to_string(),
        )),
        ..Default::default()
    }
}

/// A route action splitting over weighted clusters, `(name, weight)`. gRPC requires
/// non-empty names; clusters of weight 0 are skipped, and the sum must be above 0 and at
/// most `u32::MAX`.
pub fn weighted_action(clusters: &[(&str, u32)]) -> route::RouteAction {
    route::RouteAction {
        cluster_specifier: Some(route::route_action::ClusterSpecifier::WeightedClusters(
            route::WeightedCluster {
                clusters: clusters
                    .iter()
                    .map(|(name, weight)| route::weighted_cluster::ClusterWeight {
                        name: name.to_string(),
                        weight: Some(UInt32Value { value: *weight }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// A route action naming a cluster specifier plugin, which the route configuration
/// must declare in `cluster_specifier_plugins` (see [`rls_plugin`]).
pub fn plugin_action(plugin: &str) -> route::RouteAction {
    route::RouteAction {
        cluster_specifier: Some(
            route::route_action::ClusterSpecifier::ClusterSpecifierPlugin(plugin.to_string()),
        ),
        ..Default::default()
    }
}

/// The action with `max_stream_duration` settings (A31); durations must be valid.
pub fn with_stream_duration(
    mut action: route::RouteAction,
    max_stream_duration: Option<Duration>,
    grpc_timeout_header_max: Option<Duration>,
) -> route::RouteAction {
    action.max_stream_duration = Some(route::route_action::MaxStreamDuration {
        max_stream_duration: max_stream_duration.map(pb_duration),
        grpc_timeout_header_max: grpc_timeout_header_max.map(pb_duration),
        grpc_timeout_header_offset: None,
    });
    action
}

/// The action with a retry policy (gRPC requires `num_retries` above 0 when set and
/// valid back-off intervals).
pub fn with_retry(
    mut action: route::RouteAction,
    policy: route::RetryPolicy,
) -> route::RouteAction {
    action.retry_policy = Some(policy);
    action
}

/// A route forwarding with `action`.
pub fn forward(m: route::RouteMatch, action: route::RouteAction) -> route::Route {
    route::Route {
        r#match: Some(m),
        action: Some(route::route::Action::Route(Box::new(action))),
        ..Default::default()
    }
}

/// A route sending what `m` matches to `cluster_name`.
pub fn to_cluster(m: route::RouteMatch, cluster_name: &str) -> route::Route {
    forward(m, cluster_action(cluster_name))
}

/// A route with a `non_forwarding_action` (servers only).
pub fn non_forwarding(m: route::RouteMatch) -> route::Route {
    route::Route {
        r#match: Some(m),
        action: Some(route::route::Action::NonForwardingAction(
            route::NonForwardingAction {},
        )),
        ..Default::default()
    }
}

/// A route with a `redirect` action: accepted, but gRPC clients fail the RPCs it matches.
pub fn redirect(m: route::RouteMatch) -> route::Route {
    route::Route {
        r#match: Some(m),
        action: Some(route::route::Action::Redirect(
            route::RedirectAction::default(),
        )),
        ..Default::default()
    }
}

/// A virtual host. gRPC requires every domain to be non-empty with at most one `*`,
/// at its start or its end.
pub fn vhost(name: &str, domains: &[&str], routes: Vec<route::Route>) -> route::VirtualHost {
    route::VirtualHost {
        name: name.to_string(),
        domains: domains.iter().map(|d| d.to_string()).collect(),
        routes,
        ..Default::default()
    }
}

/// A route configuration. gRPC requires its virtual hosts, routes and declared cluster
/// specifier plugins to be valid; a route naming an undeclared plugin is a NACK.
pub fn route_config_of(name: &str, vhosts: Vec<route::VirtualHost>) -> route::RouteConfiguration {
    route::RouteConfiguration {
        name: name.to_string(),
        virtual_hosts: vhosts,
        ..Default::default()
    }
}

/// A route configuration with one `*` virtual host holding `routes`.
pub fn routes_config(name: &str, routes: Vec<route::Route>) -> route::RouteConfiguration {
    route_config_of(name, vec![vhost("vh", &["*"], routes)])
}

/// A route configuration as an `Any`.
pub fn rc_any(rc: &route::RouteConfiguration) -> Any {
    any(type_url::ROUTE_CONFIGURATION, rc)
}

/// Decodes a route configuration with the core's RDS decoder.
pub fn decode_rc(rc: &route::RouteConfiguration) -> Result<RouteConfigResource, String> {
    xds_proto_core::resource::route::decode(&rc.encode_to_vec())
        .map(|(_, v)| v)
        .map_err(|e| e.message)
}

/// The RLS cluster specifier plugin (with an empty config) named `name`.
pub fn rls_plugin(name: &str) -> route::ClusterSpecifierPlugin {
    route::ClusterSpecifierPlugin {
        extension: Some(core::TypedExtensionConfig {
            name: name.to_string(),
            typed_config: Some(Any {
                type_url: "type.googleapis.com/grpc.lookup.v1.RouteLookupClusterSpecifier"
                    .to_string(),
                value: Bytes::from_static(b"\x0a\x00"),
            }),
        }),
        is_optional: false,
    }
}

/// Where a [`PrefixRoute`] sends its requests.
#[derive(Clone, Debug)]
pub enum RouteTarget {
    /// One cluster.
    Cluster(String),
    /// Weighted clusters: (name, weight).
    Weighted(Vec<(String, u32)>),
}

/// A route matching a path prefix, for [`route_config_with`].
#[derive(Clone, Debug)]
pub struct PrefixRoute {
    /// The path prefix (`""` or `"/"` matches everything).
    pub prefix: String,
    /// Where it goes.
    pub target: RouteTarget,
}

impl PrefixRoute {
    /// A route sending what starts with `prefix` to `cluster`.
    pub fn cluster(prefix: &str, cluster: &str) -> PrefixRoute {
        PrefixRoute {
            prefix: prefix.to_string(),
            target: RouteTarget::Cluster(cluster.to_string()),
        }
    }

    /// A route splitting what starts with `prefix` over weighted clusters.
    pub fn weighted(prefix: &str, clusters: &[(&str, u32)]) -> PrefixRoute {
        PrefixRoute {
            prefix: prefix.to_string(),
            target: RouteTarget::Weighted(
                clusters.iter().map(|(c, w)| (c.to_string(), *w)).collect(),
            ),
        }
    }

    /// The route as an Envoy `Route`.
    pub fn to_route(&self) -> route::Route {
        let action = match &self.target {
            RouteTarget::Cluster(c) => cluster_action(c),
            RouteTarget::Weighted(ws) => {
                let ws: Vec<(&str, u32)> = ws.iter().map(|(c, w)| (c.as_str(), *w)).collect();
                weighted_action(&ws)
            }
        };
        forward(prefix(&self.prefix), action)
    }
}

/// A route configuration with one virtual host, named `{name}-vhost`, for `domains`,
/// holding `routes` in order. The requirements are those of [`route_config_of`].
pub fn prefix_routes_config(
    name: &str,
    domains: &[&str],
    routes: &[PrefixRoute],
) -> route::RouteConfiguration {
    route_config_of(
        name,
        vec![vhost(
            &format!("{name}-vhost"),
            domains,
            routes.iter().map(PrefixRoute::to_route).collect(),
        )],
    )
}

/// [`prefix_routes_config`] as an `Any`.
pub fn route_config_with(name: &str, domains: &[&str], routes: &[PrefixRoute]) -> Any {
    rc_any(&prefix_routes_config(name, domains, routes))
}

/// A route configuration sending every path of every domain (`*`) to `cluster`.
pub fn route_config_msg(name: &str, cluster: &str) -> route::RouteConfiguration {
    prefix_routes_config(name, &["*"], &[PrefixRoute::cluster("", cluster)])
}

/// [`route_config_msg`] as an `Any`.
pub fn route_config(name: &str, cluster: &str) -> Any {
    rc_any(&route_config_msg(name, cluster))
}
