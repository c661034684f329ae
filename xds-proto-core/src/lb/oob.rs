//! Which subchannels run ORCA out-of-band load reports (A51), and at what interval: the
//! shortest any cluster holding the subchannel asks for (weighted round robin with
//! `enable_oob_load_report`). Recomputed when the clusters change; the embedder is told
//! each change as an `LbAction::LoadReports`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::api::{LbAction, SubchannelId};
use super::cluster::LeafCluster;
use super::subchannel::SubchannelPool;

/// The intervals the embedder was last told, by subchannel.
#[derive(Debug, Default)]
pub(super) struct OobSubscriptions {
    running: BTreeMap<SubchannelId, Duration>,
}

impl OobSubscriptions {
    /// Compares what the clusters want now with what runs, and queues the changes.
    /// Subchannels that are gone (disconnected) need no stop.
    pub(super) fn refresh<'a>(
        &mut self,
        leaves: impl Iterator<Item = &'a LeafCluster>,
        pool: &mut SubchannelPool,
    ) {
        let mut wanted: BTreeMap<SubchannelId, Duration> = BTreeMap::new();
        for leaf in leaves {
            let Some(interval) = leaf.oob_interval() else {
                continue;
            };
            for id in leaf.subchannels() {
                wanted
                    .entry(*id)
                    .and_modify(|i| *i = (*i).min(interval))
                    .or_insert(interval);
            }
        }
        for (id, interval) in &wanted {
            if self.running.get(id) != Some(interval) {
                pool.actions.push_back(LbAction::LoadReports {
                    subchannel: *id,
                    interval: Some(*interval),
                });
            }
        }
        for id in self.running.keys() {
            if !wanted.contains_key(id) && pool.address(*id).is_some() {
                pool.actions.push_back(LbAction::LoadReports {
                    subchannel: *id,
                    interval: None,
                });
            }
        }
        self.running = wanted;
    }
}
