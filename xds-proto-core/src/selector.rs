//! The config selector (gRFC A31): what a channel runs at the start of every RPC.
//!
//! From one [`XdsConfig`] (or a bare [`VirtualHost`]) it builds a [`ConfigSelector`]
//! that, for an RPC's method path and request metadata, finds the first matching route
//! (gRFC A28 rules), picks the cluster (weighted clusters drawn from a random source the
//! caller passes in), and returns a [`Selection`]: the cluster as a [`ClusterHandle`],
//! the timeout cap of A31, and the route's retry policy (A44, route over virtual host).
//! RPCs that cannot be routed get the status gRPC gives them (UNAVAILABLE).
//!
//! Cluster lifetime follows A31's two-step removal: every selector and every selection
//! holds its clusters through reference-counted [`ClusterHandle`]s issued by a
//! [`ClusterRegistry`]. The registry's `xds_cluster_manager_experimental` LB config
//! lists every cluster that some selector or some in-flight RPC still holds, so a
//! cluster removed from the routes stays until its last handle is dropped; the drop is
//! reported through an optional callback and [`ClusterRegistry::take_released`].
//!
//! Everything here is pure: no clock (deadlines are durations passed in), no I/O and no
//! OS randomness. A pick does not allocate on the common path, and routes whose path
//! matcher is an exact path or a prefix of the gRPC form `/pkg.Service/...` are found
//! through hash maps built once per route table, keeping first-match order by taking the
//! lowest route position among the candidate buckets and the routes that must be
//! scanned.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The random-source trait `select` takes (re-exported so callers need not depend on a
/// matching `rand_core`).
pub use rand_core::RngCore;

use crate::client::{Code, Status};
use crate::dependency::XdsConfig;
use crate::resource::route::{
    ClusterSpecifier, ClusterSpecifierPlugin, DomainPattern, HashPolicy, HeaderMatchKind,
    HeaderMatcher, PathMatcher, RetryPolicy, Route, RouteAction, RouteMatch, StringMatcher,
    VirtualHost,
};

/// The status message gRPC gives an RPC that no route matches.
pub const NO_MATCHING_ROUTE: &str = "No matching route found in xDS route config";

/// The status message gRPC gives an RPC whose route is not a forwarding `route` action
/// (`non_forwarding_action`, `redirect`, `direct_response`, ...).
pub const INAPPROPRIATE_ACTION: &str = "Matching route has inappropriate action";

/// The prefix of a cluster's child name in the cluster manager config.
pub const CLUSTER_CHILD_PREFIX: &str = "cluster:";

/// The prefix of a cluster specifier plugin's child name in the cluster manager config.
pub const PLUGIN_CHILD_PREFIX: &str = "cluster_specifier_plugin:";

/// The JSON type of LB configs ([`ClusterRegistry::lb_config`]).
pub type LbConfigJson = serde_json::Value;

/// The name of the top-level LB policy A31 defines.
pub const CLUSTER_MANAGER_POLICY: &str = "xds_cluster_manager_experimental";

// ---------------------------------------------------------------------------------------
// Request metadata
// ---------------------------------------------------------------------------------------

/// Request metadata as the selector reads it.
///
/// Implemented for slices, arrays and vectors of `(name, value)` pairs; an adapter with
/// its own header map implements it in a few lines.
pub trait Metadata {
    /// Calls `f` with every value of the header `name`, in order. `name` is the header
    /// name of a matcher (gRPC metadata keys are lower-case); implementations compare
    /// names ASCII case-insensitively.
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str));
}

impl<K: AsRef<str>, V: AsRef<str>> Metadata for [(K, V)] {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        for (k, v) in self {
            if k.as_ref().eq_ignore_ascii_case(name) {
                f(v.as_ref());
            }
        }
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> Metadata for [(K, V); N] {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        self[..].for_each_value(name, f);
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Metadata for Vec<(K, V)> {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        self[..].for_each_value(name, f);
    }
}

impl<T: Metadata + ?Sized> Metadata for &T {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        (**self).for_each_value(name, f);
    }
}

/// The value a header matcher sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderValue<'a> {
    /// The header is absent (or hidden from matchers, see [`header_value`]).
    Absent,
    /// The header has one value.
    One(&'a str),
    /// The header has several values, joined with `,` (the only case that allocates).
    Joined(String),
}

impl HeaderValue<'_> {
    /// The value, if present.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            HeaderValue::Absent => None,
            HeaderValue::One(v) => Some(v),
            HeaderValue::Joined(v) => Some(v),
        }
    }
}

/// The value of header `name` as gRPC's route and hash-policy matchers see it:
/// - binary headers (`-bin` suffix) are hidden: always absent;
/// - `grpc-` headers are reserved for gRPC itself and hidden: always absent;
/// - `content-type` is always `application/grpc`;
/// - several values of one header are joined with `,` (no space).
pub fn header_value<'a, M: Metadata + ?Sized>(metadata: &'a M, name: &str) -> HeaderValue<'a> {
    let bytes = name.as_bytes();
    let ends_bin = bytes.len() >= 4 && bytes[bytes.len() - 4..].eq_ignore_ascii_case(b"-bin");
    let grpc = bytes.len() >= 5 && bytes[..5].eq_ignore_ascii_case(b"grpc-");
    if ends_bin || grpc {
        return HeaderValue::Absent;
    }
    if name.eq_ignore_ascii_case("content-type") {
        return HeaderValue::One("application/grpc");
    }
    let mut value = HeaderValue::Absent;
    metadata.for_each_value(name, &mut |v| {
        value = match std::mem::replace(&mut value, HeaderValue::Absent) {
            HeaderValue::Absent => HeaderValue::One(v),
            HeaderValue::One(first) => {
                let mut joined = String::with_capacity(first.len() + 1 + v.len());
                joined.push_str(first);
                joined.push(',');
                joined.push_str(v);
                HeaderValue::Joined(joined)
            }
            HeaderValue::Joined(mut joined) => {
                joined.push(',');
                joined.push_str(v);
                HeaderValue::Joined(joined)
            }
        };
    });
    value
}

// ---------------------------------------------------------------------------------------
// Matching
// ---------------------------------------------------------------------------------------

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

fn ends_with_ignore_case(s: &str, suffix: &str) -> bool {
    s.len() >= suffix.len()
        && s.as_bytes()[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

fn contains_ignore_case(s: &str, needle: &str) -> bool {
    let (s, needle) = (s.as_bytes(), needle.as_bytes());
    needle.is_empty()
        || s.windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Whether `value` matches a string matcher (ASCII case-insensitively when the matcher
/// says `ignore_case`; regexes match the whole value).
pub fn string_matches(matcher: &StringMatcher, value: &str) -> bool {
    match matcher {
        StringMatcher::Exact {
            value: v,
            ignore_case,
        } => {
            if *ignore_case {
                value.eq_ignore_ascii_case(v)
            } else {
                value == v
            }
        }
        StringMatcher::Prefix {
            value: v,
            ignore_case,
        } => {
            if *ignore_case {
                starts_with_ignore_case(value, v)
            } else {
                value.starts_with(v.as_str())
            }
        }
        StringMatcher::Suffix {
            value: v,
            ignore_case,
        } => {
            if *ignore_case {
                ends_with_ignore_case(value, v)
            } else {
                value.ends_with(v.as_str())
            }
        }
        StringMatcher::Contains {
            value: v,
            ignore_case,
        } => {
            if *ignore_case {
                contains_ignore_case(value, v)
            } else {
                value.contains(v.as_str())
            }
        }
        StringMatcher::SafeRegex(r) => r.is_match(value),
    }
}

/// Whether the request metadata satisfies one header matcher, as gRPC evaluates it:
/// `present_match` compares presence (then `invert_match` applies); every other kind
/// fails on an absent header whatever `invert_match` says; a range matches a value that
/// parses as an `i64` (surrounding ASCII whitespace allowed) in `[start, end)`.
pub fn header_matches<M: Metadata + ?Sized>(matcher: &HeaderMatcher, metadata: &M) -> bool {
    let value = header_value(metadata, &matcher.name);
    let matched = match (&matcher.kind, value.as_str()) {
        (HeaderMatchKind::Present(present), v) => v.is_some() == *present,
        (_, None) => return false,
        (HeaderMatchKind::Range { start, end }, Some(v)) => v
            .trim_ascii()
            .parse::<i64>()
            .is_ok_and(|n| n >= *start && n < *end),
        (HeaderMatchKind::String(sm), Some(v)) => string_matches(sm, v),
    };
    matched != matcher.invert_match
}

/// Whether the method path matches a route's path matcher (`case_sensitive` applies to
/// prefix and path matchers, not to regexes).
pub fn path_matches(matcher: &PathMatcher, case_sensitive: bool, path: &str) -> bool {
    match matcher {
        PathMatcher::Prefix(p) => {
            if case_sensitive {
                path.starts_with(p.as_str())
            } else {
                starts_with_ignore_case(path, p)
            }
        }
        PathMatcher::Path(p) => {
            if case_sensitive {
                path == p
            } else {
                path.eq_ignore_ascii_case(p)
            }
        }
        PathMatcher::SafeRegex(r) => r.is_match(path),
    }
}

/// Draws one `runtime_fraction` decision: a uniform value in `[0, 1_000_000)` from one
/// `next_u32`, compared with the fraction.
fn under_fraction<R: RngCore + ?Sized>(per_million: u32, rng: &mut R) -> bool {
    let draw = (u64::from(rng.next_u32()) * 1_000_000) >> 32;
    draw < u64::from(per_million)
}

/// Whether a route matches an RPC. The checks run in gRPC's order: path, then headers,
/// then `runtime_fraction`, which draws one `next_u32` from `rng` only when the path and
/// headers matched. This is the linear reference the indexed [`RouteTable`] agrees with.
pub fn route_matches<M: Metadata + ?Sized, R: RngCore + ?Sized>(
    route: &RouteMatch,
    path: &str,
    metadata: &M,
    rng: &mut R,
) -> bool {
    path_matches(&route.path, route.case_sensitive, path)
        && route.headers.iter().all(|h| header_matches(h, metadata))
        && route
            .runtime_fraction_per_million
            .is_none_or(|f| under_fraction(f, rng))
}

// ---------------------------------------------------------------------------------------
// Virtual host selection
// ---------------------------------------------------------------------------------------

/// How specific a matching domain pattern is: exact beats suffix wildcards, which beat
/// prefix wildcards, which beat `*`; among wildcards the longer literal part wins.
fn specificity(pattern: &DomainPattern) -> (u8, usize) {
    match pattern {
        DomainPattern::Exact(d) => (3, d.len()),
        DomainPattern::Suffix(s) => (2, s.len()),
        DomainPattern::Prefix(p) => (1, p.len()),
        DomainPattern::Any => (0, 0),
    }
}

/// The index of the virtual host whose domains best match `authority`, as Envoy picks
/// it: an exact match first, then the longest `*suffix`, then the longest `prefix*`,
/// then `*`; between equally specific patterns the first virtual host wins. Matching is
/// ASCII case-insensitive. `None` when no domain matches.
pub fn select_virtual_host(hosts: &[VirtualHost], authority: &str) -> Option<usize> {
    let mut best: Option<(usize, (u8, usize))> = None;
    for (i, vh) in hosts.iter().enumerate() {
        for domain in vh.domains.iter().filter(|d| d.matches(authority)) {
            let rank = specificity(domain);
            if best.is_none_or(|(_, b)| rank > b) {
                best = Some((i, rank));
            }
        }
    }
    best.map(|(i, _)| i)
}

// ---------------------------------------------------------------------------------------
// Timeouts (A31)
// ---------------------------------------------------------------------------------------

/// The route's cap on RPC timeouts per A31: `grpc_timeout_header_max` when set, else the
/// route's `max_stream_duration`, else the HCM's. `None` (unset or zero) means no cap.
pub fn timeout_cap(
    grpc_timeout_header_max: Option<Duration>,
    route_max_stream_duration: Option<Duration>,
    hcm_max_stream_duration: Option<Duration>,
) -> Option<Duration> {
    grpc_timeout_header_max
        .or(route_max_stream_duration)
        .or(hcm_max_stream_duration)
        .filter(|d| !d.is_zero())
}

/// The effective RPC timeout of A31's table: the application deadline, lowered to
/// `grpc_timeout_header_max` when that is set and non-zero, or else to
/// `max_stream_duration` (the route's, falling back to the HCM's) when that is set and
/// non-zero. `None` means no timeout (infinite). The application's deadline is never
/// exceeded.
pub fn effective_timeout(
    application_deadline: Option<Duration>,
    grpc_timeout_header_max: Option<Duration>,
    max_stream_duration: Option<Duration>,
) -> Option<Duration> {
    let cap = match grpc_timeout_header_max {
        Some(max) => Some(max).filter(|d| !d.is_zero()),
        None => max_stream_duration.filter(|d| !d.is_zero()),
    };
    match (application_deadline, cap) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

// ---------------------------------------------------------------------------------------
// The indexed route table
// ---------------------------------------------------------------------------------------

/// An FxHash-style hasher for route keys. The keys come from the control plane and the
/// probes from the channel's own RPCs, so no untrusted peer chooses either.
#[derive(Clone, Copy, Default)]
struct FastHasher(u64);

impl FastHasher {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// `/svc/rest` → `/svc/` when `svc` is non-empty: the service part of a gRPC path.
fn service_key(path: &str) -> Option<&str> {
    let rest = path.strip_prefix('/')?;
    match rest.find('/') {
        Some(i) if i > 0 => Some(&path[..i + 2]),
        _ => None,
    }
}

/// A literal every full match of `pattern` starts with: the pattern's leading plain
/// characters (and `\`-escaped punctuation), up to the first metacharacter, leaving out a
/// character a quantifier may repeat zero times. Conservative: empty when the pattern has
/// an alternation or starts with a group, class or flag.
fn regex_literal_prefix(pattern: &str) -> String {
    let mut out = String::new();
    if pattern.contains('|') {
        return out;
    }
    let mut chars = pattern
        .strip_prefix('^')
        .unwrap_or(pattern)
        .chars()
        .peekable();
    while let Some(c) = chars.next() {
        let literal = match c {
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() => e,
                _ => break,
            },
            '.' | '[' | ']' | '(' | ')' | '{' | '}' | '*' | '+' | '?' | '^' | '$' | '|' => break,
            c if c.is_alphanumeric() || c.is_ascii_punctuation() || c == ' ' => c,
            _ => break,
        };
        match chars.peek() {
            Some('*' | '?' | '{') => break,
            Some('+') => {
                out.push(literal);
                break;
            }
            _ => out.push(literal),
        }
    }
    out
}

/// How many routes of a [`RouteTable`] each lookup structure holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteTableStats {
    /// Routes found through the exact-path map.
    pub exact: usize,
    /// Routes found through the service map: prefixes and regexes whose literal start
    /// holds a whole service.
    pub service: usize,
    /// Routes checked on every lookup (other regexes, case-insensitive matchers, prefixes
    /// shorter than a service such as `""` or `/`).
    pub scanned: usize,
}

/// A route list compiled for first-match lookups.
///
/// Case-sensitive `path` matchers are indexed by the exact path; case-sensitive `prefix`
/// matchers that contain a whole service (`/pkg.Service/`, `/pkg.Service/Meth`) are
/// indexed by that service, and so are `safe_regex` matchers whose literal start holds a
/// whole service (`/pkg\.Service/.*`). A lookup visits, in ascending route position, the
/// routes of the path's exact bucket, of its service bucket and of the scan list, and
/// stops at the first that matches: the same answer as a linear scan, with the same
/// draws from the random source. Regexes are only run on paths that start with their
/// literal start.
#[derive(Clone, Debug)]
pub struct RouteTable {
    matchers: Vec<RouteMatch>,
    /// Per route: a literal the path must start with to possibly match (regexes only).
    literals: Vec<Box<str>>,
    exact: FastMap<Box<str>, Box<[u32]>>,
    service: FastMap<Box<str>, Box<[u32]>>,
    scan: Box<[u32]>,
}

impl RouteTable {
    /// Compiles route matchers, in route order.
    pub fn new<'a>(matchers: impl IntoIterator<Item = &'a RouteMatch>) -> RouteTable {
        let matchers: Vec<RouteMatch> = matchers.into_iter().cloned().collect();
        let mut exact: FastMap<Box<str>, Vec<u32>> = FastMap::default();
        let mut service: FastMap<Box<str>, Vec<u32>> = FastMap::default();
        let mut scan = Vec::new();
        let mut literals = Vec::with_capacity(matchers.len());
        for (i, m) in matchers.iter().enumerate() {
            let pos = u32::try_from(i).unwrap_or(u32::MAX);
            let literal = match &m.path {
                PathMatcher::SafeRegex(r) => regex_literal_prefix(r.pattern()),
                _ => String::new(),
            };
            match (&m.path, m.case_sensitive) {
                (PathMatcher::Path(p), true) => {
                    exact.entry(p.as_str().into()).or_default().push(pos)
                }
                (PathMatcher::Prefix(p), true) => match service_key(p) {
                    Some(key) => service.entry(key.into()).or_default().push(pos),
                    None => scan.push(pos),
                },
                (PathMatcher::SafeRegex(_), _) => match service_key(&literal) {
                    Some(key) => service.entry(key.into()).or_default().push(pos),
                    None => scan.push(pos),
                },
                _ => scan.push(pos),
            }
            literals.push(literal.into_boxed_str());
        }
        let freeze = |m: FastMap<Box<str>, Vec<u32>>| -> FastMap<Box<str>, Box<[u32]>> {
            m.into_iter()
                .map(|(k, v)| (k, v.into_boxed_slice()))
                .collect()
        };
        RouteTable {
            matchers,
            literals,
            exact: freeze(exact),
            service: freeze(service),
            scan: scan.into_boxed_slice(),
        }
    }

    /// The number of routes.
    pub fn len(&self) -> usize {
        self.matchers.len()
    }

    /// Whether the table has no routes.
    pub fn is_empty(&self) -> bool {
        self.matchers.is_empty()
    }

    /// The route matchers, in order.
    pub fn matchers(&self) -> &[RouteMatch] {
        &self.matchers
    }

    /// How the routes are split between the lookup structures.
    pub fn stats(&self) -> RouteTableStats {
        RouteTableStats {
            exact: self.exact.values().map(|v| v.len()).sum(),
            service: self.service.values().map(|v| v.len()).sum(),
            scanned: self.scan.len(),
        }
    }

    /// The position of the first route that matches the RPC, if any.
    pub fn first_match<M: Metadata + ?Sized, R: RngCore + ?Sized>(
        &self,
        path: &str,
        metadata: &M,
        rng: &mut R,
    ) -> Option<usize> {
        const NONE: &[u32] = &[];
        let exact: &[u32] = self.exact.get(path).map_or(NONE, |v| v);
        let service: &[u32] = service_key(path)
            .and_then(|k| self.service.get(k))
            .map_or(NONE, |v| v);
        let lists = [exact, service, &self.scan[..]];
        let mut cursors = [0usize; 3];
        loop {
            let mut next: Option<(u32, usize)> = None;
            for (list, (items, &cursor)) in lists.iter().zip(cursors.iter()).enumerate() {
                if let Some(&pos) = items.get(cursor)
                    && next.is_none_or(|(best, _)| pos < best)
                {
                    next = Some((pos, list));
                }
            }
            let (pos, list) = next?;
            cursors[list] += 1;
            let i = pos as usize;
            let possible = self.literals.get(i).is_none_or(|l| path.starts_with(&**l));
            if possible
                && self
                    .matchers
                    .get(i)
                    .is_some_and(|m| route_matches(m, path, metadata, rng))
            {
                return Some(i);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Cluster lifetime
// ---------------------------------------------------------------------------------------

/// What a cluster manager child runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterChild {
    /// A CDS cluster (`cds_experimental`), child name `cluster:<name>`.
    Cluster(String),
    /// A cluster specifier plugin, child name `cluster_specifier_plugin:<name>`.
    Plugin(ClusterSpecifierPlugin),
}

impl ClusterChild {
    /// The child's name in the cluster manager config.
    pub fn child_name(&self) -> String {
        match self {
            ClusterChild::Cluster(name) => format!("{CLUSTER_CHILD_PREFIX}{name}"),
            ClusterChild::Plugin(p) => format!("{PLUGIN_CHILD_PREFIX}{}", p.name),
        }
    }
}

type ReleaseCallback = Box<dyn Fn(&str) + Send + Sync>;

struct RegistryShared {
    released: AtomicBool,
    on_release: Option<ReleaseCallback>,
}

struct ClusterEntry {
    /// `cluster:<name>` or `cluster_specifier_plugin:<name>`.
    key: Arc<str>,
    /// Where the cluster or plugin name starts in `key`.
    name_at: usize,
    plugin: bool,
    shared: Arc<RegistryShared>,
}

impl Drop for ClusterEntry {
    fn drop(&mut self) {
        self.shared.released.store(true, Ordering::Release);
        if let Some(callback) = &self.shared.on_release {
            callback(&self.key);
        }
    }
}

/// A reference to a cluster manager child (a cluster, or a cluster specifier plugin).
///
/// Selectors hold one per cluster their routes use and every [`Selection`] holds one for
/// its RPC; cloning is an atomic increment. When the last handle of a child is dropped,
/// the child leaves the [`ClusterRegistry`]'s LB config.
#[derive(Clone)]
pub struct ClusterHandle(Arc<ClusterEntry>);

impl ClusterHandle {
    /// The child name in the cluster manager config (`cluster:<name>` or
    /// `cluster_specifier_plugin:<name>`).
    pub fn child_name(&self) -> &str {
        &self.0.key
    }

    /// The cluster name, for a CDS cluster.
    pub fn cluster(&self) -> Option<&str> {
        (!self.0.plugin).then(|| &self.0.key[self.0.name_at..])
    }

    /// The plugin name, for a cluster specifier plugin.
    pub fn plugin(&self) -> Option<&str> {
        self.0.plugin.then(|| &self.0.key[self.0.name_at..])
    }

    /// Whether two handles refer to the same registry entry.
    pub fn ptr_eq(a: &ClusterHandle, b: &ClusterHandle) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl fmt::Debug for ClusterHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClusterHandle").field(&&*self.0.key).finish()
    }
}

struct RegistryChild {
    entry: Weak<ClusterEntry>,
    child: ClusterChild,
}

/// The set of cluster manager children, each alive while some handle holds it.
///
/// It lives on the resolver's side. Build each new [`ConfigSelector`] through it, emit
/// [`lb_config`](Self::lb_config) with the selector (the config then holds the new
/// clusters and the ones the previous selector or in-flight RPCs still use), and emit
/// the LB config again after a release is reported (the callback given to
/// [`with_release_callback`](Self::with_release_callback), or
/// [`take_released`](Self::take_released)).
pub struct ClusterRegistry {
    children: BTreeMap<Arc<str>, RegistryChild>,
    shared: Arc<RegistryShared>,
}

impl Default for ClusterRegistry {
    fn default() -> ClusterRegistry {
        ClusterRegistry::new()
    }
}

impl fmt::Debug for ClusterRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRegistry")
            .field("children", &self.children.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ClusterRegistry {
    /// An empty registry.
    pub fn new() -> ClusterRegistry {
        ClusterRegistry {
            children: BTreeMap::new(),
            shared: Arc::new(RegistryShared {
                released: AtomicBool::new(false),
                on_release: None,
            }),
        }
    }

    /// An empty registry that calls `callback` with the child name whenever the last
    /// handle of a child is dropped. The callback runs on the thread that drops the
    /// handle (often a data-plane thread): it should only wake the control loop.
    pub fn with_release_callback(
        callback: impl Fn(&str) + Send + Sync + 'static,
    ) -> ClusterRegistry {
        ClusterRegistry {
            children: BTreeMap::new(),
            shared: Arc::new(RegistryShared {
                released: AtomicBool::new(false),
                on_release: Some(Box::new(callback)),
            }),
        }
    }

    /// A handle on a child: the live entry if one exists (its policy updated to
    /// `child`), else a new one.
    pub fn handle(&mut self, child: ClusterChild) -> ClusterHandle {
        let key: Arc<str> = Arc::from(child.child_name());
        if let Some(existing) = self.children.get_mut(&key)
            && let Some(entry) = existing.entry.upgrade()
        {
            existing.child = child;
            return ClusterHandle(entry);
        }
        let prefix = match child {
            ClusterChild::Cluster(_) => CLUSTER_CHILD_PREFIX,
            ClusterChild::Plugin(_) => PLUGIN_CHILD_PREFIX,
        };
        let entry = Arc::new(ClusterEntry {
            key: key.clone(),
            name_at: prefix.len(),
            plugin: matches!(child, ClusterChild::Plugin(_)),
            shared: self.shared.clone(),
        });
        self.children.insert(
            key,
            RegistryChild {
                entry: Arc::downgrade(&entry),
                child,
            },
        );
        ClusterHandle(entry)
    }

    /// Whether some child lost its last handle since the last call (and clears the flag).
    pub fn take_released(&self) -> bool {
        self.shared.released.swap(false, Ordering::AcqRel)
    }

    fn prune(&mut self) {
        self.children.retain(|_, c| c.entry.strong_count() > 0);
    }

    /// The child names still held by some handle, sorted.
    pub fn children(&mut self) -> Vec<String> {
        self.prune();
        self.children.keys().map(|k| k.to_string()).collect()
    }

    /// Whether the child `child_name` (`cluster:<name>` ...) is still held.
    pub fn contains(&self, child_name: &str) -> bool {
        self.children
            .get(child_name)
            .is_some_and(|c| c.entry.strong_count() > 0)
    }

    /// The service config's `loadBalancingConfig` as A31 describes it:
    /// `[{"xds_cluster_manager_experimental": {"children": {NAME: {"childPolicy": [...]}}}}]`
    /// with `{"cds_experimental": {"cluster": NAME}}` for clusters. Plugin children carry
    /// the plugin's configuration opaquely, as
    /// `{"cluster_specifier_plugin_experimental": {"name", "typeUrl", "valueBase64"}}`;
    /// use [`lb_config_with`](Self::lb_config_with) to turn it into the plugin's own
    /// policy (e.g. `rls_experimental`).
    pub fn lb_config(&mut self) -> LbConfigJson {
        self.lb_config_with(|p| {
            serde_json::json!([{
                "cluster_specifier_plugin_experimental": {
                    "name": p.name,
                    "typeUrl": p.config.type_url,
                    "valueBase64": base64(&p.config.value),
                }
            }])
        })
    }

    /// [`lb_config`](Self::lb_config) with plugin children's `childPolicy` built by
    /// `plugin_policy`.
    pub fn lb_config_with(
        &mut self,
        plugin_policy: impl Fn(&ClusterSpecifierPlugin) -> LbConfigJson,
    ) -> LbConfigJson {
        self.prune();
        let mut children = serde_json::Map::new();
        for (key, c) in &self.children {
            let policy = match &c.child {
                ClusterChild::Cluster(name) => {
                    serde_json::json!([{ "cds_experimental": { "cluster": name } }])
                }
                ClusterChild::Plugin(p) => plugin_policy(p),
            };
            children.insert(
                key.to_string(),
                serde_json::json!({ "childPolicy": policy }),
            );
        }
        serde_json::json!([{ CLUSTER_MANAGER_POLICY: { "children": children } }])
    }
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The config selector
// ---------------------------------------------------------------------------------------

/// Where a route sends an RPC: a cluster manager child, or the status its RPCs fail
/// with when the cluster could not be resolved.
#[derive(Clone, Debug)]
struct Target {
    handle: ClusterHandle,
    error: Option<Status>,
}

#[derive(Clone, Debug)]
enum Action {
    /// Not a forwarding action: RPCs fail with UNAVAILABLE.
    Inappropriate,
    /// One cluster or plugin.
    Single(Target),
    /// Weighted clusters: `ends[i]` is the cumulative weight through `targets[i]`.
    Weighted {
        ends: Box<[u32]>,
        targets: Box<[Target]>,
    },
}

/// One route as a selector keeps it.
#[derive(Debug)]
struct RouteEntry {
    index: usize,
    route: Route,
    action: Action,
    retry_policy: Option<RetryPolicy>,
    timeout_cap: Option<Duration>,
}

/// The outcome of a successful pick: everything the channel needs for the RPC.
///
/// It holds the chosen cluster: keep it until the RPC is committed (no more LB picks),
/// then drop it. Cloning it or its parts never allocates.
#[derive(Clone, Debug)]
pub struct Selection {
    entry: Arc<RouteEntry>,
    cluster: ClusterHandle,
}

impl Selection {
    /// The chosen cluster manager child.
    pub fn cluster(&self) -> &ClusterHandle {
        &self.cluster
    }

    /// Gives up everything but the cluster handle.
    pub fn into_cluster(self) -> ClusterHandle {
        self.cluster
    }

    /// The position of the matched route in the virtual host.
    pub fn route_index(&self) -> usize {
        self.entry.index
    }

    /// The matched route.
    pub fn route(&self) -> &Route {
        &self.entry.route
    }

    /// The route's cap on the RPC timeout (A31): `None` means no cap.
    pub fn timeout_cap(&self) -> Option<Duration> {
        self.entry.timeout_cap
    }

    /// The RPC's timeout given the application's deadline (A31's table): the smaller of
    /// the two, `None` when neither is set.
    pub fn effective_timeout(&self, application_deadline: Option<Duration>) -> Option<Duration> {
        match (application_deadline, self.entry.timeout_cap) {
            (Some(a), Some(c)) => Some(a.min(c)),
            (a, c) => a.or(c),
        }
    }

    /// The retry policy: the route's, else the virtual host's (A44). gRPC retries only
    /// when [`RetryPolicy::retryable_codes`] is non-empty; the HTTP conditions are kept
    /// for data planes that act on them.
    pub fn retry_policy(&self) -> Option<&RetryPolicy> {
        self.entry.retry_policy.as_ref()
    }

    /// The route's hash policies (A42), in order.
    pub fn hash_policies(&self) -> &[HashPolicy] {
        match &self.entry.route.action {
            RouteAction::Forward(f) => &f.hash_policies,
            _ => &[],
        }
    }
}

/// Routes RPCs for one virtual host (gRFC A31's per-RPC config selector).
///
/// `select` takes `&self` and is safe to call from many threads at once.
#[derive(Debug)]
pub struct ConfigSelector {
    virtual_host: String,
    table: RouteTable,
    entries: Vec<Arc<RouteEntry>>,
}

impl ConfigSelector {
    /// The selector for an [`XdsConfig`]: the chosen virtual host's routes, the HCM's
    /// `max_stream_duration`, and the clusters' resolution. RPCs routed to a cluster whose
    /// entry in the config is an error fail with UNAVAILABLE naming the cluster and the
    /// error.
    pub fn new(config: &XdsConfig, registry: &mut ClusterRegistry) -> ConfigSelector {
        ConfigSelector::build(
            config.virtual_host(),
            &config.route_config.cluster_specifier_plugins,
            config.max_stream_duration,
            registry,
            |name| match config.clusters.get(name) {
                Some(Ok(_)) => None,
                Some(Err(e)) => Some(Status::new(
                    Code::UNAVAILABLE,
                    format!("cluster {name:?}: {}", e.status.message),
                )),
                None => Some(Status::new(
                    Code::UNAVAILABLE,
                    format!("cluster {name:?} is not in the xDS config"),
                )),
            },
        )
    }

    /// The selector for a bare virtual host, every cluster taken as usable.
    pub fn from_virtual_host(
        virtual_host: &VirtualHost,
        plugins: &[ClusterSpecifierPlugin],
        hcm_max_stream_duration: Option<Duration>,
        registry: &mut ClusterRegistry,
    ) -> ConfigSelector {
        ConfigSelector::build(
            virtual_host,
            plugins,
            hcm_max_stream_duration,
            registry,
            |_| None,
        )
    }

    fn build(
        vh: &VirtualHost,
        plugins: &[ClusterSpecifierPlugin],
        hcm_max_stream_duration: Option<Duration>,
        registry: &mut ClusterRegistry,
        cluster_error: impl Fn(&str) -> Option<Status>,
    ) -> ConfigSelector {
        let mut targets: FastMap<String, Target> = FastMap::default();
        let mut target = |child: ClusterChild, error: Option<Status>| -> Target {
            let key = child.child_name();
            targets
                .entry(key)
                .or_insert_with(|| Target {
                    handle: registry.handle(child),
                    error,
                })
                .clone()
        };
        let mut entries = Vec::with_capacity(vh.routes.len());
        for (index, route) in vh.routes.iter().enumerate() {
            let (action, retry_policy, timeout_cap) = match &route.action {
                RouteAction::Forward(f) => {
                    let action = match &f.cluster {
                        ClusterSpecifier::Cluster(name) => Action::Single(target(
                            ClusterChild::Cluster(name.clone()),
                            cluster_error(name),
                        )),
                        ClusterSpecifier::WeightedClusters(clusters) => {
                            let mut end = 0u32;
                            let mut ends = Vec::with_capacity(clusters.len());
                            let mut ts = Vec::with_capacity(clusters.len());
                            for wc in clusters {
                                end = end.saturating_add(wc.weight);
                                ends.push(end);
                                ts.push(target(
                                    ClusterChild::Cluster(wc.name.clone()),
                                    cluster_error(&wc.name),
                                ));
                            }
                            Action::Weighted {
                                ends: ends.into_boxed_slice(),
                                targets: ts.into_boxed_slice(),
                            }
                        }
                        ClusterSpecifier::ClusterSpecifierPlugin(name) => {
                            match plugins.iter().find(|p| &p.name == name) {
                                Some(p) => {
                                    Action::Single(target(ClusterChild::Plugin(p.clone()), None))
                                }
                                None => Action::Inappropriate,
                            }
                        }
                    };
                    let retry_policy = f.retry_policy.clone().or_else(|| vh.retry_policy.clone());
                    let cap = timeout_cap(
                        f.grpc_timeout_header_max,
                        f.max_stream_duration,
                        hcm_max_stream_duration,
                    );
                    (action, retry_policy, cap)
                }
                RouteAction::NonForwarding | RouteAction::Unsupported => {
                    (Action::Inappropriate, None, None)
                }
            };
            entries.push(Arc::new(RouteEntry {
                index,
                route: route.clone(),
                action,
                retry_policy,
                timeout_cap,
            }));
        }
        ConfigSelector {
            virtual_host: vh.name.clone(),
            table: RouteTable::new(vh.routes.iter().map(|r| &r.matcher)),
            entries,
        }
    }

    /// The virtual host's name.
    pub fn virtual_host(&self) -> &str {
        &self.virtual_host
    }

    /// The compiled route table.
    pub fn route_table(&self) -> &RouteTable {
        &self.table
    }

    /// The clusters (and plugins) this selector can pick, as cluster manager child names.
    pub fn children(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .entries
            .iter()
            .flat_map(|e| match &e.action {
                Action::Inappropriate => &[][..],
                Action::Single(t) => std::slice::from_ref(t),
                Action::Weighted { targets, .. } => &targets[..],
            })
            .map(|t| t.handle.child_name())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Routes one RPC: `path` is the method path (`/pkg.Service/Method`), `metadata` the
    /// request headers, and `rng` the caller's random source (one `next_u32` per
    /// `runtime_fraction` evaluated, one per weighted-cluster draw).
    ///
    /// Errors are the statuses gRPC fails such RPCs with: UNAVAILABLE for no matching
    /// route, for a non-forwarding action, and for a cluster the xDS config could not
    /// resolve.
    pub fn select<M: Metadata + ?Sized, R: RngCore + ?Sized>(
        &self,
        path: &str,
        metadata: &M,
        rng: &mut R,
    ) -> Result<Selection, Status> {
        let Some(index) = self.table.first_match(path, metadata, rng) else {
            return Err(Status::new(Code::UNAVAILABLE, NO_MATCHING_ROUTE));
        };
        let Some(entry) = self.entries.get(index) else {
            return Err(Status::new(Code::UNAVAILABLE, NO_MATCHING_ROUTE));
        };
        let target = match &entry.action {
            Action::Inappropriate => {
                return Err(Status::new(Code::UNAVAILABLE, INAPPROPRIATE_ACTION));
            }
            Action::Single(t) => t,
            Action::Weighted { ends, targets } => {
                let total = ends.last().copied().unwrap_or(0);
                let key = ((u64::from(rng.next_u32()) * u64::from(total)) >> 32) as u32;
                let i = ends.partition_point(|&end| end <= key);
                match targets.get(i) {
                    Some(t) => t,
                    None => return Err(Status::new(Code::UNAVAILABLE, INAPPROPRIATE_ACTION)),
                }
            }
        };
        if let Some(error) = &target.error {
            return Err(error.clone());
        }
        Ok(Selection {
            entry: entry.clone(),
            cluster: target.handle.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_keys() {
        assert_eq!(service_key("/pkg.Svc/Method"), Some("/pkg.Svc/"));
        assert_eq!(service_key("/pkg.Svc/"), Some("/pkg.Svc/"));
        assert_eq!(service_key("/pkg.Svc/a/b"), Some("/pkg.Svc/"));
        assert_eq!(service_key("/pkg.Svc"), None);
        assert_eq!(service_key("//x"), None);
        assert_eq!(service_key("pkg/x"), None);
        assert_eq!(service_key(""), None);
    }

    #[test]
    fn regex_literal_prefixes_are_conservative() {
        for (pattern, literal) in [
            ("/pkg\\.Svc/.*", "/pkg.Svc/"),
            ("^/pkg\\.Svc/Get[0-9]+", "/pkg.Svc/Get"),
            ("/a/bc*", "/a/b"),
            ("/a/bc?d", "/a/b"),
            ("/a/bc{0,2}", "/a/b"),
            ("/a/bc+d", "/a/bc"),
            ("/a\\/b\\d", "/a/b"),
            ("/a/(b)", "/a/"),
            ("/a/[bc]", "/a/"),
            ("/a/b|/c/d", ""),
            ("(?i)/a/b", ""),
            (".*/M", ""),
            ("\\Q/a", ""),
            ("/ü/x", "/ü/x"),
        ] {
            assert_eq!(regex_literal_prefix(pattern), literal, "{pattern}");
        }
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, out) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), out);
        }
    }

    #[test]
    fn ignore_case_helpers() {
        assert!(starts_with_ignore_case("/PKG.svc/M", "/pkg.SVC/"));
        assert!(!starts_with_ignore_case("/p", "/pkg"));
        assert!(ends_with_ignore_case("Value-ABC", "abc"));
        assert!(contains_ignore_case("xxHeLLoyy", "hello"));
        assert!(contains_ignore_case("x", ""));
        assert!(!contains_ignore_case("hel", "hello"));
    }

    #[test]
    fn fraction_draw_bounds() {
        struct Fixed(u32);
        impl RngCore for Fixed {
            fn next_u32(&mut self) -> u32 {
                self.0
            }
            fn next_u64(&mut self) -> u64 {
                u64::from(self.0)
            }
            fn fill_bytes(&mut self, dest: &mut [u8]) {
                dest.fill(0);
            }
        }
        assert!(under_fraction(1, &mut Fixed(0)));
        assert!(!under_fraction(0, &mut Fixed(0)));
        assert!(under_fraction(1_000_000, &mut Fixed(u32::MAX)));
        assert!(!under_fraction(999_999, &mut Fixed(u32::MAX)));
    }
}
