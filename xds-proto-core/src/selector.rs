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
//! scanned. Scanned regexes are evaluated together by multi-pattern DFAs, and an exact
//! path's candidates are resolved when the table is built ([`RouteTable`]), so a pick
//! costs about the same with 10 routes or 5,000.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The random-source trait `select` takes (re-exported so callers need not depend on a
/// matching `rand_core`).
pub use rand_core::RngCore;

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::{Class, Hir, HirKind};

use crate::DetHashMap;
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

/// Whether header matchers can see the header `name` at all.
///
/// gRFC A28 (Picking): "only custom metadata is considered during header matching, unlike
/// in Envoy, where all headers (including HTTP/2 pseudo-headers) are included", because
/// the pick happens above the transport. In gRPC's HTTP/2 protocol (PROTOCOL-HTTP2.md) a
/// request's headers are the call definition followed by custom metadata; the call
/// definition is the pseudo-headers (`:method`, `:scheme`, `:path`, `:authority`), `te`,
/// `grpc-timeout`, `content-type`, `grpc-message-type`, `grpc-encoding`,
/// `grpc-accept-encoding` and `user-agent`, and the other `grpc-` names are reserved for
/// gRPC, never custom metadata. Binary (`-bin`) custom metadata is left out too, as gRPC
/// implementations do (C-core's `GetHeaderValue`, grpc-go's route matcher). The one
/// call-definition header matchers do see is `content-type` ([`header_value`]).
fn visible_to_matchers(name: &str) -> bool {
    let bytes = name.as_bytes();
    let binary = bytes.len() >= 4 && bytes[bytes.len() - 4..].eq_ignore_ascii_case(b"-bin");
    let grpc = bytes.len() >= 5 && bytes[..5].eq_ignore_ascii_case(b"grpc-");
    !(binary
        || grpc
        || bytes.first() == Some(&b':')
        || name.eq_ignore_ascii_case("te")
        || name.eq_ignore_ascii_case("user-agent"))
}

/// The value of header `name` as gRPC's route and hash-policy matchers see it:
/// - only custom metadata is visible (gRFC A28): pseudo-headers (`:authority`, ...), `te`,
///   `user-agent` and `grpc-` headers (`grpc-timeout`, `grpc-encoding`, ...: gRPC's own)
///   are always absent, whatever the metadata holds;
/// - binary headers (`-bin` suffix) are always absent;
/// - `content-type` is always `application/grpc`;
/// - several values of one header are joined with `,` (no space).
pub fn header_value<'a, M: Metadata + ?Sized>(metadata: &'a M, name: &str) -> HeaderValue<'a> {
    if name.eq_ignore_ascii_case("content-type") {
        return HeaderValue::One("application/grpc");
    }
    if !visible_to_matchers(name) {
        return HeaderValue::Absent;
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

// The comparisons below never hand an empty slice to `memcmp`: the pointer of an empty
// `String` or `Box<str>` is dangling (0x1), and glibc's AVX-512 `memcmp` reads short
// inputs with a masked load whose fault suppression on an unmapped page costs over 100 ns
// on some CPUs (AMD Zen 4) — more than a whole pick. Empty prefixes (the catch-all
// `prefix: ""`) and empty header values are common.

/// `s == t`.
#[inline]
fn str_eq(s: &str, t: &str) -> bool {
    s.len() == t.len() && (s.is_empty() || s.as_bytes() == t.as_bytes())
}

/// `s.starts_with(prefix)`.
#[inline]
fn has_prefix(s: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || (s.len() >= prefix.len() && s.as_bytes()[..prefix.len()] == *prefix.as_bytes())
}

/// `s.ends_with(suffix)`.
#[inline]
fn has_suffix(s: &str, suffix: &str) -> bool {
    suffix.is_empty()
        || (s.len() >= suffix.len() && s.as_bytes()[s.len() - suffix.len()..] == *suffix.as_bytes())
}

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
                str_eq(value, v)
            }
        }
        StringMatcher::Prefix {
            value: v,
            ignore_case,
        } => {
            if *ignore_case {
                starts_with_ignore_case(value, v)
            } else {
                has_prefix(value, v)
            }
        }
        StringMatcher::Suffix {
            value: v,
            ignore_case,
        } => {
            if *ignore_case {
                ends_with_ignore_case(value, v)
            } else {
                has_suffix(value, v)
            }
        }
        StringMatcher::Contains {
            value: v,
            ignore_case,
        } => {
            if *ignore_case {
                contains_ignore_case(value, v)
            } else {
                v.is_empty() || value.contains(v.as_str())
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
                has_prefix(path, p)
            } else {
                starts_with_ignore_case(path, p)
            }
        }
        PathMatcher::Path(p) => {
            if case_sensitive {
                str_eq(path, p)
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

/// `/svc/rest` → `/svc/` when `svc` is non-empty: the service part of a gRPC path.
fn service_key(path: &str) -> Option<&str> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return None;
    }
    // A plain loop: the service is a few dozen bytes, shorter than `memchr`'s set-up.
    let slash = bytes[1..].iter().position(|&b| b == b'/')?;
    (slash > 0).then(|| &path[..slash + 2])
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

/// The most patterns one [`RegexGroup`] holds (at most 64: its matches are reported as
/// a `u64` mask). Small groups keep determinization cheap; a lookup that reaches several
/// groups reads the path backwards once per group, usually for a few bytes.
const GROUP_PATTERNS: usize = 16;

/// The size limit of one group's DFA (and of its determinization and NFA).
const GROUP_DFA_LIMIT: usize = 64 << 10;

/// The total size of the groups' DFAs: regexes that no longer fit are run on their own.
const TOTAL_DFA_LIMIT: usize = 1 << 20;

/// The longest precomputed candidate list of an exact path (see [`RouteTable`]); a path
/// with more conditional candidates than this is looked up through the buckets.
const MAX_MEMO: usize = 8;

/// Regexes of the scan list compiled together into one anchored, fully determinized DFA
/// that reports, in one pass over the path, which of them match the whole path. The DFA
/// needs no per-search cache, so lookups stay `&self`, lock-free and allocation-free.
///
/// The DFA reads the path backwards, from its end: scanned regexes are the ones without
/// a literal start (`.*/Debug`, `.*Health.*`), so their literal parts, if any, come
/// later, and a path that cannot match usually dies on its last bytes.
#[derive(Clone)]
struct RegexGroup {
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
}

impl fmt::Debug for RegexGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegexGroup")
            .field("patterns", &self.dfa.pattern_len())
            .field("bytes", &self.dfa.memory_usage())
            .finish()
    }
}

impl RegexGroup {
    /// The group of `patterns` (full-match regexes, as the route validation accepted
    /// them), or `None` when the DFA cannot be built within the size limit or at all
    /// (e.g. Unicode word boundaries).
    fn build(patterns: &[&str]) -> Option<RegexGroup> {
        if patterns.is_empty() || patterns.len() > GROUP_PATTERNS {
            return None;
        }
        // The syntax defaults are the `regex` crate's (Unicode, UTF-8, no flags), with
        // which the route validation compiled the same patterns. The NFA is reversed;
        // every search starts anchored at the path's end, and the state after the start of
        // the path (the reversed input's end) reports the patterns whose match reaches
        // it: the ones that match the whole path.
        let dfa = dense::Builder::new()
            .configure(
                dense::DFA::config()
                    .match_kind(MatchKind::All)
                    .start_kind(StartKind::Anchored)
                    .minimize(false)
                    .dfa_size_limit(Some(GROUP_DFA_LIMIT))
                    .determinize_size_limit(Some(GROUP_DFA_LIMIT)),
            )
            .syntax(syntax::Config::new())
            .thompson(
                thompson::Config::new()
                    .reverse(true)
                    .nfa_size_limit(Some(GROUP_DFA_LIMIT)),
            )
            .build_many(patterns)
            .ok()?;
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .ok()?;
        Some(RegexGroup { dfa, start })
    }

    /// Bit `i` is set when pattern `i` matches the whole of `path`; `None` if the DFA
    /// gave up (a quit state, which the configuration does not produce).
    fn matches(&self, path: &str) -> Option<u64> {
        let dfa = &self.dfa;
        let mut state = self.start;
        for &byte in path.as_bytes().iter().rev() {
            state = dfa.next_state(state, byte);
            if dfa.is_special_state(state) {
                if dfa.is_dead_state(state) {
                    return Some(0);
                }
                if dfa.is_quit_state(state) {
                    return None;
                }
            }
        }
        state = dfa.next_eoi_state(state);
        if !dfa.is_match_state(state) {
            return if dfa.is_quit_state(state) {
                None
            } else {
                Some(0)
            };
        }
        let mut mask = 0u64;
        for i in 0..dfa.match_len(state) {
            mask |= 1u64 << (dfa.match_pattern(state, i).as_usize() % GROUP_PATTERNS);
        }
        Some(mask)
    }
}

/// The most scanned regexes that go into groups (the first ones, which the most lookups
/// reach), and the most group DFAs a table tries to build (a group too big for the limit
/// is split in halves). Determinizing many unanchored regexes together can blow up; these
/// bound the work a table of hundreds of them costs to build. The other regexes run on
/// their own.
const MAX_GROUPED: usize = 64;
const MAX_GROUP_BUILDS: usize = 12;

/// The most ranges a Unicode class of a grouped regex may have. `.` and small negated
/// classes (`[^/]`) have a few; `\w` or `\pL` have hundreds, whose UTF-8 automata make
/// determinization slow (100 ms for `\w` alone) and the DFA large.
const MAX_CLASS_RANGES: usize = 32;

/// Whether `pattern` goes into a DFA group: a DFA can be built for it (no Unicode word
/// boundaries) and cheaply (no large Unicode classes). Others run on their own.
fn dfa_friendly(pattern: &str) -> bool {
    fn small(hir: &Hir) -> bool {
        match hir.kind() {
            HirKind::Class(Class::Unicode(class)) => class.ranges().len() <= MAX_CLASS_RANGES,
            HirKind::Repetition(r) => small(&r.sub),
            HirKind::Capture(c) => small(&c.sub),
            HirKind::Concat(subs) | HirKind::Alternation(subs) => subs.iter().all(small),
            _ => true,
        }
    }
    syntax::parse(pattern)
        .is_ok_and(|hir| !hir.properties().look_set().contains_word_unicode() && small(&hir))
}

/// The groups of the scanned regexes `patterns` (route position, pattern; in route
/// order), and the routes they hold as (route, group, bit). A group is at most
/// [`GROUP_PATTERNS`] consecutive regexes; one whose DFA does not fit the limits is split
/// in halves, and regexes left out run on their own. Groups hold ascending routes, so a
/// lookup meets them in order.
fn build_groups(patterns: &[(usize, &str)]) -> (Vec<RegexGroup>, Vec<(usize, u32, u32)>) {
    struct Builder {
        groups: Vec<RegexGroup>,
        assigned: Vec<(usize, u32, u32)>,
        bytes: usize,
        builds: usize,
    }
    impl Builder {
        fn add(&mut self, chunk: &[(usize, &str)]) {
            if chunk.is_empty() || self.builds == 0 {
                return;
            }
            self.builds -= 1;
            let patterns: Vec<&str> = chunk.iter().map(|&(_, p)| p).collect();
            match RegexGroup::build(&patterns) {
                Some(group) if group.dfa.memory_usage() <= self.bytes => {
                    self.bytes -= group.dfa.memory_usage();
                    let id = u32::try_from(self.groups.len()).unwrap_or(u32::MAX);
                    for (bit, &(route, _)) in chunk.iter().enumerate() {
                        self.assigned
                            .push((route, id, u32::try_from(bit).unwrap_or(u32::MAX)));
                    }
                    self.groups.push(group);
                    return;
                }
                _ => {}
            }
            if chunk.len() > 1 {
                let (first, second) = chunk.split_at(chunk.len() / 2);
                self.add(first);
                self.add(second);
            }
        }
    }
    let compatible: Vec<(usize, &str)> = patterns
        .iter()
        .copied()
        .filter(|&(_, p)| dfa_friendly(p))
        .take(MAX_GROUPED)
        .collect();
    let mut builder = Builder {
        groups: Vec::new(),
        assigned: Vec::new(),
        bytes: TOTAL_DFA_LIMIT,
        builds: MAX_GROUP_BUILDS,
    };
    for chunk in compatible.chunks(GROUP_PATTERNS) {
        builder.add(chunk);
    }
    (builder.groups, builder.assigned)
}

/// How a lookup checks a candidate route's path matcher.
#[derive(Clone, Debug)]
enum PathCheck {
    /// A case-sensitive `path`: it is only reached through the path's own exact bucket.
    Exact,
    /// A case-sensitive `prefix`.
    Prefix(Box<str>),
    /// A regex run on its own, on paths that start with its literal start.
    Regex(Box<str>),
    /// A regex of a [`RegexGroup`]: bit `bit` of the group's mask.
    Grouped { group: u32, bit: u32 },
    /// A case-insensitive matcher: [`path_matches`].
    Other,
}

/// A candidate list: a range of [`RouteTable::lists`].
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    start: u32,
    len: u32,
}

/// Appends `list` to `lists`.
fn push_span(lists: &mut Vec<u32>, list: &[u32]) -> Span {
    let start = u32::try_from(lists.len()).unwrap_or(u32::MAX);
    lists.extend_from_slice(list);
    Span {
        start,
        len: u32::try_from(list.len()).unwrap_or(0),
    }
}

/// What the exact-path map holds for one path.
#[derive(Clone, Copy, Debug)]
struct ExactEntry {
    /// The routes whose matcher is this path (case-sensitively).
    bucket: Span,
    /// Every route whose path matcher matches this path, in order, up to and including
    /// the first one without header matchers or `runtime_fraction`: the RPC goes to the
    /// first of them whose headers (and fraction draw) match. `None` when that list would
    /// be longer than [`MAX_MEMO`].
    memo: Option<Span>,
}

/// How many routes of a [`RouteTable`] each lookup structure holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteTableStats {
    /// Routes found through the exact-path map.
    pub exact: usize,
    /// Routes found through the service map: prefixes and regexes whose literal start
    /// holds a whole service.
    pub service: usize,
    /// Routes checked on every lookup that reaches them (other regexes, case-insensitive
    /// matchers, prefixes shorter than a service such as `""` or `/`).
    pub scanned: usize,
    /// Scanned regexes evaluated together through multi-pattern DFAs (one pass over the
    /// path per group of up to 64), rather than one by one.
    pub grouped_regexes: usize,
    /// Exact paths whose whole candidate list is precomputed.
    pub memoized_paths: usize,
}

/// A route list compiled for first-match lookups.
///
/// Case-sensitive `path` matchers are indexed by the exact path; case-sensitive `prefix`
/// matchers that contain a whole service (`/pkg.Service/`, `/pkg.Service/Meth`) are
/// indexed by that service, and so are `safe_regex` matchers whose literal start holds a
/// whole service (`/pkg\.Service/.*`). Everything else is on the scan list; its regexes
/// are compiled together into multi-pattern DFAs that tell, in one pass over the path,
/// which of them match.
///
/// A lookup visits, in ascending route position, the routes of the path's exact bucket,
/// of its service bucket and of the scan list, and stops at the first that matches: the
/// same answer as a linear scan, with the same draws from the random source. For every
/// exact path of the table that walk is done once when the table is built, as far as the
/// path alone decides it: the lookup of such a path is one hash probe and a check of the
/// header matchers (and fraction) of the few routes left.
#[derive(Clone, Debug)]
pub struct RouteTable {
    matchers: Vec<RouteMatch>,
    /// Per route: how a lookup checks its path matcher.
    checks: Box<[PathCheck]>,
    exact: DetHashMap<Box<str>, ExactEntry>,
    service: DetHashMap<Box<str>, Span>,
    scan: Span,
    /// The candidate lists the spans refer to.
    lists: Box<[u32]>,
    groups: Box<[RegexGroup]>,
}

/// The mask of the last regex group a lookup evaluated (each is computed when first
/// needed; a lookup meets the groups in ascending order, so the last one is enough).
type GroupCache = Option<(u32, Option<u64>)>;

impl RouteTable {
    /// Compiles route matchers, in route order.
    pub fn new<'a>(matchers: impl IntoIterator<Item = &'a RouteMatch>) -> RouteTable {
        let matchers: Vec<RouteMatch> = matchers.into_iter().cloned().collect();
        let mut exact: DetHashMap<Box<str>, Vec<u32>> = DetHashMap::default();
        let mut service: DetHashMap<Box<str>, Vec<u32>> = DetHashMap::default();
        let mut scan = Vec::new();
        let mut checks = Vec::with_capacity(matchers.len());
        let mut scanned_regexes: Vec<(usize, &str)> = Vec::new();
        for (i, m) in matchers.iter().enumerate() {
            let pos = u32::try_from(i).unwrap_or(u32::MAX);
            let check = match (&m.path, m.case_sensitive) {
                (PathMatcher::Path(p), true) => {
                    exact.entry(p.as_str().into()).or_default().push(pos);
                    PathCheck::Exact
                }
                (PathMatcher::Prefix(p), true) => {
                    match service_key(p) {
                        Some(key) => service.entry(key.into()).or_default().push(pos),
                        None => scan.push(pos),
                    }
                    PathCheck::Prefix(p.as_str().into())
                }
                (PathMatcher::SafeRegex(r), _) => {
                    let literal = regex_literal_prefix(r.pattern());
                    match service_key(&literal) {
                        Some(key) => service.entry(key.into()).or_default().push(pos),
                        None => {
                            scan.push(pos);
                            scanned_regexes.push((i, r.pattern()));
                        }
                    }
                    PathCheck::Regex(literal.into_boxed_str())
                }
                _ => {
                    scan.push(pos);
                    PathCheck::Other
                }
            };
            checks.push(check);
        }

        // The scanned regexes, in route order, go into groups.
        let (groups, assigned) = build_groups(&scanned_regexes);
        for (route, group, bit) in assigned {
            if let Some(check) = checks.get_mut(route) {
                *check = PathCheck::Grouped { group, bit };
            }
        }

        let mut lists: Vec<u32> = Vec::new();
        let scan = push_span(&mut lists, &scan);
        let service: DetHashMap<Box<str>, Span> = service
            .into_iter()
            .map(|(k, v)| (k, push_span(&mut lists, &v)))
            .collect();
        let buckets: Vec<(Box<str>, Span)> = exact
            .into_iter()
            .map(|(k, v)| (k, push_span(&mut lists, &v)))
            .collect();
        let mut table = RouteTable {
            matchers,
            checks: checks.into_boxed_slice(),
            exact: DetHashMap::default(),
            service,
            scan,
            lists: lists.into_boxed_slice(),
            groups: groups.into_boxed_slice(),
        };

        // The precomputed candidate lists of the exact paths.
        let mut lists = table.lists.to_vec();
        let mut exact = DetHashMap::default();
        exact.reserve(buckets.len());
        let mut candidates: Vec<u32> = Vec::with_capacity(MAX_MEMO + 1);
        for (path, bucket) in buckets {
            candidates.clear();
            table.walk(&path, table.span(bucket), |pos| {
                candidates.push(u32::try_from(pos).unwrap_or(u32::MAX));
                let conditional = table.matchers.get(pos).is_none_or(|m| {
                    !m.headers.is_empty() || m.runtime_fraction_per_million.is_some()
                });
                !conditional || candidates.len() > MAX_MEMO
            });
            let memo = (candidates.len() <= MAX_MEMO).then(|| push_span(&mut lists, &candidates));
            exact.insert(path, ExactEntry { bucket, memo });
        }
        table.exact = exact;
        table.lists = lists.into_boxed_slice();
        table
    }

    fn span(&self, span: Span) -> &[u32] {
        let start = span.start as usize;
        self.lists
            .get(start..start + span.len as usize)
            .unwrap_or(&[])
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
            exact: self.exact.values().map(|e| e.bucket.len as usize).sum(),
            service: self.service.values().map(|s| s.len as usize).sum(),
            scanned: self.scan.len as usize,
            grouped_regexes: self
                .checks
                .iter()
                .filter(|c| matches!(c, PathCheck::Grouped { .. }))
                .count(),
            memoized_paths: self.exact.values().filter(|e| e.memo.is_some()).count(),
        }
    }

    /// Whether route `pos`'s path matcher matches `path`, as [`path_matches`] says.
    fn matcher_matches(&self, pos: usize, path: &str) -> bool {
        self.matchers
            .get(pos)
            .is_some_and(|m| path_matches(&m.path, m.case_sensitive, path))
    }

    /// Whether route `pos`'s path matcher matches `path` (`pos` comes from one of the
    /// path's own lists).
    fn path_matches_at(&self, pos: usize, path: &str, cache: &mut GroupCache) -> bool {
        match self.checks.get(pos) {
            Some(PathCheck::Exact) => true,
            Some(PathCheck::Prefix(p)) => has_prefix(path, p),
            Some(PathCheck::Regex(literal)) => {
                has_prefix(path, literal) && self.matcher_matches(pos, path)
            }
            Some(&PathCheck::Grouped { group, bit }) => {
                let mask = match *cache {
                    Some((g, mask)) if g == group => mask,
                    _ => {
                        let mask = self
                            .groups
                            .get(group as usize)
                            .and_then(|g| g.matches(path));
                        *cache = Some((group, mask));
                        mask
                    }
                };
                match mask {
                    Some(mask) => (mask >> bit) & 1 == 1,
                    // The DFA gave up (as configured, it never does): run the regex.
                    None => self.matcher_matches(pos, path),
                }
            }
            Some(PathCheck::Other) => self.matcher_matches(pos, path),
            None => false,
        }
    }

    /// Calls `accept` with every route whose path matcher matches `path`, in ascending
    /// position (the routes of `exact`, of the path's service bucket and of the scan
    /// list), until it returns true; returns that route.
    fn walk(
        &self,
        path: &str,
        exact: &[u32],
        mut accept: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let service: &[u32] = match service_key(path).and_then(|k| self.service.get(k)) {
            Some(&s) => self.span(s),
            None => &[],
        };
        let lists = [exact, service, self.span(self.scan)];
        let mut cursors = [0usize; 3];
        let mut cache: GroupCache = None;
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
            if self.path_matches_at(i, path, &mut cache) && accept(i) {
                return Some(i);
            }
        }
    }

    /// Whether route `pos`'s header matchers and `runtime_fraction` let the RPC through
    /// (its path matcher having matched), drawing from `rng` as [`route_matches`] does.
    fn conditions_hold<M: Metadata + ?Sized, R: RngCore + ?Sized>(
        &self,
        pos: usize,
        metadata: &M,
        rng: &mut R,
    ) -> bool {
        self.matchers.get(pos).is_some_and(|m| {
            m.headers.iter().all(|h| header_matches(h, metadata))
                && m.runtime_fraction_per_million
                    .is_none_or(|f| under_fraction(f, rng))
        })
    }

    /// The position of the first route that matches the RPC, if any.
    pub fn first_match<M: Metadata + ?Sized, R: RngCore + ?Sized>(
        &self,
        path: &str,
        metadata: &M,
        rng: &mut R,
    ) -> Option<usize> {
        let bucket: &[u32] = match self.exact.get(path) {
            Some(&ExactEntry {
                memo: Some(memo), ..
            }) => {
                return self
                    .span(memo)
                    .iter()
                    .map(|&pos| pos as usize)
                    .find(|&pos| self.conditions_hold(pos, metadata, rng));
            }
            Some(&ExactEntry { bucket, memo: None }) => self.span(bucket),
            None => &[],
        };
        self.walk(path, bucket, |pos| self.conditions_hold(pos, metadata, rng))
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
        let mut targets: DetHashMap<String, Target> = DetHashMap::default();
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
