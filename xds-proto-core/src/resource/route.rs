//! RDS: decoding and validating `envoy.config.route.v3.RouteConfiguration` into a compact
//! [`RouteConfigResource`], following gRPC's rules (gRFCs A27, A28, A31, A39, A42, A44 and
//! the RLS cluster-specifier-plugin rules).
//!
//! The module owns the route types the config selector consumes: virtual hosts and their
//! domain patterns, route matchers (path, headers, runtime fraction), route actions,
//! retry and hash policies and per-route filter overrides. The HCM decoder in the
//! `listener` module reuses this module's validation for inline route configurations.
//!
//! It also hosts the small field-validation helpers the other decoders share: error
//! paths (`FieldError`), `google.protobuf.Duration` and `FractionalPercent` conversion,
//! `Any` type-URL handling and regex compilation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;

use super::DecodeError;
use super::listener;
use crate::pb::envoy::config::route::v3 as route_pb;
use crate::pb::envoy::r#type::matcher::v3 as matcher_pb;
use crate::pb::envoy::r#type::v3 as type_pb;
use crate::pb::google::protobuf as pbuf;

/// Type name of the only cluster specifier plugin gRPC supports: RLS (gRFC A28 update).
pub const RLS_CLUSTER_SPECIFIER_PLUGIN: &str = "grpc.lookup.v1.RouteLookupClusterSpecifier";

/// Type names (the part of a type URL after the last `/`) of the supported cluster
/// specifier plugins.
pub const SUPPORTED_CLUSTER_SPECIFIER_PLUGINS: &[&str] = &[RLS_CLUSTER_SPECIFIER_PLUGIN];

/// The compiled-program size limit for every regex in a resource, in bytes.
pub const MAX_REGEX_SIZE: usize = 1 << 20;

/// The cap gRPC puts on retry attempts (gRFC A44): `max_attempts` never exceeds this.
pub const MAX_RETRY_ATTEMPTS: u32 = 5;

/// The retry back-off base interval used when the policy has no `retry_back_off`.
pub const DEFAULT_RETRY_BASE_INTERVAL: Duration = Duration::from_millis(25);

/// The filter-state key of the only filter-state hash policy gRPC supports (A42).
pub const CHANNEL_ID_HASH_KEY: &str = "io.grpc.channel_id";

/// A validated `RouteConfiguration`.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteConfigResource {
    /// The resource name.
    pub name: String,
    /// The virtual hosts, in order.
    pub virtual_hosts: Vec<VirtualHost>,
    /// The supported cluster specifier plugins that at least one kept route refers to,
    /// in declaration order (plugins no route uses are dropped, as gRPC does).
    pub cluster_specifier_plugins: Vec<ClusterSpecifierPlugin>,
}

impl RouteConfigResource {
    /// The cluster specifier plugin named `name`, if kept.
    pub fn cluster_specifier_plugin(&self, name: &str) -> Option<&ClusterSpecifierPlugin> {
        self.cluster_specifier_plugins
            .iter()
            .find(|p| p.name == name)
    }
}

/// A cluster specifier plugin instance (`RouteConfiguration.cluster_specifier_plugins`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpecifierPlugin {
    /// The extension instance name routes refer to.
    pub name: String,
    /// The plugin's configuration.
    pub config: TypedConfig,
}

/// An extension's configuration as received in a `google.protobuf.Any`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedConfig {
    /// The config's type URL. When the config arrived wrapped in a `TypedStruct`, this is
    /// the type URL the `TypedStruct` names.
    pub type_url: String,
    /// The serialized `Any.value`, exactly as received (the `TypedStruct` itself when
    /// [`typed_struct`](Self::typed_struct) is set).
    pub value: Bytes,
    /// Whether the config was wrapped in `xds.type.v3.TypedStruct` or
    /// `udpa.type.v1.TypedStruct`.
    pub typed_struct: bool,
}

impl TypedConfig {
    /// The type name: the part of [`type_url`](Self::type_url) after the last `/`.
    pub fn type_name(&self) -> &str {
        type_name(&self.type_url)
    }
}

/// A validated virtual host.
#[derive(Clone, Debug, PartialEq)]
pub struct VirtualHost {
    /// The virtual host's name.
    pub name: String,
    /// The domain patterns, in order (may be empty: such a host matches nothing).
    pub domains: Vec<DomainPattern>,
    /// The routes, in order, without the ones gRPC ignores (query-parameter matchers,
    /// unsupported cluster specifiers, optional unsupported plugins, ...).
    pub routes: Vec<Route>,
    /// The virtual host's retry policy; a route's own policy overrides it.
    pub retry_policy: Option<RetryPolicy>,
    /// HTTP filter config overrides, by filter instance name (gRFC A39).
    pub typed_per_filter_config: BTreeMap<String, FilterConfigOverride>,
}

/// A virtual host domain pattern. Patterns are stored lower-case; hosts match
/// case-insensitively.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DomainPattern {
    /// No wildcard: the host must equal the pattern.
    Exact(String),
    /// `*<suffix>`: the host must end with the suffix (held without the `*`) and be
    /// longer than it.
    Suffix(String),
    /// `<prefix>*`: the host must start with the prefix (held without the `*`) and be
    /// longer than it.
    Prefix(String),
    /// `*`: every host.
    Any,
}

impl DomainPattern {
    /// Whether `host` matches this pattern (ASCII case-insensitively).
    pub fn matches(&self, host: &str) -> bool {
        let host = host.as_bytes();
        match self {
            DomainPattern::Exact(p) => host.eq_ignore_ascii_case(p.as_bytes()),
            DomainPattern::Suffix(s) => {
                host.len() > s.len()
                    && host
                        .get(host.len() - s.len()..)
                        .is_some_and(|tail| tail.eq_ignore_ascii_case(s.as_bytes()))
            }
            DomainPattern::Prefix(p) => {
                host.len() > p.len()
                    && host
                        .get(..p.len())
                        .is_some_and(|head| head.eq_ignore_ascii_case(p.as_bytes()))
            }
            DomainPattern::Any => true,
        }
    }
}

/// A validated route.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// What the route matches.
    pub matcher: RouteMatch,
    /// What happens to RPCs it matches.
    pub action: RouteAction,
    /// HTTP filter config overrides, by filter instance name (gRFC A39).
    pub typed_per_filter_config: BTreeMap<String, FilterConfigOverride>,
}

/// A route's match conditions; all must hold.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteMatch {
    /// The path matcher.
    pub path: PathMatcher,
    /// Whether prefix and path matching is case-sensitive (default true; ignored for
    /// regexes).
    pub case_sensitive: bool,
    /// Header matchers.
    pub headers: Vec<HeaderMatcher>,
    /// `runtime_fraction.default_value` in parts per million (at most 1,000,000), if set.
    pub runtime_fraction_per_million: Option<u32>,
}

/// How a route matches the request path (`/service/method`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathMatcher {
    /// The path starts with this prefix.
    Prefix(String),
    /// The path equals this string.
    Path(String),
    /// The whole path matches this regex.
    SafeRegex(SafeRegex),
}

/// A compiled regex from a resource. Two values are equal when their patterns and
/// anchoring are equal.
#[derive(Clone)]
pub struct SafeRegex {
    pattern: String,
    full_match: bool,
    regex: regex::Regex,
}

impl SafeRegex {
    /// The pattern as received.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether the regex must match the whole input (matchers) rather than any part of it
    /// (rewrites).
    pub fn is_full_match(&self) -> bool {
        self.full_match
    }

    /// Whether `text` matches: the whole of it for full-match regexes, any part otherwise.
    pub fn is_match(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }

    /// The compiled regex (anchored as `^(?:pattern)$` for full-match regexes).
    pub fn regex(&self) -> &regex::Regex {
        &self.regex
    }
}

impl PartialEq for SafeRegex {
    fn eq(&self, other: &SafeRegex) -> bool {
        self.full_match == other.full_match && self.pattern == other.pattern
    }
}

impl Eq for SafeRegex {}

impl fmt::Debug for SafeRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SafeRegex")
            .field("pattern", &self.pattern)
            .field("full_match", &self.full_match)
            .finish()
    }
}

/// A header matcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderMatcher {
    /// The header name (non-empty; `-bin` headers are accepted).
    pub name: String,
    /// The match condition.
    pub kind: HeaderMatchKind,
    /// Whether the result is inverted.
    pub invert_match: bool,
}

/// A header match condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderMatchKind {
    /// The header value matches a string matcher (`exact_match`, `prefix_match`,
    /// `suffix_match`, `contains_match`, `safe_regex_match` or `string_match`).
    String(StringMatcher),
    /// The header value, as an integer, is in `[start, end)`.
    Range {
        /// Inclusive start.
        start: i64,
        /// Exclusive end; always greater than `start`.
        end: i64,
    },
    /// The header is present (`true`) or absent (`false`).
    Present(bool),
}

/// A string matcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StringMatcher {
    /// The value equals `value`.
    Exact {
        /// The expected value.
        value: String,
        /// Whether to compare ASCII case-insensitively.
        ignore_case: bool,
    },
    /// The value starts with `value`.
    Prefix {
        /// The expected prefix.
        value: String,
        /// Whether to compare ASCII case-insensitively.
        ignore_case: bool,
    },
    /// The value ends with `value`.
    Suffix {
        /// The expected suffix.
        value: String,
        /// Whether to compare ASCII case-insensitively.
        ignore_case: bool,
    },
    /// The value contains `value`.
    Contains {
        /// The expected substring.
        value: String,
        /// Whether to compare ASCII case-insensitively.
        ignore_case: bool,
    },
    /// The whole value matches the regex.
    SafeRegex(SafeRegex),
}

/// What a route does with the RPCs it matches.
#[derive(Clone, Debug, PartialEq)]
pub enum RouteAction {
    /// Route to a cluster (the `route` action).
    Forward(Box<ForwardAction>),
    /// `non_forwarding_action`: only meaningful on servers; a client fails such RPCs.
    NonForwarding,
    /// `redirect`, `direct_response`, `filter_action` or no action: gRPC fails RPCs that
    /// match such a route.
    Unsupported,
}

/// A validated `RouteAction`.
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardAction {
    /// Where RPCs go.
    pub cluster: ClusterSpecifier,
    /// `timeout` (not used by gRPC's timeout model, kept for completeness; A31).
    pub timeout: Option<Duration>,
    /// `max_stream_duration.max_stream_duration` (A31).
    pub max_stream_duration: Option<Duration>,
    /// `max_stream_duration.grpc_timeout_header_max`; when set it takes precedence over
    /// [`max_stream_duration`](Self::max_stream_duration) (A31).
    pub grpc_timeout_header_max: Option<Duration>,
    /// The route's retry policy; when `None` the virtual host's applies.
    pub retry_policy: Option<RetryPolicy>,
    /// Hash policies for ring-hash load balancing (A42), in order.
    pub hash_policies: Vec<HashPolicy>,
}

impl ForwardAction {
    /// The route's effective stream-duration cap per A31: `grpc_timeout_header_max` if
    /// set, else `max_stream_duration`. `None` means "fall back to the HCM's value";
    /// zero means "no cap".
    pub fn effective_max_stream_duration(&self) -> Option<Duration> {
        self.grpc_timeout_header_max.or(self.max_stream_duration)
    }
}

/// How a route picks its cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterSpecifier {
    /// A single cluster.
    Cluster(String),
    /// Clusters picked at random by weight; never empty, weights non-zero, their sum
    /// fits in a `u32`.
    WeightedClusters(Vec<WeightedCluster>),
    /// The name of a cluster specifier plugin in
    /// [`RouteConfigResource::cluster_specifier_plugins`].
    ClusterSpecifierPlugin(String),
}

/// One weighted cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightedCluster {
    /// The cluster name (non-empty).
    pub name: String,
    /// The weight (non-zero).
    pub weight: u32,
    /// HTTP filter config overrides, by filter instance name (gRFC A39).
    pub typed_per_filter_config: BTreeMap<String, FilterConfigOverride>,
}

/// An HTTP filter config override (`typed_per_filter_config` value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterConfigOverride {
    /// The override config; `None` only for a `FilterConfig` with `disabled` set and no
    /// config.
    pub config: Option<TypedConfig>,
    /// `FilterConfig.is_optional`.
    pub is_optional: bool,
    /// `FilterConfig.disabled`: the filter is disabled for this scope.
    pub disabled: bool,
}

/// A hash policy (A42).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashPolicy {
    /// Hash a request header.
    Header {
        /// The header name.
        header_name: String,
        /// An optional rewrite applied to the value before hashing.
        regex_rewrite: Option<RegexRewrite>,
        /// Stop evaluating policies if this one produced a hash.
        terminal: bool,
    },
    /// Hash the channel's identity (`filter_state` key `io.grpc.channel_id`).
    ChannelId {
        /// Stop evaluating policies if this one produced a hash.
        terminal: bool,
    },
}

/// A regex substitution (`RegexMatchAndSubstitute`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegexRewrite {
    /// The (unanchored) pattern.
    pub pattern: SafeRegex,
    /// The substitution, as received (RE2 syntax: `\1` for group 1).
    pub substitution: String,
}

/// A gRPC status code that a retry policy may name (A44).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RetryableCode {
    /// `cancelled` (1).
    Cancelled,
    /// `deadline-exceeded` (4).
    DeadlineExceeded,
    /// `resource-exhausted` (8).
    ResourceExhausted,
    /// `internal` (13).
    Internal,
    /// `unavailable` (14).
    Unavailable,
}

impl RetryableCode {
    /// The numeric gRPC status code.
    pub fn code(self) -> u32 {
        match self {
            RetryableCode::Cancelled => 1,
            RetryableCode::DeadlineExceeded => 4,
            RetryableCode::ResourceExhausted => 8,
            RetryableCode::Internal => 13,
            RetryableCode::Unavailable => 14,
        }
    }
}

/// An HTTP-level `retry_on` condition (Envoy's `x-envoy-retry-on` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HttpRetryCondition {
    /// `5xx`.
    FiveXx,
    /// `gateway-error`.
    GatewayError,
    /// `reset`.
    Reset,
    /// `connect-failure`.
    ConnectFailure,
    /// `retriable-4xx`.
    Retriable4xx,
    /// `refused-stream`.
    RefusedStream,
    /// `retriable-status-codes` (see [`RetryPolicy::retriable_status_codes`]).
    RetriableStatusCodes,
    /// `retriable-headers`.
    RetriableHeaders,
}

const GRPC_RETRY_ON: &[(&str, RetryableCode)] = &[
    ("cancelled", RetryableCode::Cancelled),
    ("deadline-exceeded", RetryableCode::DeadlineExceeded),
    ("internal", RetryableCode::Internal),
    ("resource-exhausted", RetryableCode::ResourceExhausted),
    ("unavailable", RetryableCode::Unavailable),
];

const HTTP_RETRY_ON: &[(&str, HttpRetryCondition)] = &[
    ("5xx", HttpRetryCondition::FiveXx),
    ("gateway-error", HttpRetryCondition::GatewayError),
    ("reset", HttpRetryCondition::Reset),
    ("connect-failure", HttpRetryCondition::ConnectFailure),
    ("retriable-4xx", HttpRetryCondition::Retriable4xx),
    ("refused-stream", HttpRetryCondition::RefusedStream),
    (
        "retriable-status-codes",
        HttpRetryCondition::RetriableStatusCodes,
    ),
    ("retriable-headers", HttpRetryCondition::RetriableHeaders),
];

/// A validated retry policy (A44 plus the HTTP conditions of Contour's retryOn design).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The gRPC status codes that trigger a retry, sorted, without duplicates. When
    /// empty, gRPC does not retry.
    pub retryable_codes: Vec<RetryableCode>,
    /// The HTTP conditions named in `retry_on`, sorted, without duplicates.
    pub http_conditions: Vec<HttpRetryCondition>,
    /// `retriable_status_codes` (HTTP status codes), as received.
    pub retriable_status_codes: Vec<u32>,
    /// `num_retries` (default 1, never 0).
    pub num_retries: u32,
    /// `min(num_retries + 1, 5)`: the attempts gRPC makes at most.
    pub max_attempts: u32,
    /// `per_try_timeout`, if set.
    pub per_try_timeout: Option<Duration>,
    /// Back-off base interval (non-zero; default 25 ms).
    pub base_interval: Duration,
    /// Back-off maximum interval (at least `base_interval`; default 10 × base).
    pub max_interval: Duration,
}

/// Decodes and validates one serialized `RouteConfiguration`.
pub fn decode(bytes: &[u8]) -> Result<(String, RouteConfigResource), DecodeError> {
    let rc = route_pb::RouteConfiguration::decode(bytes)
        .map_err(|e| DecodeError::unnamed(format!("failed to decode RouteConfiguration: {e}")))?;
    let value = parse_route_configuration(&rc).map_err(|e| e.into_decode_error(&rc.name))?;
    Ok((rc.name, value))
}

/// The state of a declared cluster specifier plugin while routes are validated.
enum PluginState {
    /// Supported: kept if a route refers to it.
    Supported(ClusterSpecifierPlugin),
    /// Unsupported but optional: routes that refer to it are ignored.
    OptionalUnsupported,
}

/// Validates a `RouteConfiguration` (from RDS or inline in an HCM). Error paths are
/// relative to the `RouteConfiguration`.
pub(super) fn parse_route_configuration(
    rc: &route_pb::RouteConfiguration,
) -> Result<RouteConfigResource, FieldError> {
    let plugins = parse_cluster_specifier_plugins(&rc.cluster_specifier_plugins)?;
    let mut virtual_hosts = Vec::with_capacity(rc.virtual_hosts.len());
    for (i, vh) in rc.virtual_hosts.iter().enumerate() {
        virtual_hosts
            .push(parse_virtual_host(vh, &plugins).map_err(|e| e.at_index("virtual_hosts", i))?);
    }
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
    Ok(RouteConfigResource {
        name: rc.name.clone(),
        virtual_hosts,
        cluster_specifier_plugins,
    })
}

fn parse_cluster_specifier_plugins(
    plugins: &[route_pb::ClusterSpecifierPlugin],
) -> Result<Vec<(String, PluginState)>, FieldError> {
    let mut out: Vec<(String, PluginState)> = Vec::with_capacity(plugins.len());
    let mut seen = BTreeSet::new();
    for (i, plugin) in plugins.iter().enumerate() {
        let at = |e: FieldError| e.at_index("cluster_specifier_plugins", i);
        let Some(ext) = &plugin.extension else {
            return Err(at(FieldError::new("extension", "field not present")));
        };
        if ext.name.is_empty() {
            return Err(at(FieldError::new("extension.name", "must be non-empty")));
        }
        if !seen.insert(ext.name.as_str()) {
            return Err(at(FieldError::new(
                "extension.name",
                format!("duplicate cluster specifier plugin name {:?}", ext.name),
            )));
        }
        let Some(any) = &ext.typed_config else {
            return Err(at(FieldError::new(
                "extension.typed_config",
                "field not present",
            )));
        };
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

fn find_plugin<'a>(plugins: &'a [(String, PluginState)], name: &str) -> Option<&'a PluginState> {
    plugins.iter().find(|(n, _)| n == name).map(|(_, s)| s)
}

fn parse_virtual_host(
    vh: &route_pb::VirtualHost,
    plugins: &[(String, PluginState)],
) -> Result<VirtualHost, FieldError> {
    let mut domains = Vec::with_capacity(vh.domains.len());
    for (i, d) in vh.domains.iter().enumerate() {
        domains.push(parse_domain(d).map_err(|msg| FieldError::new(format!("domains[{i}]"), msg))?);
    }
    let retry_policy = vh
        .retry_policy
        .as_ref()
        .map(parse_retry_policy)
        .transpose()
        .map_err(|e| e.at("retry_policy"))?;
    let typed_per_filter_config = parse_filter_overrides(&vh.typed_per_filter_config)
        .map_err(|e| e.at("typed_per_filter_config"))?;
    let mut routes = Vec::with_capacity(vh.routes.len());
    for (i, r) in vh.routes.iter().enumerate() {
        if let Some(route) = parse_route(r, plugins).map_err(|e| e.at_index("routes", i))? {
            routes.push(route);
        }
    }
    Ok(VirtualHost {
        name: vh.name.clone(),
        domains,
        routes,
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
fn parse_route(
    r: &route_pb::Route,
    plugins: &[(String, PluginState)],
) -> Result<Option<Route>, FieldError> {
    let Some(m) = &r.r#match else {
        return Err(FieldError::new("match", "field not present"));
    };
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
    let runtime_fraction_per_million = m
        .runtime_fraction
        .as_ref()
        .and_then(|rf| rf.default_value.as_ref())
        .map(fraction_per_million)
        .transpose()
        .map_err(|e| e.at("runtime_fraction.default_value"))?;
    Ok(RouteMatch {
        path,
        case_sensitive,
        headers,
        runtime_fraction_per_million,
    })
}

#[allow(deprecated)]
fn parse_header_matcher(h: &route_pb::HeaderMatcher) -> Result<HeaderMatcher, FieldError> {
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
pub(super) fn parse_string_matcher(
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

/// Validates a `route` action; `Ok(None)` means gRPC ignores the route.
fn parse_forward_action(
    ra: &route_pb::RouteAction,
    plugins: &[(String, PluginState)],
) -> Result<Option<ForwardAction>, FieldError> {
    use route_pb::route_action::ClusterSpecifier as Spec;
    let cluster = match &ra.cluster_specifier {
        Some(Spec::Cluster(name)) => {
            if name.is_empty() {
                return Err(FieldError::new("cluster", "must be non-empty"));
            }
            ClusterSpecifier::Cluster(name.clone())
        }
        Some(Spec::WeightedClusters(wc)) => ClusterSpecifier::WeightedClusters(
            parse_weighted_clusters(wc).map_err(|e| e.at("weighted_clusters"))?,
        ),
        Some(Spec::ClusterSpecifierPlugin(name)) => {
            if name.is_empty() {
                return Err(FieldError::new(
                    "cluster_specifier_plugin",
                    "must be non-empty",
                ));
            }
            match find_plugin(plugins, name) {
                None => {
                    return Err(FieldError::new(
                        "cluster_specifier_plugin",
                        format!(
                            "unknown cluster specifier plugin {name:?} (not in \
                             cluster_specifier_plugins)"
                        ),
                    ));
                }
                Some(PluginState::OptionalUnsupported) => return Ok(None),
                Some(PluginState::Supported(_)) => {
                    ClusterSpecifier::ClusterSpecifierPlugin(name.clone())
                }
            }
        }
        // cluster_header, inline plugins or nothing: gRPC ignores the route (A28).
        Some(Spec::ClusterHeader(_) | Spec::InlineClusterSpecifierPlugin(_)) | None => {
            return Ok(None);
        }
    };
    let timeout = optional_duration(ra.timeout.as_ref()).map_err(|e| e.at("timeout"))?;
    let (max_stream_duration, grpc_timeout_header_max) = match &ra.max_stream_duration {
        Some(msd) => (
            optional_duration(msd.max_stream_duration.as_ref())
                .map_err(|e| e.at("max_stream_duration.max_stream_duration"))?,
            optional_duration(msd.grpc_timeout_header_max.as_ref())
                .map_err(|e| e.at("max_stream_duration.grpc_timeout_header_max"))?,
        ),
        None => (None, None),
    };
    let retry_policy = ra
        .retry_policy
        .as_ref()
        .map(parse_retry_policy)
        .transpose()
        .map_err(|e| e.at("retry_policy"))?;
    let mut hash_policies = Vec::new();
    for (i, hp) in ra.hash_policy.iter().enumerate() {
        if let Some(policy) = parse_hash_policy(hp).map_err(|e| e.at_index("hash_policy", i))? {
            hash_policies.push(policy);
        }
    }
    Ok(Some(ForwardAction {
        cluster,
        timeout,
        max_stream_duration,
        grpc_timeout_header_max,
        retry_policy,
        hash_policies,
    }))
}

fn parse_weighted_clusters(
    wc: &route_pb::WeightedCluster,
) -> Result<Vec<WeightedCluster>, FieldError> {
    let mut out = Vec::with_capacity(wc.clusters.len());
    let mut total: u64 = 0;
    for (i, c) in wc.clusters.iter().enumerate() {
        let at = |e: FieldError| e.at_index("clusters", i);
        if c.name.is_empty() {
            return Err(at(FieldError::new("name", "must be non-empty")));
        }
        let typed_per_filter_config = parse_filter_overrides(&c.typed_per_filter_config)
            .map_err(|e| at(e.at("typed_per_filter_config")))?;
        // A missing weight counts as 0; clusters with weight 0 are skipped.
        let weight = c.weight.as_ref().map_or(0, |w| w.value);
        if weight == 0 {
            continue;
        }
        total = total.saturating_add(u64::from(weight));
        out.push(WeightedCluster {
            name: c.name.clone(),
            weight,
            typed_per_filter_config,
        });
    }
    if total == 0 {
        return Err(FieldError::new("", "sum of weights is 0"));
    }
    if total > u64::from(u32::MAX) {
        return Err(FieldError::new(
            "",
            format!("sum of weights ({total}) exceeds {}", u32::MAX),
        ));
    }
    Ok(out)
}

fn parse_hash_policy(
    hp: &route_pb::route_action::HashPolicy,
) -> Result<Option<HashPolicy>, FieldError> {
    use route_pb::route_action::hash_policy::PolicySpecifier;
    match &hp.policy_specifier {
        Some(PolicySpecifier::Header(h)) => {
            if h.header_name.is_empty() {
                return Err(FieldError::new("header.header_name", "must be non-empty"));
            }
            let regex_rewrite = match &h.regex_rewrite {
                None => None,
                Some(rr) => {
                    let Some(pattern) = &rr.pattern else {
                        return Err(FieldError::new(
                            "header.regex_rewrite.pattern",
                            "field not present",
                        ));
                    };
                    if pattern.regex.is_empty() {
                        return Err(FieldError::new(
                            "header.regex_rewrite.pattern.regex",
                            "must be non-empty",
                        ));
                    }
                    Some(RegexRewrite {
                        pattern: compile_regex(&pattern.regex, false)
                            .map_err(|e| e.at("header.regex_rewrite.pattern"))?,
                        substitution: rr.substitution.clone(),
                    })
                }
            };
            Ok(Some(HashPolicy::Header {
                header_name: h.header_name.clone(),
                regex_rewrite,
                terminal: hp.terminal,
            }))
        }
        Some(PolicySpecifier::FilterState(fs)) if fs.key == CHANNEL_ID_HASH_KEY => {
            Ok(Some(HashPolicy::ChannelId {
                terminal: hp.terminal,
            }))
        }
        // Other hash policies are ignored, as gRPC does.
        _ => Ok(None),
    }
}

fn parse_retry_policy(rp: &route_pb::RetryPolicy) -> Result<RetryPolicy, FieldError> {
    let mut retryable_codes = Vec::new();
    let mut http_conditions = Vec::new();
    for condition in rp.retry_on.split(',').map(str::trim) {
        if let Some((_, code)) = GRPC_RETRY_ON
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(condition))
        {
            retryable_codes.push(*code);
        } else if let Some((_, cond)) = HTTP_RETRY_ON
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(condition))
        {
            http_conditions.push(*cond);
        }
        // Unknown conditions are ignored.
    }
    retryable_codes.sort_unstable();
    retryable_codes.dedup();
    http_conditions.sort_unstable();
    http_conditions.dedup();
    let num_retries = rp.num_retries.as_ref().map_or(1, |n| n.value);
    if num_retries == 0 {
        return Err(FieldError::new("num_retries", "must be greater than 0"));
    }
    let per_try_timeout =
        optional_duration(rp.per_try_timeout.as_ref()).map_err(|e| e.at("per_try_timeout"))?;
    let (base_interval, max_interval) = match &rp.retry_back_off {
        None => (
            DEFAULT_RETRY_BASE_INTERVAL,
            DEFAULT_RETRY_BASE_INTERVAL.saturating_mul(10),
        ),
        Some(backoff) => {
            let Some(base) = &backoff.base_interval else {
                return Err(FieldError::new(
                    "retry_back_off.base_interval",
                    "field not present",
                ));
            };
            let base = duration(base).map_err(|e| e.at("retry_back_off.base_interval"))?;
            if base.is_zero() {
                return Err(FieldError::new(
                    "retry_back_off.base_interval",
                    "must be greater than 0",
                ));
            }
            let max = match &backoff.max_interval {
                None => base.saturating_mul(10),
                Some(max) => {
                    let max = duration(max).map_err(|e| e.at("retry_back_off.max_interval"))?;
                    if max.is_zero() {
                        return Err(FieldError::new(
                            "retry_back_off.max_interval",
                            "must be greater than 0",
                        ));
                    }
                    if max < base {
                        return Err(FieldError::new(
                            "retry_back_off.max_interval",
                            format!("must not be less than base_interval ({max:?} < {base:?})"),
                        ));
                    }
                    max
                }
            };
            (base, max)
        }
    };
    Ok(RetryPolicy {
        retryable_codes,
        http_conditions,
        retriable_status_codes: rp.retriable_status_codes.clone(),
        num_retries,
        max_attempts: num_retries.saturating_add(1).min(MAX_RETRY_ATTEMPTS),
        per_try_timeout,
        base_interval,
        max_interval,
    })
}

/// The type of the wrapper `typed_per_filter_config` values may use.
const FILTER_CONFIG_TYPE: &str = "envoy.config.route.v3.FilterConfig";

/// Validates a `typed_per_filter_config` map. Keys are visited in sorted order so that
/// the reported error does not depend on hash-map iteration order.
fn parse_filter_overrides(
    map: &HashMap<String, pbuf::Any>,
) -> Result<BTreeMap<String, FilterConfigOverride>, FieldError> {
    let mut entries: Vec<(&String, &pbuf::Any)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = BTreeMap::new();
    for (key, any) in entries {
        let at = |e: FieldError| e.at(format_args!("[{key:?}]"));
        if key.is_empty() {
            return Err(at(FieldError::new("", "filter name must be non-empty")));
        }
        let outer = typed_config(any).map_err(at)?;
        let (config, is_optional, disabled) = if outer.type_name() == FILTER_CONFIG_TYPE {
            let fc = route_pb::FilterConfig::decode(&outer.value[..]).map_err(|e| {
                at(FieldError::new(
                    "value",
                    format!("can't decode FilterConfig: {e}"),
                ))
            })?;
            match &fc.config {
                Some(inner) => (
                    Some(typed_config(inner).map_err(|e| at(e.at("config")))?),
                    fc.is_optional,
                    fc.disabled,
                ),
                None if fc.disabled => (None, fc.is_optional, true),
                None => return Err(at(FieldError::new("config", "field not present"))),
            }
        } else {
            (Some(outer), false, false)
        };
        if let Some(cfg) = &config
            && !listener::is_supported_filter_override(cfg.type_name())
        {
            if is_optional {
                continue;
            }
            return Err(at(FieldError::new(
                "",
                format!("unsupported filter type {:?}", cfg.type_url),
            )));
        }
        out.insert(
            key.clone(),
            FilterConfigOverride {
                config,
                is_optional,
                disabled,
            },
        );
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Helpers shared by the decoders.
// ---------------------------------------------------------------------------------------

/// A validation error at a field path, built bottom-up: the innermost check names the
/// field, and each enclosing level prepends its own field with [`FieldError::at`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FieldError {
    path: String,
    message: String,
}

impl FieldError {
    /// An error at `path` (relative to the message being validated; may be empty).
    pub(super) fn new(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error seen from the enclosing message, whose field `parent` holds the
    /// message being validated.
    pub(super) fn at(self, parent: impl fmt::Display) -> FieldError {
        let parent = parent.to_string();
        let path = if parent.is_empty() {
            self.path
        } else if self.path.is_empty() {
            parent
        } else if self.path.starts_with('[') {
            format!("{parent}{}", self.path)
        } else {
            format!("{parent}.{}", self.path)
        };
        FieldError {
            path,
            message: self.message,
        }
    }

    /// [`at`](Self::at) for element `index` of the repeated field `field`.
    pub(super) fn at_index(self, field: &str, index: usize) -> FieldError {
        self.at(format_args!("{field}[{index}]"))
    }

    /// The error for the resource named `name`.
    pub(super) fn into_decode_error(self, name: &str) -> DecodeError {
        DecodeError::named(name, self.to_string())
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The largest valid `google.protobuf.Duration.seconds`.
pub(super) const MAX_DURATION_SECONDS: u64 = 315_576_000_000;

/// Converts a `google.protobuf.Duration`, rejecting negative or out-of-range values.
pub(super) fn duration(d: &pbuf::Duration) -> Result<Duration, FieldError> {
    let seconds = u64::try_from(d.seconds)
        .ok()
        .filter(|s| *s <= MAX_DURATION_SECONDS)
        .ok_or_else(|| {
            FieldError::new(
                "seconds",
                format!(
                    "value {} must be in the range [0, {MAX_DURATION_SECONDS}]",
                    d.seconds
                ),
            )
        })?;
    let nanos = u32::try_from(d.nanos)
        .ok()
        .filter(|n| *n <= 999_999_999)
        .ok_or_else(|| {
            FieldError::new(
                "nanos",
                format!("value {} must be in the range [0, 999999999]", d.nanos),
            )
        })?;
    Ok(Duration::new(seconds, nanos))
}

/// [`duration`] for an optional field.
pub(super) fn optional_duration(
    d: Option<&pbuf::Duration>,
) -> Result<Option<Duration>, FieldError> {
    d.map(duration).transpose()
}

/// Converts a `FractionalPercent` to parts per million; a numerator above the
/// denominator is clamped to it (so the result is at most 1,000,000).
pub(super) fn fraction_per_million(fp: &type_pb::FractionalPercent) -> Result<u32, FieldError> {
    use type_pb::fractional_percent::DenominatorType;
    let (denominator, scale) = match DenominatorType::try_from(fp.denominator) {
        Ok(DenominatorType::Hundred) => (100, 10_000),
        Ok(DenominatorType::TenThousand) => (10_000, 100),
        Ok(DenominatorType::Million) => (1_000_000, 1),
        Err(_) => {
            return Err(FieldError::new(
                "denominator",
                format!("unknown denominator type {}", fp.denominator),
            ));
        }
    };
    Ok(fp.numerator.min(denominator) * scale)
}

/// The type name in a type URL: the part after the last `/`.
pub(super) fn type_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

/// Type names of the `TypedStruct` wrappers an extension config may arrive in.
const TYPED_STRUCT_TYPES: &[&str] = &["xds.type.v3.TypedStruct", "udpa.type.v1.TypedStruct"];

/// The part of `xds.type.v3.TypedStruct` / `udpa.type.v1.TypedStruct` needed to learn
/// the wrapped type (the `value` Struct is skipped).
#[derive(Clone, PartialEq, Message)]
struct TypedStructHeader {
    #[prost(string, tag = "1")]
    type_url: String,
}

/// Validates an extension's `Any` and unwraps a `TypedStruct` to learn its real type.
pub(super) fn typed_config(any: &pbuf::Any) -> Result<TypedConfig, FieldError> {
    check_type_url(&any.type_url).map_err(|e| e.at("type_url"))?;
    if !TYPED_STRUCT_TYPES.contains(&type_name(&any.type_url)) {
        return Ok(TypedConfig {
            type_url: any.type_url.clone(),
            value: any.value.clone(),
            typed_struct: false,
        });
    }
    let header = TypedStructHeader::decode(&any.value[..])
        .map_err(|e| FieldError::new("value", format!("can't decode TypedStruct: {e}")))?;
    check_type_url(&header.type_url).map_err(|e| e.at("value.type_url"))?;
    Ok(TypedConfig {
        type_url: header.type_url,
        value: any.value.clone(),
        typed_struct: true,
    })
}

/// A type URL must be non-empty and have a non-empty type name after its last `/`.
fn check_type_url(type_url: &str) -> Result<(), FieldError> {
    if type_url.is_empty() {
        return Err(FieldError::new("", "field not present"));
    }
    match type_url.rfind('/') {
        Some(pos) if pos + 1 < type_url.len() => Ok(()),
        _ => Err(FieldError::new(
            "",
            format!("invalid type URL {type_url:?}"),
        )),
    }
}

/// Compiles a resource regex with a size limit. `full_match` anchors it as
/// `^(?:pattern)$` (matchers); otherwise it matches anywhere (rewrites).
pub(super) fn compile_regex(pattern: &str, full_match: bool) -> Result<SafeRegex, FieldError> {
    let build = |p: &str| {
        regex::RegexBuilder::new(p)
            .size_limit(MAX_REGEX_SIZE)
            .dfa_size_limit(MAX_REGEX_SIZE)
            .build()
    };
    let invalid = |e: regex::Error| {
        let detail = match &e {
            regex::Error::Syntax(s) => s
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().trim_start_matches("error: ").to_owned())
                .unwrap_or_else(|| s.clone()),
            regex::Error::CompiledTooBig(limit) => {
                format!("compiled regex exceeds the size limit of {limit} bytes")
            }
            other => other.to_string(),
        };
        FieldError::new("regex", format!("invalid regex {pattern:?}: {detail}"))
    };
    // Compile the pattern on its own first, so that it cannot escape the anchoring group
    // (e.g. "a)|(b").
    let unanchored = build(pattern).map_err(invalid)?;
    let regex = if full_match {
        build(&format!("^(?:{pattern})$")).map_err(invalid)?
    } else {
        unanchored
    };
    Ok(SafeRegex {
        pattern: pattern.to_owned(),
        full_match,
        regex,
    })
}

/// Calls `f` with many corrupted variants of `bytes` (bit flips, truncations, splices),
/// deterministically, for the decoders' no-panic tests.
#[cfg(test)]
pub(super) fn for_each_mutation(bytes: &[u8], mut f: impl FnMut(&[u8])) {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    if bytes.is_empty() {
        return;
    }
    for _ in 0..2_000 {
        let mut m = bytes.to_vec();
        for _ in 0..=(next() % 4) {
            let len = m.len().max(1) as u64;
            let pos = usize::try_from(next() % len).unwrap_or(0);
            match next() % 4 {
                0 => {
                    if let Some(b) = m.get_mut(pos) {
                        *b ^= 1 << (next() % 8);
                    }
                }
                1 => m.truncate(pos),
                2 => {
                    if let Some(b) = m.get_mut(pos) {
                        *b = next() as u8;
                    }
                }
                _ => {
                    let tail: Vec<u8> = bytes.iter().skip(pos).copied().collect();
                    m.extend_from_slice(&tail);
                }
            }
        }
        f(&m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::core::v3 as core_pb;
    use route_pb::route_action::ClusterSpecifier as Spec;

    fn any(type_name: &str, msg: &impl Message) -> pbuf::Any {
        pbuf::Any {
            type_url: format!("type.googleapis.com/{type_name}"),
            value: msg.encode_to_vec().into(),
        }
    }

    fn prefix_match(prefix: &str) -> route_pb::RouteMatch {
        route_pb::RouteMatch {
            path_specifier: Some(route_pb::route_match::PathSpecifier::Prefix(
                prefix.to_owned(),
            )),
            ..Default::default()
        }
    }

    fn cluster_action(cluster: &str) -> route_pb::RouteAction {
        route_pb::RouteAction {
            cluster_specifier: Some(Spec::Cluster(cluster.to_owned())),
            ..Default::default()
        }
    }

    fn route_to(cluster: &str) -> route_pb::Route {
        route_pb::Route {
            r#match: Some(prefix_match("")),
            action: Some(route_pb::route::Action::Route(cluster_action(cluster))),
            ..Default::default()
        }
    }

    fn config_with(routes: Vec<route_pb::Route>) -> route_pb::RouteConfiguration {
        route_pb::RouteConfiguration {
            name: "rc".to_owned(),
            virtual_hosts: vec![route_pb::VirtualHost {
                name: "vh".to_owned(),
                domains: vec!["*".to_owned()],
                routes,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn decode_rc(rc: &route_pb::RouteConfiguration) -> Result<RouteConfigResource, DecodeError> {
        decode(&rc.encode_to_vec()).map(|(name, value)| {
            assert_eq!(name, rc.name);
            value
        })
    }

    fn err(rc: &route_pb::RouteConfiguration) -> String {
        let e = decode_rc(rc).expect_err("expected a decode error");
        assert_eq!(e.name.as_deref(), Some(rc.name.as_str()));
        e.message
    }

    /// Decodes a config with a single route and returns its (only) route, if kept.
    fn single(route: route_pb::Route) -> Option<Route> {
        let rc = decode_rc(&config_with(vec![route])).expect("valid");
        let mut routes = rc.virtual_hosts.into_iter().next().expect("vh").routes;
        assert!(routes.len() <= 1);
        routes.pop()
    }

    fn forward(route: route_pb::Route) -> ForwardAction {
        match single(route).expect("route kept").action {
            RouteAction::Forward(f) => *f,
            other => panic!("unexpected action {other:?}"),
        }
    }

    fn with_action(ra: route_pb::RouteAction) -> route_pb::Route {
        route_pb::Route {
            r#match: Some(prefix_match("")),
            action: Some(route_pb::route::Action::Route(ra)),
            ..Default::default()
        }
    }

    fn with_match(m: route_pb::RouteMatch) -> route_pb::Route {
        route_pb::Route {
            r#match: Some(m),
            ..route_to("c")
        }
    }

    fn with_retry(rp: route_pb::RetryPolicy) -> route_pb::Route {
        with_action(route_pb::RouteAction {
            retry_policy: Some(rp),
            ..cluster_action("c")
        })
    }

    fn dur(seconds: i64, nanos: i32) -> pbuf::Duration {
        pbuf::Duration { seconds, nanos }
    }

    fn header(
        name: &str,
        spec: route_pb::header_matcher::HeaderMatchSpecifier,
    ) -> route_pb::HeaderMatcher {
        route_pb::HeaderMatcher {
            name: name.to_owned(),
            header_match_specifier: Some(spec),
            ..Default::default()
        }
    }

    fn with_header(h: route_pb::HeaderMatcher) -> route_pb::Route {
        with_match(route_pb::RouteMatch {
            headers: vec![h],
            ..prefix_match("/")
        })
    }

    #[test]
    fn minimal_config() {
        let rc = decode_rc(&config_with(vec![route_to("cluster-a")])).unwrap();
        assert_eq!(
            rc,
            RouteConfigResource {
                name: "rc".to_owned(),
                virtual_hosts: vec![VirtualHost {
                    name: "vh".to_owned(),
                    domains: vec![DomainPattern::Any],
                    routes: vec![Route {
                        matcher: RouteMatch {
                            path: PathMatcher::Prefix(String::new()),
                            case_sensitive: true,
                            headers: vec![],
                            runtime_fraction_per_million: None,
                        },
                        action: RouteAction::Forward(Box::new(ForwardAction {
                            cluster: ClusterSpecifier::Cluster("cluster-a".to_owned()),
                            timeout: None,
                            max_stream_duration: None,
                            grpc_timeout_header_max: None,
                            retry_policy: None,
                            hash_policies: vec![],
                        })),
                        typed_per_filter_config: BTreeMap::new(),
                    }],
                    retry_policy: None,
                    typed_per_filter_config: BTreeMap::new(),
                }],
                cluster_specifier_plugins: vec![],
            }
        );
    }

    #[test]
    fn garbage_and_truncated_bytes_are_unnamed_errors() {
        let e = decode(&[0xff, 0xff, 0xff]).unwrap_err();
        assert_eq!(e.name, None);
        assert!(
            e.message
                .starts_with("failed to decode RouteConfiguration: "),
            "{e}"
        );
        let full = config_with(vec![route_to("c")]).encode_to_vec();
        for len in 0..full.len() {
            // Every prefix either decodes (possibly to something smaller) or fails cleanly.
            if let Err(e) = decode(&full[..len]) {
                assert!(matches!(e.name.as_deref(), None | Some("" | "rc")), "{e}");
            }
        }
    }

    #[test]
    fn mutated_bytes_never_panic() {
        let mut rc = config_with(vec![
            with_retry(route_pb::RetryPolicy {
                retry_on: "unavailable".to_owned(),
                retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
                    base_interval: Some(dur(1, 0)),
                    max_interval: Some(dur(2, 0)),
                }),
                ..Default::default()
            }),
            weighted(&[("a", Some(1)), ("b", Some(2))]),
            with_header(header(
                "h",
                route_pb::header_matcher::HeaderMatchSpecifier::RangeMatch(type_pb::Int64Range {
                    start: 1,
                    end: 2,
                }),
            )),
        ]);
        rc.cluster_specifier_plugins = vec![plugin("p", RLS_CLUSTER_SPECIFIER_PLUGIN, true)];
        for_each_mutation(&rc.encode_to_vec(), |bytes| {
            let _ = decode(bytes);
        });
    }

    #[test]
    fn domains() {
        let mut rc = config_with(vec![]);
        rc.virtual_hosts[0].domains = vec![
            "Foo.com".to_owned(),
            "*.bar.com".to_owned(),
            "baz.*".to_owned(),
            "*".to_owned(),
        ];
        let vh = &decode_rc(&rc).unwrap().virtual_hosts[0];
        assert_eq!(
            vh.domains,
            vec![
                DomainPattern::Exact("foo.com".to_owned()),
                DomainPattern::Suffix(".bar.com".to_owned()),
                DomainPattern::Prefix("baz.".to_owned()),
                DomainPattern::Any,
            ]
        );
        assert!(vh.domains[0].matches("FOO.com"));
        assert!(vh.domains[1].matches("a.bar.com"));
        assert!(!vh.domains[1].matches(".bar.com"));
        assert!(vh.domains[2].matches("baz.io"));
        assert!(!vh.domains[2].matches("bar.io"));
        // An empty list is fine.
        rc.virtual_hosts[0].domains.clear();
        assert!(decode_rc(&rc).unwrap().virtual_hosts[0].domains.is_empty());
    }

    #[test]
    fn invalid_domains() {
        for (domain, msg) in [
            (
                "a.*.com",
                "virtual_hosts[0].domains[1]: invalid domain pattern \"a.*.com\": at most one \
                 wildcard, at the start or the end",
            ),
            (
                "*foo*",
                "virtual_hosts[0].domains[1]: invalid domain pattern \"*foo*\": at most one \
                 wildcard, at the start or the end",
            ),
            ("", "virtual_hosts[0].domains[1]: must be non-empty"),
        ] {
            let mut rc = config_with(vec![]);
            rc.virtual_hosts[0].domains = vec!["ok".to_owned(), domain.to_owned()];
            assert_eq!(err(&rc), msg);
        }
    }

    #[test]
    fn path_specifiers() {
        use route_pb::route_match::PathSpecifier as P;
        let r = single(with_match(route_pb::RouteMatch {
            path_specifier: Some(P::Path("/svc/Method".to_owned())),
            case_sensitive: Some(pbuf::BoolValue { value: false }),
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(r.matcher.path, PathMatcher::Path("/svc/Method".to_owned()));
        assert!(!r.matcher.case_sensitive);

        let r = single(with_match(route_pb::RouteMatch {
            path_specifier: Some(P::SafeRegex(matcher_pb::RegexMatcher {
                regex: "/svc/.*".to_owned(),
                ..Default::default()
            })),
            ..Default::default()
        }))
        .unwrap();
        let PathMatcher::SafeRegex(re) = &r.matcher.path else {
            panic!("{:?}", r.matcher.path)
        };
        assert_eq!(re.pattern(), "/svc/.*");
        assert!(re.is_match("/svc/M"));
        assert!(!re.is_match("x/svc/M"), "regex must be anchored");
        // `a|ab` must match "ab" fully although leftmost-first would stop at "a".
        let alt = compile_regex("a|ab", true).unwrap();
        assert!(alt.is_match("ab"));
    }

    #[test]
    fn invalid_path_specifiers() {
        use route_pb::route_match::PathSpecifier as P;
        let cases = [
            (
                route_pb::RouteMatch::default(),
                "virtual_hosts[0].routes[0].match: no path specifier (prefix, path or \
                 safe_regex) is set",
            ),
            (
                route_pb::RouteMatch {
                    path_specifier: Some(P::ConnectMatcher(Default::default())),
                    ..Default::default()
                },
                "virtual_hosts[0].routes[0].match.connect_matcher: unsupported path specifier",
            ),
            (
                route_pb::RouteMatch {
                    path_specifier: Some(P::PathSeparatedPrefix("/a".to_owned())),
                    ..Default::default()
                },
                "virtual_hosts[0].routes[0].match.path_separated_prefix: unsupported path \
                 specifier",
            ),
            (
                route_pb::RouteMatch {
                    path_specifier: Some(P::PathMatchPolicy(Default::default())),
                    ..Default::default()
                },
                "virtual_hosts[0].routes[0].match.path_match_policy: unsupported path specifier",
            ),
            (
                route_pb::RouteMatch {
                    path_specifier: Some(P::SafeRegex(matcher_pb::RegexMatcher {
                        regex: "a(".to_owned(),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
                "virtual_hosts[0].routes[0].match.safe_regex.regex: invalid regex \"a(\": \
                 unclosed group",
            ),
        ];
        for (m, msg) in cases {
            assert_eq!(err(&config_with(vec![with_match(m)])), msg);
        }
        let no_match = route_pb::Route {
            r#match: None,
            ..route_to("c")
        };
        assert_eq!(
            err(&config_with(vec![no_match])),
            "virtual_hosts[0].routes[0].match: field not present"
        );
    }

    #[test]
    fn regex_cannot_escape_anchoring() {
        let e = compile_regex("a)|(b", true).unwrap_err();
        assert_eq!(e.path, "regex");
        assert!(e.message.starts_with("invalid regex \"a)|(b\": "), "{e}");
    }

    #[test]
    fn huge_regex_is_rejected() {
        let e = compile_regex("(?:a{1000}){1000}", true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "regex: invalid regex \"(?:a{1000}){1000}\": compiled regex exceeds the size \
             limit of 1048576 bytes"
        );
    }

    #[test]
    #[allow(deprecated)]
    fn header_matchers() {
        use route_pb::header_matcher::HeaderMatchSpecifier as H;
        let cases = [
            (
                H::ExactMatch("v".to_owned()),
                HeaderMatchKind::String(StringMatcher::Exact {
                    value: "v".to_owned(),
                    ignore_case: false,
                }),
            ),
            (
                H::PrefixMatch("p".to_owned()),
                HeaderMatchKind::String(StringMatcher::Prefix {
                    value: "p".to_owned(),
                    ignore_case: false,
                }),
            ),
            (
                H::SuffixMatch("s".to_owned()),
                HeaderMatchKind::String(StringMatcher::Suffix {
                    value: "s".to_owned(),
                    ignore_case: false,
                }),
            ),
            (
                H::ContainsMatch("c".to_owned()),
                HeaderMatchKind::String(StringMatcher::Contains {
                    value: "c".to_owned(),
                    ignore_case: false,
                }),
            ),
            (
                H::SafeRegexMatch(matcher_pb::RegexMatcher {
                    regex: "v+".to_owned(),
                    ..Default::default()
                }),
                HeaderMatchKind::String(StringMatcher::SafeRegex(
                    compile_regex("v+", true).unwrap(),
                )),
            ),
            (
                H::RangeMatch(type_pb::Int64Range { start: -1, end: 10 }),
                HeaderMatchKind::Range { start: -1, end: 10 },
            ),
            (H::PresentMatch(false), HeaderMatchKind::Present(false)),
            (
                H::StringMatch(matcher_pb::StringMatcher {
                    ignore_case: true,
                    match_pattern: Some(matcher_pb::string_matcher::MatchPattern::Exact(
                        "E".to_owned(),
                    )),
                }),
                HeaderMatchKind::String(StringMatcher::Exact {
                    value: "E".to_owned(),
                    ignore_case: true,
                }),
            ),
            (
                H::StringMatch(matcher_pb::StringMatcher {
                    ignore_case: true,
                    match_pattern: Some(matcher_pb::string_matcher::MatchPattern::Contains(
                        "C".to_owned(),
                    )),
                }),
                HeaderMatchKind::String(StringMatcher::Contains {
                    value: "C".to_owned(),
                    ignore_case: true,
                }),
            ),
        ];
        for (spec, kind) in cases {
            let mut h = header("x-key-bin", spec);
            h.invert_match = true;
            let r = single(with_header(h)).unwrap();
            assert_eq!(
                r.matcher.headers,
                vec![HeaderMatcher {
                    name: "x-key-bin".to_owned(),
                    kind,
                    invert_match: true,
                }]
            );
        }
    }

    #[test]
    #[allow(deprecated)]
    fn invalid_header_matchers() {
        use matcher_pb::string_matcher::MatchPattern as M;
        use route_pb::header_matcher::HeaderMatchSpecifier as H;
        let p = "virtual_hosts[0].routes[0].match.headers[0]";
        let cases = [
            (
                header("", H::PresentMatch(true)),
                format!("{p}.name: must be non-empty"),
            ),
            (
                route_pb::HeaderMatcher {
                    name: "a".to_owned(),
                    ..Default::default()
                },
                format!("{p}: no header match specifier is set"),
            ),
            (
                header("a", H::RangeMatch(type_pb::Int64Range { start: 5, end: 5 })),
                format!("{p}.range_match: start (5) must be less than end (5)"),
            ),
            (
                header(
                    "a",
                    H::SafeRegexMatch(matcher_pb::RegexMatcher {
                        regex: "[".to_owned(),
                        ..Default::default()
                    }),
                ),
                format!(
                    "{p}.safe_regex_match.regex: invalid regex \"[\": unclosed character class"
                ),
            ),
            (
                header("a", H::StringMatch(matcher_pb::StringMatcher::default())),
                format!("{p}.string_match: no match pattern is set"),
            ),
            (
                header(
                    "a",
                    H::StringMatch(matcher_pb::StringMatcher {
                        ignore_case: true,
                        match_pattern: Some(M::SafeRegex(matcher_pb::RegexMatcher {
                            regex: "x".to_owned(),
                            ..Default::default()
                        })),
                    }),
                ),
                format!("{p}.string_match.ignore_case: not supported with safe_regex"),
            ),
            (
                header(
                    "a",
                    H::StringMatch(matcher_pb::StringMatcher {
                        ignore_case: false,
                        match_pattern: Some(M::Custom(Default::default())),
                    }),
                ),
                format!("{p}.string_match.custom: unsupported match pattern"),
            ),
        ];
        for (h, msg) in cases {
            assert_eq!(err(&config_with(vec![with_header(h)])), msg);
        }
    }

    #[test]
    fn runtime_fraction() {
        use type_pb::fractional_percent::DenominatorType as D;
        for (numerator, denominator, expected) in [
            (5, D::Hundred, 50_000),
            (250, D::Hundred, 1_000_000), // clamped to 100%
            (7, D::TenThousand, 700),
            (123, D::Million, 123),
            (u32::MAX, D::Million, 1_000_000),
        ] {
            let r = single(with_match(route_pb::RouteMatch {
                runtime_fraction: Some(core_pb::RuntimeFractionalPercent {
                    default_value: Some(type_pb::FractionalPercent {
                        numerator,
                        denominator: denominator as i32,
                    }),
                    runtime_key: String::new(),
                }),
                ..prefix_match("/")
            }))
            .unwrap();
            assert_eq!(r.matcher.runtime_fraction_per_million, Some(expected));
        }
        let bad = with_match(route_pb::RouteMatch {
            runtime_fraction: Some(core_pb::RuntimeFractionalPercent {
                default_value: Some(type_pb::FractionalPercent {
                    numerator: 1,
                    denominator: 9,
                }),
                runtime_key: String::new(),
            }),
            ..prefix_match("/")
        });
        assert_eq!(
            err(&config_with(vec![bad])),
            "virtual_hosts[0].routes[0].match.runtime_fraction.default_value.denominator: \
             unknown denominator type 9"
        );
    }

    #[test]
    fn routes_grpc_ignores_are_skipped() {
        // Query parameters (even with an otherwise invalid route), tls_context and
        // dynamic metadata matchers, unsupported cluster specifiers.
        let query = with_match(route_pb::RouteMatch {
            query_parameters: vec![route_pb::QueryParameterMatcher {
                name: "q".to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let tls = with_match(route_pb::RouteMatch {
            tls_context: Some(Default::default()),
            ..prefix_match("/")
        });
        let metadata = with_match(route_pb::RouteMatch {
            dynamic_metadata: vec![Default::default()],
            ..prefix_match("/")
        });
        let header_cluster = with_action(route_pb::RouteAction {
            cluster_specifier: Some(Spec::ClusterHeader("x-cluster".to_owned())),
            ..Default::default()
        });
        let inline_plugin = with_action(route_pb::RouteAction {
            cluster_specifier: Some(Spec::InlineClusterSpecifierPlugin(Default::default())),
            ..Default::default()
        });
        let no_cluster = with_action(route_pb::RouteAction::default());
        for r in [
            query,
            tls,
            metadata,
            header_cluster,
            inline_plugin,
            no_cluster,
        ] {
            assert_eq!(single(r), None);
        }
        // `grpc: {}` always holds for a gRPC client: the route is kept.
        let grpc = with_match(route_pb::RouteMatch {
            grpc: Some(Default::default()),
            ..prefix_match("/")
        });
        assert!(single(grpc).is_some());
    }

    #[test]
    fn non_forwarding_and_unsupported_actions_are_kept() {
        let mut r = route_to("c");
        r.action = Some(route_pb::route::Action::NonForwardingAction(
            Default::default(),
        ));
        assert_eq!(single(r).unwrap().action, RouteAction::NonForwarding);
        for action in [
            Some(route_pb::route::Action::Redirect(Default::default())),
            Some(route_pb::route::Action::DirectResponse(Default::default())),
            Some(route_pb::route::Action::FilterAction(Default::default())),
            None,
        ] {
            let mut r = route_to("c");
            r.action = action;
            assert_eq!(single(r).unwrap().action, RouteAction::Unsupported);
        }
    }

    fn weighted(clusters: &[(&str, Option<u32>)]) -> route_pb::Route {
        with_action(route_pb::RouteAction {
            cluster_specifier: Some(Spec::WeightedClusters(route_pb::WeightedCluster {
                clusters: clusters
                    .iter()
                    .map(|(name, weight)| route_pb::weighted_cluster::ClusterWeight {
                        name: (*name).to_owned(),
                        weight: weight.map(|value| pbuf::UInt32Value { value }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })),
            ..Default::default()
        })
    }

    #[test]
    fn weighted_clusters() {
        let f = forward(weighted(&[
            ("a", Some(1)),
            ("zero", Some(0)),
            ("b", Some(3)),
            ("none", None),
        ]));
        assert_eq!(
            f.cluster,
            ClusterSpecifier::WeightedClusters(vec![
                WeightedCluster {
                    name: "a".to_owned(),
                    weight: 1,
                    typed_per_filter_config: BTreeMap::new(),
                },
                WeightedCluster {
                    name: "b".to_owned(),
                    weight: 3,
                    typed_per_filter_config: BTreeMap::new(),
                },
            ])
        );
        let f = forward(weighted(&[("a", Some(u32::MAX - 1)), ("b", Some(1))]));
        assert!(matches!(f.cluster, ClusterSpecifier::WeightedClusters(v) if v.len() == 2));
    }

    #[test]
    fn invalid_weighted_clusters() {
        let p = "virtual_hosts[0].routes[0].route.weighted_clusters";
        for (clusters, msg) in [
            (
                vec![("a", Some(0)), ("b", None)],
                format!("{p}: sum of weights is 0"),
            ),
            (vec![], format!("{p}: sum of weights is 0")),
            (
                vec![("a", Some(u32::MAX)), ("b", Some(1))],
                format!("{p}: sum of weights (4294967296) exceeds 4294967295"),
            ),
            (
                vec![("a", Some(1)), ("", Some(1))],
                format!("{p}.clusters[1].name: must be non-empty"),
            ),
        ] {
            assert_eq!(err(&config_with(vec![weighted(&clusters)])), msg);
        }
        assert_eq!(
            err(&config_with(vec![route_to("")])),
            "virtual_hosts[0].routes[0].route.cluster: must be non-empty"
        );
    }

    #[test]
    fn timeouts() {
        let f = forward(with_action(route_pb::RouteAction {
            timeout: Some(dur(3, 0)),
            max_stream_duration: Some(route_pb::route_action::MaxStreamDuration {
                max_stream_duration: Some(dur(10, 500)),
                grpc_timeout_header_max: Some(dur(0, 0)),
                grpc_timeout_header_offset: Some(dur(1, 0)),
            }),
            ..cluster_action("c")
        }));
        assert_eq!(f.timeout, Some(Duration::from_secs(3)));
        assert_eq!(f.max_stream_duration, Some(Duration::new(10, 500)));
        assert_eq!(f.grpc_timeout_header_max, Some(Duration::ZERO));
        assert_eq!(f.effective_max_stream_duration(), Some(Duration::ZERO));

        let p = "virtual_hosts[0].routes[0].route";
        for (ra, msg) in [
            (
                route_pb::RouteAction {
                    timeout: Some(dur(-1, 0)),
                    ..cluster_action("c")
                },
                format!("{p}.timeout.seconds: value -1 must be in the range [0, 315576000000]"),
            ),
            (
                route_pb::RouteAction {
                    max_stream_duration: Some(route_pb::route_action::MaxStreamDuration {
                        max_stream_duration: Some(dur(315_576_000_001, 0)),
                        ..Default::default()
                    }),
                    ..cluster_action("c")
                },
                format!(
                    "{p}.max_stream_duration.max_stream_duration.seconds: value 315576000001 \
                     must be in the range [0, 315576000000]"
                ),
            ),
            (
                route_pb::RouteAction {
                    max_stream_duration: Some(route_pb::route_action::MaxStreamDuration {
                        grpc_timeout_header_max: Some(dur(1, 1_000_000_000)),
                        ..Default::default()
                    }),
                    ..cluster_action("c")
                },
                format!(
                    "{p}.max_stream_duration.grpc_timeout_header_max.nanos: value 1000000000 \
                     must be in the range [0, 999999999]"
                ),
            ),
            (
                route_pb::RouteAction {
                    timeout: Some(dur(0, -5)),
                    ..cluster_action("c")
                },
                format!("{p}.timeout.nanos: value -5 must be in the range [0, 999999999]"),
            ),
        ] {
            assert_eq!(err(&config_with(vec![with_action(ra)])), msg);
        }
    }

    #[test]
    fn retry_policy_defaults_and_conditions() {
        let f = forward(with_retry(route_pb::RetryPolicy {
            retry_on: " unavailable, 5xx ,cancelled,bogus,,Deadline-Exceeded,internal,\
                       resource-exhausted,gateway-error,reset,connect-failure,retriable-4xx,\
                       refused-stream,retriable-status-codes,retriable-headers,unavailable"
                .to_owned(),
            retriable_status_codes: vec![503, 504],
            ..Default::default()
        }));
        assert_eq!(
            f.retry_policy,
            Some(RetryPolicy {
                retryable_codes: vec![
                    RetryableCode::Cancelled,
                    RetryableCode::DeadlineExceeded,
                    RetryableCode::ResourceExhausted,
                    RetryableCode::Internal,
                    RetryableCode::Unavailable,
                ],
                http_conditions: vec![
                    HttpRetryCondition::FiveXx,
                    HttpRetryCondition::GatewayError,
                    HttpRetryCondition::Reset,
                    HttpRetryCondition::ConnectFailure,
                    HttpRetryCondition::Retriable4xx,
                    HttpRetryCondition::RefusedStream,
                    HttpRetryCondition::RetriableStatusCodes,
                    HttpRetryCondition::RetriableHeaders,
                ],
                retriable_status_codes: vec![503, 504],
                num_retries: 1,
                max_attempts: 2,
                per_try_timeout: None,
                base_interval: Duration::from_millis(25),
                max_interval: Duration::from_millis(250),
            })
        );
        assert_eq!(RetryableCode::Unavailable.code(), 14);
    }

    #[test]
    fn retry_policy_counts_and_backoff() {
        let f = forward(with_retry(route_pb::RetryPolicy {
            retry_on: "unavailable".to_owned(),
            num_retries: Some(pbuf::UInt32Value { value: 10 }),
            per_try_timeout: Some(dur(2, 0)),
            retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
                base_interval: Some(dur(0, 100_000_000)),
                max_interval: None,
            }),
            ..Default::default()
        }));
        let rp = f.retry_policy.unwrap();
        assert_eq!(rp.num_retries, 10);
        assert_eq!(rp.max_attempts, 5);
        assert_eq!(rp.per_try_timeout, Some(Duration::from_secs(2)));
        assert_eq!(rp.base_interval, Duration::from_millis(100));
        assert_eq!(rp.max_interval, Duration::from_secs(1));

        let f = forward(with_retry(route_pb::RetryPolicy {
            num_retries: Some(pbuf::UInt32Value { value: u32::MAX }),
            retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
                base_interval: Some(dur(1, 0)),
                max_interval: Some(dur(1, 0)),
            }),
            ..Default::default()
        }));
        let rp = f.retry_policy.unwrap();
        assert_eq!(rp.max_attempts, 5);
        assert_eq!(rp.max_interval, Duration::from_secs(1));
        assert!(rp.retryable_codes.is_empty());
    }

    #[test]
    fn invalid_retry_policies() {
        use route_pb::retry_policy::RetryBackOff;
        let p = "virtual_hosts[0].routes[0].route.retry_policy";
        let backoff =
            |base: Option<pbuf::Duration>, max: Option<pbuf::Duration>| route_pb::RetryPolicy {
                retry_back_off: Some(RetryBackOff {
                    base_interval: base,
                    max_interval: max,
                }),
                ..Default::default()
            };
        for (rp, msg) in [
            (
                route_pb::RetryPolicy {
                    num_retries: Some(pbuf::UInt32Value { value: 0 }),
                    ..Default::default()
                },
                format!("{p}.num_retries: must be greater than 0"),
            ),
            (
                backoff(None, Some(dur(1, 0))),
                format!("{p}.retry_back_off.base_interval: field not present"),
            ),
            (
                backoff(Some(dur(0, 0)), None),
                format!("{p}.retry_back_off.base_interval: must be greater than 0"),
            ),
            (
                backoff(Some(dur(-1, 0)), None),
                format!(
                    "{p}.retry_back_off.base_interval.seconds: value -1 must be in the range \
                     [0, 315576000000]"
                ),
            ),
            (
                backoff(Some(dur(1, 0)), Some(dur(0, 0))),
                format!("{p}.retry_back_off.max_interval: must be greater than 0"),
            ),
            (
                backoff(Some(dur(1, 0)), Some(dur(0, 500_000_000))),
                format!(
                    "{p}.retry_back_off.max_interval: must not be less than base_interval \
                     (500ms < 1s)"
                ),
            ),
            (
                route_pb::RetryPolicy {
                    per_try_timeout: Some(dur(-3, 0)),
                    ..Default::default()
                },
                format!(
                    "{p}.per_try_timeout.seconds: value -3 must be in the range [0, \
                     315576000000]"
                ),
            ),
        ] {
            assert_eq!(err(&config_with(vec![with_retry(rp)])), msg);
        }
    }

    #[test]
    fn virtual_host_retry_policy_is_kept_separately() {
        let mut rc = config_with(vec![route_to("c")]);
        rc.virtual_hosts[0].retry_policy = Some(route_pb::RetryPolicy {
            retry_on: "internal".to_owned(),
            num_retries: Some(pbuf::UInt32Value { value: 2 }),
            ..Default::default()
        });
        let vh = &decode_rc(&rc).unwrap().virtual_hosts[0];
        let rp = vh.retry_policy.as_ref().unwrap();
        assert_eq!(rp.retryable_codes, vec![RetryableCode::Internal]);
        assert_eq!(rp.max_attempts, 3);
        let RouteAction::Forward(f) = &vh.routes[0].action else {
            panic!()
        };
        assert_eq!(f.retry_policy, None);

        rc.virtual_hosts[0].retry_policy = Some(route_pb::RetryPolicy {
            num_retries: Some(pbuf::UInt32Value { value: 0 }),
            ..Default::default()
        });
        assert_eq!(
            err(&rc),
            "virtual_hosts[0].retry_policy.num_retries: must be greater than 0"
        );
    }

    #[test]
    fn hash_policies() {
        use route_pb::route_action::HashPolicy as Hp;
        use route_pb::route_action::hash_policy::{self as hp, PolicySpecifier as P};
        let f = forward(with_action(route_pb::RouteAction {
            hash_policy: vec![
                Hp {
                    terminal: true,
                    policy_specifier: Some(P::Header(hp::Header {
                        header_name: "x-user".to_owned(),
                        regex_rewrite: Some(matcher_pb::RegexMatchAndSubstitute {
                            pattern: Some(matcher_pb::RegexMatcher {
                                regex: "^u-(.*)$".to_owned(),
                                ..Default::default()
                            }),
                            substitution: "\\1".to_owned(),
                        }),
                    })),
                },
                Hp {
                    terminal: false,
                    policy_specifier: Some(P::FilterState(hp::FilterState {
                        key: "io.grpc.channel_id".to_owned(),
                    })),
                },
                Hp {
                    terminal: false,
                    policy_specifier: Some(P::FilterState(hp::FilterState {
                        key: "other".to_owned(),
                    })),
                },
                Hp {
                    terminal: false,
                    policy_specifier: Some(P::Cookie(Default::default())),
                },
            ],
            ..cluster_action("c")
        }));
        assert_eq!(
            f.hash_policies,
            vec![
                HashPolicy::Header {
                    header_name: "x-user".to_owned(),
                    regex_rewrite: Some(RegexRewrite {
                        pattern: compile_regex("^u-(.*)$", false).unwrap(),
                        substitution: "\\1".to_owned(),
                    }),
                    terminal: true,
                },
                HashPolicy::ChannelId { terminal: false },
            ]
        );

        let p = "virtual_hosts[0].routes[0].route.hash_policy[0].header";
        let header_policy = |header_name: &str, rr: Option<matcher_pb::RegexMatchAndSubstitute>| {
            with_action(route_pb::RouteAction {
                hash_policy: vec![Hp {
                    terminal: false,
                    policy_specifier: Some(P::Header(hp::Header {
                        header_name: header_name.to_owned(),
                        regex_rewrite: rr,
                    })),
                }],
                ..cluster_action("c")
            })
        };
        for (route, msg) in [
            (
                header_policy("", None),
                format!("{p}.header_name: must be non-empty"),
            ),
            (
                header_policy("h", Some(Default::default())),
                format!("{p}.regex_rewrite.pattern: field not present"),
            ),
            (
                header_policy(
                    "h",
                    Some(matcher_pb::RegexMatchAndSubstitute {
                        pattern: Some(Default::default()),
                        substitution: String::new(),
                    }),
                ),
                format!("{p}.regex_rewrite.pattern.regex: must be non-empty"),
            ),
            (
                header_policy(
                    "h",
                    Some(matcher_pb::RegexMatchAndSubstitute {
                        pattern: Some(matcher_pb::RegexMatcher {
                            regex: "(".to_owned(),
                            ..Default::default()
                        }),
                        substitution: String::new(),
                    }),
                ),
                format!("{p}.regex_rewrite.pattern.regex: invalid regex \"(\": unclosed group"),
            ),
        ] {
            assert_eq!(err(&config_with(vec![route])), msg);
        }
    }

    fn plugin(name: &str, type_name: &str, is_optional: bool) -> route_pb::ClusterSpecifierPlugin {
        route_pb::ClusterSpecifierPlugin {
            extension: Some(core_pb::TypedExtensionConfig {
                name: name.to_owned(),
                typed_config: Some(any(type_name, &pbuf::Empty {})),
            }),
            is_optional,
        }
    }

    fn plugin_route(name: &str) -> route_pb::Route {
        with_action(route_pb::RouteAction {
            cluster_specifier: Some(Spec::ClusterSpecifierPlugin(name.to_owned())),
            ..Default::default()
        })
    }

    #[test]
    fn cluster_specifier_plugins() {
        let mut rc = config_with(vec![
            plugin_route("rls"),
            plugin_route("opt"),
            route_to("c"),
        ]);
        rc.cluster_specifier_plugins = vec![
            plugin("rls", RLS_CLUSTER_SPECIFIER_PLUGIN, false),
            plugin("opt", "example.Unknown", true),
            plugin("unused", RLS_CLUSTER_SPECIFIER_PLUGIN, false),
        ];
        let out = decode_rc(&rc).unwrap();
        assert_eq!(
            out.cluster_specifier_plugins,
            vec![ClusterSpecifierPlugin {
                name: "rls".to_owned(),
                config: TypedConfig {
                    type_url: format!("type.googleapis.com/{RLS_CLUSTER_SPECIFIER_PLUGIN}"),
                    value: Bytes::new(),
                    typed_struct: false,
                },
            }]
        );
        assert!(out.cluster_specifier_plugin("rls").is_some());
        let routes = &out.virtual_hosts[0].routes;
        assert_eq!(
            routes.len(),
            2,
            "the route to the optional plugin is ignored"
        );
        let RouteAction::Forward(f) = &routes[0].action else {
            panic!()
        };
        assert_eq!(
            f.cluster,
            ClusterSpecifier::ClusterSpecifierPlugin("rls".to_owned())
        );
    }

    #[test]
    fn invalid_cluster_specifier_plugins() {
        let cases = [
            (
                vec![plugin("p", "example.Unknown", false)],
                "cluster_specifier_plugins[0].extension.typed_config: unsupported cluster \
                 specifier plugin type \"type.googleapis.com/example.Unknown\"",
            ),
            (
                vec![
                    plugin("p", RLS_CLUSTER_SPECIFIER_PLUGIN, false),
                    plugin("p", RLS_CLUSTER_SPECIFIER_PLUGIN, false),
                ],
                "cluster_specifier_plugins[1].extension.name: duplicate cluster specifier \
                 plugin name \"p\"",
            ),
            (
                vec![route_pb::ClusterSpecifierPlugin::default()],
                "cluster_specifier_plugins[0].extension: field not present",
            ),
            (
                vec![plugin("", RLS_CLUSTER_SPECIFIER_PLUGIN, false)],
                "cluster_specifier_plugins[0].extension.name: must be non-empty",
            ),
            (
                vec![route_pb::ClusterSpecifierPlugin {
                    extension: Some(core_pb::TypedExtensionConfig {
                        name: "p".to_owned(),
                        typed_config: None,
                    }),
                    is_optional: false,
                }],
                "cluster_specifier_plugins[0].extension.typed_config: field not present",
            ),
        ];
        for (plugins, msg) in cases {
            let mut rc = config_with(vec![]);
            rc.cluster_specifier_plugins = plugins;
            assert_eq!(err(&rc), msg);
        }
        let rc = config_with(vec![plugin_route("missing")]);
        assert_eq!(
            err(&rc),
            "virtual_hosts[0].routes[0].route.cluster_specifier_plugin: unknown cluster \
             specifier plugin \"missing\" (not in cluster_specifier_plugins)"
        );
        assert_eq!(
            err(&config_with(vec![plugin_route("")])),
            "virtual_hosts[0].routes[0].route.cluster_specifier_plugin: must be non-empty"
        );
    }

    #[test]
    fn filter_overrides() {
        let fault = "envoy.extensions.filters.http.fault.v3.HTTPFault";
        let mut r = route_to("c");
        r.typed_per_filter_config
            .insert("fault".to_owned(), any(fault, &pbuf::Empty {}));
        r.typed_per_filter_config.insert(
            "wrapped".to_owned(),
            any(
                FILTER_CONFIG_TYPE,
                &route_pb::FilterConfig {
                    config: Some(any(fault, &pbuf::Empty {})),
                    is_optional: true,
                    disabled: false,
                },
            ),
        );
        r.typed_per_filter_config.insert(
            "optional-unknown".to_owned(),
            any(
                FILTER_CONFIG_TYPE,
                &route_pb::FilterConfig {
                    config: Some(any("example.Unknown", &pbuf::Empty {})),
                    is_optional: true,
                    disabled: false,
                },
            ),
        );
        r.typed_per_filter_config.insert(
            "disabled".to_owned(),
            any(
                FILTER_CONFIG_TYPE,
                &route_pb::FilterConfig {
                    config: None,
                    is_optional: false,
                    disabled: true,
                },
            ),
        );
        let out = single(r).unwrap().typed_per_filter_config;
        let fault_config = TypedConfig {
            type_url: format!("type.googleapis.com/{fault}"),
            value: Bytes::new(),
            typed_struct: false,
        };
        let expected: BTreeMap<String, FilterConfigOverride> = [
            (
                "fault".to_owned(),
                FilterConfigOverride {
                    config: Some(fault_config.clone()),
                    is_optional: false,
                    disabled: false,
                },
            ),
            (
                "wrapped".to_owned(),
                FilterConfigOverride {
                    config: Some(fault_config),
                    is_optional: true,
                    disabled: false,
                },
            ),
            (
                "disabled".to_owned(),
                FilterConfigOverride {
                    config: None,
                    is_optional: false,
                    disabled: true,
                },
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn invalid_filter_overrides() {
        let mut rc = config_with(vec![]);
        rc.virtual_hosts[0]
            .typed_per_filter_config
            .insert("x".to_owned(), any("example.Unknown", &pbuf::Empty {}));
        assert_eq!(
            err(&rc),
            "virtual_hosts[0].typed_per_filter_config[\"x\"]: unsupported filter type \
             \"type.googleapis.com/example.Unknown\""
        );
        let mut rc = config_with(vec![]);
        rc.virtual_hosts[0].typed_per_filter_config.insert(
            "x".to_owned(),
            pbuf::Any {
                type_url: "no-slash".to_owned(),
                value: Bytes::new(),
            },
        );
        assert_eq!(
            err(&rc),
            "virtual_hosts[0].typed_per_filter_config[\"x\"].type_url: invalid type URL \
             \"no-slash\""
        );
        let mut r = route_to("c");
        r.typed_per_filter_config.insert(
            "x".to_owned(),
            any(FILTER_CONFIG_TYPE, &route_pb::FilterConfig::default()),
        );
        assert_eq!(
            err(&config_with(vec![r])),
            "virtual_hosts[0].routes[0].typed_per_filter_config[\"x\"].config: field not present"
        );
        let mut r = route_to("c");
        r.typed_per_filter_config
            .insert(String::new(), any("example.Unknown", &pbuf::Empty {}));
        assert_eq!(
            err(&config_with(vec![r])),
            "virtual_hosts[0].routes[0].typed_per_filter_config[\"\"]: filter name must be \
             non-empty"
        );
        let mut r = route_to("c");
        r.typed_per_filter_config.insert(
            "x".to_owned(),
            pbuf::Any {
                type_url: format!("type.googleapis.com/{FILTER_CONFIG_TYPE}"),
                value: Bytes::from_static(&[0xff]),
            },
        );
        let msg = err(&config_with(vec![r]));
        assert!(
            msg.starts_with(
                "virtual_hosts[0].routes[0].typed_per_filter_config[\"x\"].value: can't decode \
                 FilterConfig: "
            ),
            "{msg}"
        );
        let wc = route_pb::weighted_cluster::ClusterWeight {
            name: "a".to_owned(),
            weight: Some(pbuf::UInt32Value { value: 1 }),
            typed_per_filter_config: [("y".to_owned(), any("example.Unknown", &pbuf::Empty {}))]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let r = with_action(route_pb::RouteAction {
            cluster_specifier: Some(Spec::WeightedClusters(route_pb::WeightedCluster {
                clusters: vec![wc],
                ..Default::default()
            })),
            ..Default::default()
        });
        assert_eq!(
            err(&config_with(vec![r])),
            "virtual_hosts[0].routes[0].route.weighted_clusters.clusters[0].\
             typed_per_filter_config[\"y\"]: unsupported filter type \
             \"type.googleapis.com/example.Unknown\""
        );
    }

    #[test]
    fn typed_struct_is_unwrapped() {
        let inner = TypedStructHeader {
            type_url: "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"
                .to_owned(),
        };
        let wrapped = any("xds.type.v3.TypedStruct", &inner);
        let cfg = typed_config(&wrapped).unwrap();
        assert!(cfg.typed_struct);
        assert_eq!(
            cfg.type_name(),
            "envoy.extensions.filters.http.fault.v3.HTTPFault"
        );
        assert_eq!(cfg.value, wrapped.value);
        let bad = any("udpa.type.v1.TypedStruct", &TypedStructHeader::default());
        assert_eq!(
            typed_config(&bad).unwrap_err().to_string(),
            "value.type_url: field not present"
        );
    }

    #[test]
    fn values_compare_by_content() {
        let a = decode_rc(&config_with(vec![with_match(route_pb::RouteMatch {
            path_specifier: Some(route_pb::route_match::PathSpecifier::SafeRegex(
                matcher_pb::RegexMatcher {
                    regex: "/a.*".to_owned(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        })]))
        .unwrap();
        let b = a.clone();
        assert_eq!(a, b);
        assert_ne!(
            compile_regex("x", true).unwrap(),
            compile_regex("x", false).unwrap()
        );
    }
}
