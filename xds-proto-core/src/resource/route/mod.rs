//! RDS: decoding and validating `envoy.config.route.v3.RouteConfiguration` into a compact
//! [`RouteConfigResource`], following gRPC's rules (gRFCs A27, A28, A31, A39, A42, A44 and
//! the RLS cluster-specifier-plugin rules).
//!
//! The module owns the route types the config selector consumes: virtual hosts and their
//! domain patterns, route matchers (path, headers, runtime fraction), route actions,
//! retry and hash policies and per-route filter overrides. The HCM decoder in the
//! `listener` module reuses this module's validation for inline route configurations.
//!
//! The parts: this module holds the types (and compiles their regexes); `decode` checks
//! a `RouteConfiguration` down to its route matchers; `action` checks route actions,
//! with their weighted clusters, retry and hash policies, and per-filter overrides. The
//! field-validation helpers all decoders share live in `resource::validate`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use super::validate::{FieldError, type_name};
use crate::filter::FilterOverride;

mod action;
mod by_route;
mod decode;
mod hash;
#[cfg(test)]
mod tests;

pub use decode::decode;
pub(super) use decode::parse_route_configuration;
pub(crate) use decode::{parse_header_matcher, parse_string_matcher};

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
#[non_exhaustive]
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
#[non_exhaustive]
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

/// Compiles a resource regex with a size limit. `full_match` anchors it as
/// `^(?:pattern)$` (matchers); otherwise it matches anywhere (rewrites).
fn compile_regex(pattern: &str, full_match: bool) -> Result<SafeRegex, FieldError> {
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
#[non_exhaustive]
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
#[non_exhaustive]
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
#[non_exhaustive]
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
#[non_exhaustive]
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
    /// The override config, parsed by its filter (A39); `None` only for a
    /// `FilterConfig` with `disabled` set and no config.
    pub config: Option<FilterOverride>,
    /// `FilterConfig.is_optional`.
    pub is_optional: bool,
    /// `FilterConfig.disabled`: the filter is disabled for this scope.
    pub disabled: bool,
}

/// A hash policy (A42).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
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
#[non_exhaustive]
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
