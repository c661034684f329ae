//! The filter chain map of a server listener, built as gRPC-Go (`FilterChainManager`)
//! and C-core (`FilterChainMap`) build theirs: every normalized matcher (A36's
//! Cartesian product) of the chains a connection can select, keyed by destination
//! prefix, then source type, source prefix and source port. It owns the duplicate
//! check and which chains are pruned from it first:
//!
//! - a chain with a `destination_port` (gRPC has no `use_original_dst`), `server_names`
//!   or `application_protocols` (no listener filters), or a `transport_protocol` other
//!   than unset and `raw_buffer`: a connection never matches it;
//! - under one destination prefix, once a chain says `raw_buffer` the chains with an
//!   unset `transport_protocol` are dropped, those added before it included (a gRPC
//!   connection's transport protocol is `raw_buffer`, which Envoy's matching prefers to
//!   unset). As in gRPC, this goes in listener order: two identical unset chains before
//!   the `raw_buffer` one are still a duplicate.
//!
//! A matcher landing on a key another chain (or the same chain) already holds NACKs the
//! listener. An unset source port is port 0, as in gRPC: `source_ports: [0]` is the same
//! matcher as no `source_ports`.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use super::{CidrRange, FilterChain, FilterChainMatch, MAX_NORMALIZED_MATCHERS, SourceType};
use crate::resource::validate::FieldError;

/// gRPC-Go's text for two chains sharing a normalized matcher.
const OVERLAPPING: &str = "multiple filter chains with overlapping matching rules are defined";

/// The source port key of a matcher without `source_ports`.
const ANY_PORT: u32 = 0;

/// The normalized matchers of the chains that take part in matching.
pub(super) struct ChainMap {
    /// Keyed by destination prefix (`None`: no `prefix_ranges`).
    destinations: HashMap<Option<CidrRange>, DestinationEntry>,
}

/// The matchers under one destination prefix.
#[derive(Default)]
struct DestinationEntry {
    /// Whether a chain with `transport_protocol: raw_buffer` is here: unset ones are not.
    raw_buffer_seen: bool,
    /// (source type, source prefix or `None`, source port or [`ANY_PORT`]) -> the index
    /// of the chain holding it.
    leaves: HashMap<(SourceType, Option<CidrRange>, u32), usize>,
}

impl ChainMap {
    /// The map of `chains` (a listener's `filter_chains`, in order).
    ///
    /// # Errors
    /// Paths relative to the listener: more than [`MAX_NORMALIZED_MATCHERS`] matchers to
    /// enumerate, or two matchers on one key (gRPC's text).
    pub(super) fn build(chains: &[FilterChain]) -> Result<ChainMap, FieldError> {
        let total = chains.iter().fold(0usize, |n, c| {
            n.saturating_add(c.filter_chain_match.normalized_count())
        });
        if total > MAX_NORMALIZED_MATCHERS {
            return Err(FieldError::new(
                "filter_chains",
                format!(
                    "the filter chain matchers expand to {total} normalized matchers \
                     (at most {MAX_NORMALIZED_MATCHERS})"
                ),
            ));
        }
        let mut map = ChainMap {
            destinations: HashMap::new(),
        };
        for (index, chain) in chains.iter().enumerate() {
            map.add(index, &chain.filter_chain_match).map_err(|owner| {
                let why = if owner == index {
                    "a normalized matcher repeats within the chain".to_owned()
                } else {
                    format!("overlaps filter_chains[{owner}]")
                };
                FieldError::new(
                    format!("filter_chains[{index}].filter_chain_match"),
                    format!("{OVERLAPPING} ({why})"),
                )
            })?;
        }
        Ok(map)
    }

    /// Adds the matchers of chain `index`; on a duplicate, the index of the chain that
    /// holds the key already.
    fn add(&mut self, index: usize, m: &FilterChainMatch) -> Result<(), usize> {
        // Dropped before the destination prefix says anything (a chain with server
        // names then says nothing of `raw_buffer` either); one with application
        // protocols is dropped after its `raw_buffer` took the prefix, as in gRPC.
        if m.destination_port.is_some() || !m.server_names.is_empty() {
            return Ok(());
        }
        for destination in or_unset(&m.prefix_ranges) {
            let entry = self.destinations.entry(destination).or_default();
            if entry.admits_transport(&m.transport_protocol) && m.application_protocols.is_empty() {
                entry.add_leaves(index, m)?;
            }
        }
        Ok(())
    }

    /// For each of `count` chains, whether some connection can select it: it holds a
    /// matcher in the map.
    pub(super) fn selectable(&self, count: usize) -> Vec<bool> {
        let mut selectable = vec![false; count];
        for &index in self.destinations.values().flat_map(|d| d.leaves.values()) {
            if let Some(s) = selectable.get_mut(index) {
                *s = true;
            }
        }
        selectable
    }

    /// Whether no chain holds a matcher (gRPC-Go: "no supported filter chains").
    pub(super) fn is_empty(&self) -> bool {
        self.destinations.values().all(|d| d.leaves.is_empty())
    }
}

impl DestinationEntry {
    /// Whether a chain with `protocol` takes part under this prefix: unset until a
    /// `raw_buffer` chain arrives (which drops the unset ones here), `raw_buffer`
    /// always, anything else never.
    fn admits_transport(&mut self, protocol: &str) -> bool {
        match protocol {
            "" => !self.raw_buffer_seen,
            "raw_buffer" => {
                if !self.raw_buffer_seen {
                    self.raw_buffer_seen = true;
                    self.leaves.clear();
                }
                true
            }
            _ => false,
        }
    }

    fn add_leaves(&mut self, index: usize, m: &FilterChainMatch) -> Result<(), usize> {
        let ports: Vec<u32> = if m.source_ports.is_empty() {
            vec![ANY_PORT]
        } else {
            m.source_ports.clone()
        };
        for source in or_unset(&m.source_prefix_ranges) {
            for &port in &ports {
                match self.leaves.entry((m.source_type, source, port)) {
                    Entry::Occupied(owner) => return Err(*owner.get()),
                    Entry::Vacant(slot) => {
                        slot.insert(index);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Each range as a key, or the one unset key when there is none.
fn or_unset(ranges: &[CidrRange]) -> Vec<Option<CidrRange>> {
    if ranges.is_empty() {
        vec![None]
    } else {
        ranges.iter().copied().map(Some).collect()
    }
}
