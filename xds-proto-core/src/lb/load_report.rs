//! Load reporting from the pick path (LRS, gRFC A27), as gRPC's `xds_cluster_impl`
//! counts it: a pick sent to an endpoint is a call issued (and in progress) in the
//! endpoint's locality, its end a success or an error there (with the A64 named
//! metrics of the backend's ORCA report, when the embedder has them); a
//! `drop_overloads` drop counts in its category, a circuit-breaker rejection as an
//! uncategorized drop.
//!
//! Everything a pick needs is resolved when the config arrives: per leaf cluster that
//! reports its load, each address's locality counters (one hash lookup, none for a
//! cluster with one locality) and each drop category's counter. A call holds its locality's counters
//! through a slot until it ends, so a call in flight when its cluster changes or goes
//! still ends where it started: calls in progress never leak.

use std::net::SocketAddr;
use std::sync::Arc;

use super::api::Pick;
use crate::DetHashMap;
use crate::client::Status;
use crate::dependency::{ClusterConfig, ClusterResolution};
use crate::lrs::{ClusterLoadStats, DropCounter, LocalityLoadStats};
use crate::resource::endpoint::Locality;

/// A call's hold on its locality's counters (none for a cluster that reports no load).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct LoadSlot {
    index: u32,
    generation: u32,
}

impl LoadSlot {
    /// No counters: the call's cluster reports no load.
    pub(super) const NONE: LoadSlot = LoadSlot {
        index: u32::MAX,
        generation: 0,
    };
}

/// One locality's counters, held by the leaves that list the locality and by the
/// calls in flight there.
#[derive(Debug, Default)]
struct Slot {
    stats: Option<Arc<LocalityLoadStats>>,
    generation: u32,
    holders: u32,
}

/// What a leaf cluster that reports its load counts into.
#[derive(Debug)]
struct LeafLoad {
    stats: ClusterLoadStats,
    drops: Vec<(Box<str>, DropCounter)>,
    /// Every address of the cluster's endpoints with its locality's slot (an address
    /// listed twice counts in its first locality).
    by_address: DetHashMap<SocketAddr, u32>,
    /// The slot of every address when the cluster has one locality (a LOGICAL_DNS
    /// cluster's is unnamed): no lookup.
    only: Option<u32>,
    /// The slots the leaf holds, one per locality.
    held: Vec<u32>,
}

impl LeafLoad {
    fn slot_of(&self, address: SocketAddr) -> Option<u32> {
        self.only.or_else(|| self.by_address.get(&address).copied())
    }
}

/// The load counters of every leaf cluster, by leaf slot, and the locality slots.
#[derive(Debug, Default)]
pub(super) struct LoadReports {
    leaves: Vec<Option<LeafLoad>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The slot of each locality's counters (by their address), for reuse.
    by_stats: DetHashMap<usize, u32>,
}

impl LoadReports {
    /// Takes the leaf clusters of a new config (leaf slot and config): the counters of
    /// each one that reports its load are resolved, the others count nothing.
    pub(super) fn update<'a>(&mut self, leaves: impl Iterator<Item = (u32, &'a ClusterConfig)>) {
        let mut next: Vec<Option<LeafLoad>> = Vec::new();
        for (slot, config) in leaves {
            let Some(stats) = &config.load_stats else {
                continue;
            };
            let leaf = self.resolve(stats, config);
            let slot = slot as usize;
            if next.len() <= slot {
                next.resize_with(slot + 1, || None);
            }
            next[slot] = Some(leaf);
        }
        // The new holds are taken first, so counters still listed keep their slot.
        for old in std::mem::replace(&mut self.leaves, next)
            .into_iter()
            .flatten()
        {
            for slot in old.held {
                self.release(slot);
            }
        }
    }

    fn resolve(&mut self, stats: &ClusterLoadStats, config: &ClusterConfig) -> LeafLoad {
        let mut leaf = LeafLoad {
            stats: stats.clone(),
            drops: Vec::new(),
            by_address: DetHashMap::default(),
            only: None,
            held: Vec::new(),
        };
        match &config.children {
            ClusterResolution::Endpoints {
                endpoints: Some(endpoints),
                ..
            } => {
                leaf.drops = (endpoints.drop_overloads.iter())
                    .map(|d| {
                        (
                            Box::from(d.category.as_str()),
                            stats.drop_counter(&d.category),
                        )
                    })
                    .collect();
                for locality in endpoints.priorities.iter().flat_map(|p| &p.localities) {
                    let slot = self.hold(stats.locality(&locality.locality));
                    leaf.held.push(slot);
                    for endpoint in &locality.endpoints {
                        let addresses = std::iter::once(endpoint.address)
                            .chain(endpoint.additional_addresses.iter().copied());
                        for address in addresses {
                            leaf.by_address.entry(address).or_insert(slot);
                        }
                    }
                }
                if let [only] = leaf.held[..] {
                    leaf.only = Some(only);
                    leaf.by_address = DetHashMap::default();
                }
            }
            ClusterResolution::LogicalDns { .. } => {
                let slot = self.hold(stats.locality(&Locality::default()));
                leaf.held.push(slot);
                leaf.only = Some(slot);
            }
            _ => {}
        }
        leaf
    }

    /// Counts a pick of the leaf cluster in slot `leaf`: a call started in the
    /// address's locality (the call's token then holds it), a drop by category, or a
    /// circuit-breaker rejection (`is_breaker`). Allocates nothing.
    pub(super) fn count_pick(
        &mut self,
        leaf: u32,
        pick: &mut Pick,
        is_breaker: impl FnOnce(&Arc<Status>) -> bool,
    ) {
        let Some(Some(load)) = self.leaves.get(leaf as usize) else {
            return;
        };
        match pick {
            Pick::Complete { address, call, .. } => {
                let Some(index) = load.slot_of(*address) else {
                    return;
                };
                let slot = &mut self.slots[index as usize];
                if let Some(stats) = &slot.stats {
                    stats.call_started();
                    slot.holders += 1;
                    call.load = LoadSlot {
                        index,
                        generation: slot.generation,
                    };
                }
            }
            Pick::Drop { category } => match load.drops.iter().find(|(c, _)| **c == **category) {
                Some((_, counter)) => counter.add(),
                None => load.stats.add_uncategorized_drop(),
            },
            Pick::Fail(status) if is_breaker(status) => load.stats.add_uncategorized_drop(),
            _ => {}
        }
    }

    /// A call that held `load` ended (`ok`: with status OK), with the named metrics
    /// of the backend's ORCA report, if any. A stale or empty slot counts nothing.
    pub(super) fn call_finished<'a>(
        &mut self,
        load: LoadSlot,
        ok: bool,
        named_metrics: impl IntoIterator<Item = (&'a str, f64)>,
    ) {
        let Some(slot) = self.slots.get(load.index as usize) else {
            return;
        };
        if slot.generation != load.generation || slot.holders == 0 {
            return;
        }
        if let Some(stats) = &slot.stats {
            stats.call_finished(ok, named_metrics);
        }
        self.release(load.index);
    }

    /// A hold on a locality's counters: their slot, new or reused.
    fn hold(&mut self, stats: Arc<LocalityLoadStats>) -> u32 {
        let key = Arc::as_ptr(&stats) as usize;
        if let Some(&index) = self.by_stats.get(&key) {
            self.slots[index as usize].holders += 1;
            return index;
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.stats = Some(stats);
        slot.holders = 1;
        self.by_stats.insert(key, index);
        index
    }

    /// Drops one hold; the last one frees the slot (a token still naming it is stale).
    fn release(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        slot.holders -= 1;
        if slot.holders > 0 {
            return;
        }
        if let Some(stats) = slot.stats.take() {
            self.by_stats.remove(&(Arc::as_ptr(&stats) as usize));
        }
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
    }
}
