//! Decoding a `RouteConfiguration` down to its route matchers: the declared cluster
//! specifier plugins, virtual hosts and their domain patterns, and each route's path,
//! header and `runtime_fraction` matchers. Route actions are checked in `action`.

use std::collections::BTreeSet;

use super::action::{parse_filter_overrides, parse_forward_action, parse_retry_policy};
use super::*;
use crate::pb::envoy::config::route::v3 as route_pb;
use crate::pb::envoy::r#type::matcher::v3 as matcher_pb;
use crate::resource::DecodeError;
use crate::resource::validate::{
    FieldError, decode_resource, fraction_per_million, optional, required, typed_config,
};

/// Decodes and validates one serialized `RouteConfiguration`.
pub fn decode(bytes: &[u8]) -> Result<(String, RouteConfigResource), DecodeError> {
    // A valid configuration is decoded one route at a time; anything else takes the
    // whole-message path below, which gives the error.
    if let Some(valid) = super::by_route::decode_valid(bytes) {
        return Ok(valid);
    }
    let rc: route_pb::RouteConfiguration = decode_resource(bytes, "RouteConfiguration")?;
    let value = parse_route_configuration(&rc).map_err(|e| e.into_decode_error(&rc.name))?;
    Ok((rc.name, value))
}

/// The state of a declared cluster specifier plugin while routes are validated.
pub(super) enum PluginState {
    /// Supported: kept if a route refers to it.
    Supported(ClusterSpecifierPlugin),
    /// Unsupported but optional: routes that refer to it are ignored.
    OptionalUnsupported,
}

/// Validates a `RouteConfiguration` (from RDS or inline in an HCM). Error paths are
/// relative to the `RouteConfiguration`.
pub(in crate::resource) fn parse_route_configuration(
    rc: &route_pb::RouteConfiguration,
) -> Result<RouteConfigResource, FieldError> {
    let plugins = parse_cluster_specifier_plugins(&rc.cluster_specifier_plugins)?;
    let mut virtual_hosts = Vec::with_capacity(rc.virtual_hosts.len());
    for (i, vh) in rc.virtual_hosts.iter().enumerate() {
        virtual_hosts
            .push(parse_virtual_host(vh, &plugins).map_err(|e| e.at_index("virtual_hosts", i))?);
    }
    Ok(assemble(rc.name.clone(), virtual_hosts, plugins))
}

/// The configuration from its validated virtual hosts, keeping the supported plugins
/// that some route refers to.
pub(super) fn assemble(
    name: String,
    virtual_hosts: Vec<VirtualHost>,
    plugins: Vec<(String, PluginState)>,
) -> RouteConfigResource {
    let used: BTreeSet<&str> = virtual_hosts
        .iter()
        .flat_map(|vh| vh.routes.iter())
        .filter_map(|r| match &r.action {
            RouteAction::Forward(f) => match &f.cluster {
                ClusterSpecifier::ClusterSpecifierPlugin(name) => Some(name.as_str()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let cluster_specifier_plugins = plugins
        .into_iter()
        .filter_map(|(_, state)| match state {
            PluginState::Supported(p) if used.contains(p.name.as_str()) => Some(p),
            _ => None,
        })
        .collect();
    RouteConfigResource {
        name,
        virtual_hosts,
        cluster_specifier_plugins,
    }
}

pub(super) fn parse_cluster_specifier_plugins(
    plugins: &[route_pb::ClusterSpecifierPlugin],
) -> Result<Vec<(String, PluginState)>, FieldError> {
    let mut out: Vec<(String, PluginState)> = Vec::with_capacity(plugins.len());
    let mut seen = BTreeSet::new();
    for (i, plugin) in plugins.iter().enumerate() {
        let at = |e: FieldError| e.at_index("cluster_specifier_plugins", i);
        let ext = required(plugin.extension.as_ref(), "extension").map_err(at)?;
        if ext.name.is_empty() {
            return Err(at(FieldError::new("extension.name", "must be non-empty")));
        }
        if !seen.insert(ext.name.as_str()) {
            return Err(at(FieldError::new(
                "extension.name",
                format!("duplicate cluster specifier plugin name {:?}", ext.name),
            )));
        }
        let any = required(ext.typed_config.as_ref(), "extension.typed_config").map_err(at)?;
        let config = typed_config(any).map_err(|e| at(e.at("extension.typed_config")))?;
        let state = if SUPPORTED_CLUSTER_SPECIFIER_PLUGINS.contains(&config.type_name()) {
            PluginState::Supported(ClusterSpecifierPlugin {
                name: ext.name.clone(),
                config,
            })
        } else if plugin.is_optional {
            PluginState::OptionalUnsupported
        } else {
            return Err(at(FieldError::new(
                "extension.typed_config",
                format!(
                    "unsupported cluster specifier plugin type {:?}",
                    config.type_url
                ),
            )));
        };
        out.push((ext.name.clone(), state));
    }
    Ok(out)
}

pub(super) fn find_plugin<'a>(
    plugins: &'a [(String, PluginState)],
    name: &str,
) -> Option<&'a PluginState> {
    plugins.iter().find(|(n, _)| n == name).map(|(_, s)| s)
}

fn parse_virtual_host(
    vh: &route_pb::VirtualHost,
    plugins: &[(String, PluginState)],
) -> Result<VirtualHost, FieldError> {
    let mut host = parse_virtual_host_settings(vh)?;
    host.routes.reserve(vh.routes.len());
    for (i, r) in vh.routes.iter().enumerate() {
        if let Some(route) = parse_route(r, plugins).map_err(|e| e.at_index("routes", i))? {
            host.routes.push(route);
        }
    }
    Ok(host)
}

/// A virtual host's own settings, checked; its routes are left empty (see
/// [`parse_route`]).
pub(super) fn parse_virtual_host_settings(
    vh: &route_pb::VirtualHost,
) -> Result<VirtualHost, FieldError> {
    let mut domains = Vec::with_capacity(vh.domains.len());
    for (i, d) in vh.domains.iter().enumerate() {
        domains.push(parse_domain(d).map_err(|msg| FieldError::new(format!("domains[{i}]"), msg))?);
    }
    let retry_policy = optional(vh.retry_policy.as_ref(), "retry_policy", parse_retry_policy)?;
    let typed_per_filter_config = parse_filter_overrides(&vh.typed_per_filter_config)
        .map_err(|e| e.at("typed_per_filter_config"))?;
    Ok(VirtualHost {
        name: vh.name.clone(),
        domains,
        routes: Vec::new(),
        retry_policy,
        typed_per_filter_config,
    })
}

/// Validates one domain pattern: at most one `*`, only at the start or the end.
fn parse_domain(domain: &str) -> Result<DomainPattern, String> {
    if domain.is_empty() {
        return Err("must be non-empty".to_owned());
    }
    if domain == "*" {
        return Ok(DomainPattern::Any);
    }
    let lower = domain.to_ascii_lowercase();
    let wildcards = lower.bytes().filter(|&b| b == b'*').count();
    if wildcards == 0 {
        return Ok(DomainPattern::Exact(lower));
    }
    if wildcards == 1 {
        if let Some(suffix) = lower.strip_prefix('*') {
            return Ok(DomainPattern::Suffix(suffix.to_owned()));
        }
        if let Some(prefix) = lower.strip_suffix('*') {
            return Ok(DomainPattern::Prefix(prefix.to_owned()));
        }
    }
    Err(format!(
        "invalid domain pattern {domain:?}: at most one wildcard, at the start or the end"
    ))
}

/// Validates one route; `Ok(None)` means gRPC ignores the route.
pub(super) fn parse_route(
    r: &route_pb::Route,
    plugins: &[(String, PluginState)],
) -> Result<Option<Route>, FieldError> {
    let m = required(r.r#match.as_ref(), "match")?;
    // gRPC ignores routes with matchers it cannot evaluate (`grpc` always holds for a gRPC
    // client, so it is simply accepted).
    if !m.query_parameters.is_empty()
        || m.tls_context.is_some()
        || !m.dynamic_metadata.is_empty()
        || !m.cookies.is_empty()
        || !m.filter_state.is_empty()
    {
        return Ok(None);
    }
    let matcher = parse_route_match(m).map_err(|e| e.at("match"))?;
    let action = match &r.action {
        Some(route_pb::route::Action::Route(ra)) => {
            match parse_forward_action(ra, plugins).map_err(|e| e.at("route"))? {
                Some(forward) => RouteAction::Forward(Box::new(forward)),
                None => return Ok(None),
            }
        }
        Some(route_pb::route::Action::NonForwardingAction(_)) => RouteAction::NonForwarding,
        Some(
            route_pb::route::Action::Redirect(_)
            | route_pb::route::Action::DirectResponse(_)
            | route_pb::route::Action::FilterAction(_),
        )
        | None => RouteAction::Unsupported,
    };
    let typed_per_filter_config = parse_filter_overrides(&r.typed_per_filter_config)
        .map_err(|e| e.at("typed_per_filter_config"))?;
    Ok(Some(Route {
        matcher,
        action,
        typed_per_filter_config,
    }))
}

fn parse_route_match(m: &route_pb::RouteMatch) -> Result<RouteMatch, FieldError> {
    use route_pb::route_match::PathSpecifier;
    let path = match &m.path_specifier {
        Some(PathSpecifier::Prefix(p)) => PathMatcher::Prefix(p.clone()),
        Some(PathSpecifier::Path(p)) => PathMatcher::Path(p.clone()),
        Some(PathSpecifier::SafeRegex(r)) => {
            PathMatcher::SafeRegex(compile_regex(&r.regex, true).map_err(|e| e.at("safe_regex"))?)
        }
        Some(PathSpecifier::ConnectMatcher(_)) => {
            return Err(FieldError::new(
                "connect_matcher",
                "unsupported path specifier",
            ));
        }
        Some(PathSpecifier::PathSeparatedPrefix(_)) => {
            return Err(FieldError::new(
                "path_separated_prefix",
                "unsupported path specifier",
            ));
        }
        Some(PathSpecifier::PathMatchPolicy(_)) => {
            return Err(FieldError::new(
                "path_match_policy",
                "unsupported path specifier",
            ));
        }
        None => {
            return Err(FieldError::new(
                "",
                "no path specifier (prefix, path or safe_regex) is set",
            ));
        }
    };
    let case_sensitive = m.case_sensitive.as_ref().is_none_or(|b| b.value);
    let mut headers = Vec::with_capacity(m.headers.len());
    for (i, h) in m.headers.iter().enumerate() {
        headers.push(parse_header_matcher(h).map_err(|e| e.at_index("headers", i))?);
    }
    let runtime_fraction_per_million = optional(
        m.runtime_fraction
            .as_ref()
            .and_then(|rf| rf.default_value.as_ref()),
        "runtime_fraction.default_value",
        fraction_per_million,
    )?;
    Ok(RouteMatch {
        path,
        case_sensitive,
        headers,
        runtime_fraction_per_million,
    })
}

#[allow(deprecated)]
pub(crate) fn parse_header_matcher(
    h: &route_pb::HeaderMatcher,
) -> Result<HeaderMatcher, FieldError> {
    use route_pb::header_matcher::HeaderMatchSpecifier as Spec;
    if h.name.is_empty() {
        return Err(FieldError::new("name", "must be non-empty"));
    }
    let kind = match &h.header_match_specifier {
        Some(Spec::ExactMatch(v)) => HeaderMatchKind::String(StringMatcher::Exact {
            value: v.clone(),
            ignore_case: false,
        }),
        Some(Spec::PrefixMatch(v)) => HeaderMatchKind::String(StringMatcher::Prefix {
            value: v.clone(),
            ignore_case: false,
        }),
        Some(Spec::SuffixMatch(v)) => HeaderMatchKind::String(StringMatcher::Suffix {
            value: v.clone(),
            ignore_case: false,
        }),
        Some(Spec::ContainsMatch(v)) => HeaderMatchKind::String(StringMatcher::Contains {
            value: v.clone(),
            ignore_case: false,
        }),
        Some(Spec::SafeRegexMatch(r)) => HeaderMatchKind::String(StringMatcher::SafeRegex(
            compile_regex(&r.regex, true).map_err(|e| e.at("safe_regex_match"))?,
        )),
        Some(Spec::RangeMatch(r)) => {
            if r.start >= r.end {
                return Err(FieldError::new(
                    "range_match",
                    format!("start ({}) must be less than end ({})", r.start, r.end),
                ));
            }
            HeaderMatchKind::Range {
                start: r.start,
                end: r.end,
            }
        }
        Some(Spec::PresentMatch(p)) => HeaderMatchKind::Present(*p),
        Some(Spec::StringMatch(sm)) => {
            HeaderMatchKind::String(parse_string_matcher(sm).map_err(|e| e.at("string_match"))?)
        }
        None => return Err(FieldError::new("", "no header match specifier is set")),
    };
    Ok(HeaderMatcher {
        name: h.name.clone(),
        kind,
        invert_match: h.invert_match,
    })
}

/// Validates an `envoy.type.matcher.v3.StringMatcher`.
pub(crate) fn parse_string_matcher(
    sm: &matcher_pb::StringMatcher,
) -> Result<StringMatcher, FieldError> {
    use matcher_pb::string_matcher::MatchPattern;
    let ignore_case = sm.ignore_case;
    Ok(match &sm.match_pattern {
        Some(MatchPattern::Exact(v)) => StringMatcher::Exact {
            value: v.clone(),
            ignore_case,
        },
        Some(MatchPattern::Prefix(v)) => StringMatcher::Prefix {
            value: v.clone(),
            ignore_case,
        },
        Some(MatchPattern::Suffix(v)) => StringMatcher::Suffix {
            value: v.clone(),
            ignore_case,
        },
        Some(MatchPattern::Contains(v)) => StringMatcher::Contains {
            value: v.clone(),
            ignore_case,
        },
        Some(MatchPattern::SafeRegex(r)) => {
            if ignore_case {
                return Err(FieldError::new(
                    "ignore_case",
                    "not supported with safe_regex",
                ));
            }
            StringMatcher::SafeRegex(compile_regex(&r.regex, true).map_err(|e| e.at("safe_regex"))?)
        }
        Some(MatchPattern::Custom(_)) => {
            return Err(FieldError::new("custom", "unsupported match pattern"));
        }
        None => return Err(FieldError::new("", "no match pattern is set")),
    })
}
