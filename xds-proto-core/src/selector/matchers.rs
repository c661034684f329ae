//! The per-route match predicates of gRFC A28: string, header and path matchers, the
//! `runtime_fraction` draw, and virtual host selection by domain. [`route_matches`] is
//! the linear reference the indexed [`RouteTable`](super::RouteTable) agrees with.

use super::RandomSource;
use super::metadata::{Metadata, header_value};
use crate::resource::route::{
    DomainPattern, HeaderMatchKind, HeaderMatcher, PathMatcher, RouteMatch, StringMatcher,
    VirtualHost,
};

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
pub(super) fn has_prefix(s: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || (s.len() >= prefix.len() && s.as_bytes()[..prefix.len()] == *prefix.as_bytes())
}

/// `s.ends_with(suffix)`.
#[inline]
fn has_suffix(s: &str, suffix: &str) -> bool {
    suffix.is_empty()
        || (s.len() >= suffix.len() && s.as_bytes()[s.len() - suffix.len()..] == *suffix.as_bytes())
}

pub(super) fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

pub(super) fn ends_with_ignore_case(s: &str, suffix: &str) -> bool {
    s.len() >= suffix.len()
        && s.as_bytes()[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

pub(super) fn contains_ignore_case(s: &str, needle: &str) -> bool {
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

/// Whether the request metadata satisfies one header matcher, as gRPC evaluates it
/// (see [`header_value_matches`]), with the header's value as route matching sees it
/// ([`header_value`]).
pub fn header_matches<M: Metadata + ?Sized>(matcher: &HeaderMatcher, metadata: &M) -> bool {
    header_value_matches(matcher, header_value(metadata, &matcher.name).as_str())
}

/// Whether a header matcher accepts the header's value (`None`: absent), as gRPC
/// evaluates it: `present_match` compares presence (then `invert_match` applies); every
/// other kind fails on an absent header whatever `invert_match` says; a range matches a
/// value that parses as an `i64` (surrounding ASCII whitespace allowed) in `[start, end)`.
/// Route matching and RBAC (A41) differ only in which value they look up.
pub fn header_value_matches(matcher: &HeaderMatcher, value: Option<&str>) -> bool {
    let matched = match (&matcher.kind, value) {
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
pub(super) fn under_fraction<R: RandomSource + ?Sized>(per_million: u32, rng: &mut R) -> bool {
    let draw = (u64::from(rng.next_u32()) * 1_000_000) >> 32;
    draw < u64::from(per_million)
}

/// Whether a route matches an RPC. The checks run in gRPC's order: path, then headers,
/// then `runtime_fraction`, which draws one `next_u32` from `rng` only when the path and
/// headers matched. This is the linear reference the indexed [`RouteTable`](super::RouteTable) agrees with.
pub fn route_matches<M: Metadata + ?Sized, R: RandomSource + ?Sized>(
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
