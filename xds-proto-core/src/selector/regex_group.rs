//! Multi-pattern regex DFAs: the scanned path regexes of a route table compiled
//! together in small groups, each group telling in one backward pass over the path
//! which of its regexes match the whole path. Owns the size limits that keep building
//! them cheap and the choice of which regexes are grouped at all.

use std::fmt;

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::{Class, Hir, HirKind};

/// The most patterns one [`RegexGroup`] holds (at most 64: its matches are reported as
/// a `u64` mask). Small groups keep determinization cheap; a lookup that reaches several
/// groups reads the path backwards once per group, usually for a few bytes.
const GROUP_PATTERNS: usize = 16;

/// The size limit of one group's DFA (and of its determinization and NFA).
const GROUP_DFA_LIMIT: usize = 64 << 10;

/// The total size of the groups' DFAs: regexes that no longer fit are run on their own.
const TOTAL_DFA_LIMIT: usize = 1 << 20;

/// Regexes of the scan list compiled together into one anchored, fully determinized DFA
/// that reports, in one pass over the path, which of them match the whole path. The DFA
/// needs no per-search cache, so lookups stay `&self`, lock-free and allocation-free.
///
/// The DFA reads the path backwards, from its end: scanned regexes are the ones without
/// a literal start (`.*/Debug`, `.*Health.*`), so their literal parts, if any, come
/// later, and a path that cannot match usually dies on its last bytes.
#[derive(Clone)]
pub(super) struct RegexGroup {
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
    pub(super) fn matches(&self, path: &str) -> Option<u64> {
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
pub(super) fn build_groups(
    patterns: &[(usize, &str)],
) -> (Vec<RegexGroup>, Vec<(usize, u32, u32)>) {
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
