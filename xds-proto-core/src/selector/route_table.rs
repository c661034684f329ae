//! The indexed route table: a virtual host's route matchers compiled for first-match
//! lookups. Owns the exact-path and service buckets, the scan list (with its regexes
//! grouped into [`RegexGroup`] DFAs), and the candidate lists precomputed for every exact
//! path, so that a pick costs about the same with 10 routes or 5,000 and answers exactly
//! as the linear [`route_matches`](super::route_matches) would.

use super::RandomSource;
use super::matchers::{has_prefix, header_matches, path_matches, under_fraction};
use super::metadata::Metadata;
use super::regex_group::{RegexGroup, build_groups};
use crate::DetHashMap;
use crate::resource::route::{PathMatcher, RouteMatch};
use regex_syntax::hir::literal::{ExtractKind, Extractor};

/// `/svc/rest` → `/svc/` when `svc` is non-empty: the service part of a gRPC path.
pub(super) fn service_key(path: &str) -> Option<&str> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return None;
    }
    // A plain loop: the service is a few dozen bytes, shorter than `memchr`'s set-up.
    let slash = bytes[1..].iter().position(|&b| b == b'/')?;
    (slash > 0).then(|| &path[..slash + 2])
}

/// A literal every full match of `pattern` starts with: the longest common prefix of
/// the prefix literals that regex-syntax's extractor finds (the analysis the `regex`
/// crate's own prefilters rest on; `/pkg\\.Svc/(Get|Put)` gives `/pkg.Svc/`), cut back
/// to a whole character. Empty when the matches share no start (`.*/M`), and for a
/// pattern the default syntax does not parse (route validation has refused it already).
pub(super) fn regex_literal_prefix(pattern: &str) -> String {
    let Ok(hir) = regex_syntax::parse(pattern) else {
        return String::new();
    };
    let literals = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
    let prefix = literals.longest_common_prefix().unwrap_or_default();
    // A class of characters sharing a UTF-8 lead byte (`[äö]`) leaves part of one.
    let whole = match std::str::from_utf8(prefix) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&prefix[..e.valid_up_to()]).unwrap_or_default(),
    };
    whole.to_owned()
}

/// The longest precomputed candidate list of an exact path (see [`RouteTable`]); a path
/// with more conditional candidates than this is looked up through the buckets.
const MAX_MEMO: usize = 8;

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

/// The lookup structures of a route table as they are sorted out, before their lists are
/// laid out in [`RouteTable::lists`].
struct Buckets<'a> {
    /// Per route: how a lookup checks its path matcher.
    checks: Vec<PathCheck>,
    exact: DetHashMap<Box<str>, Vec<u32>>,
    service: DetHashMap<Box<str>, Vec<u32>>,
    scan: Vec<u32>,
    /// The scan list's regexes as (route, pattern), in route order.
    scanned_regexes: Vec<(usize, &'a str)>,
}

impl<'a> Buckets<'a> {
    /// Puts every route in the bucket its path matcher is found through.
    fn sort(matchers: &'a [RouteMatch]) -> Buckets<'a> {
        let mut buckets = Buckets {
            checks: Vec::with_capacity(matchers.len()),
            exact: DetHashMap::default(),
            service: DetHashMap::default(),
            scan: Vec::new(),
            scanned_regexes: Vec::new(),
        };
        for (i, m) in matchers.iter().enumerate() {
            let check = buckets.add(i, m);
            buckets.checks.push(check);
        }
        buckets
    }

    /// Files route `i` under its exact path, its service or the scan list, and says how
    /// a lookup checks its path matcher.
    fn add(&mut self, i: usize, m: &'a RouteMatch) -> PathCheck {
        let pos = u32::try_from(i).unwrap_or(u32::MAX);
        match (&m.path, m.case_sensitive) {
            (PathMatcher::Path(p), true) => {
                self.exact.entry(p.as_str().into()).or_default().push(pos);
                PathCheck::Exact
            }
            (PathMatcher::Prefix(p), true) => {
                match service_key(p) {
                    Some(key) => self.service.entry(key.into()).or_default().push(pos),
                    None => self.scan.push(pos),
                }
                PathCheck::Prefix(p.as_str().into())
            }
            (PathMatcher::SafeRegex(r), _) => {
                let literal = regex_literal_prefix(r.pattern());
                match service_key(&literal) {
                    Some(key) => self.service.entry(key.into()).or_default().push(pos),
                    None => {
                        self.scan.push(pos);
                        self.scanned_regexes.push((i, r.pattern()));
                    }
                }
                PathCheck::Regex(literal.into_boxed_str())
            }
            _ => {
                self.scan.push(pos);
                PathCheck::Other
            }
        }
    }
}

impl RouteTable {
    /// Compiles route matchers, in route order.
    pub fn new<'a>(matchers: impl IntoIterator<Item = &'a RouteMatch>) -> RouteTable {
        let matchers: Vec<RouteMatch> = matchers.into_iter().cloned().collect();
        let Buckets {
            mut checks,
            exact,
            service,
            scan,
            scanned_regexes,
        } = Buckets::sort(&matchers);

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
        table.memoize_exact_paths(buckets);
        table
    }

    /// Fills the exact-path map from its `buckets`, with the precomputed candidate list
    /// of each path.
    fn memoize_exact_paths(&mut self, buckets: Vec<(Box<str>, Span)>) {
        let mut lists = self.lists.to_vec();
        let mut exact = DetHashMap::default();
        exact.reserve(buckets.len());
        let mut candidates: Vec<u32> = Vec::with_capacity(MAX_MEMO + 1);
        for (path, bucket) in buckets {
            candidates.clear();
            self.walk(&path, self.span(bucket), |pos| {
                candidates.push(u32::try_from(pos).unwrap_or(u32::MAX));
                let conditional = self.matchers.get(pos).is_none_or(|m| {
                    !m.headers.is_empty() || m.runtime_fraction_per_million.is_some()
                });
                !conditional || candidates.len() > MAX_MEMO
            });
            let memo = (candidates.len() <= MAX_MEMO).then(|| push_span(&mut lists, &candidates));
            exact.insert(path, ExactEntry { bucket, memo });
        }
        self.exact = exact;
        self.lists = lists.into_boxed_slice();
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
    /// (its path matcher having matched), drawing from `rng` as [`route_matches`](super::route_matches) does.
    fn conditions_hold<M: Metadata + ?Sized, R: RandomSource + ?Sized>(
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
    pub fn first_match<M: Metadata + ?Sized, R: RandomSource + ?Sized>(
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
