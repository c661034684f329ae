//! Aggregate clusters (gRFCs A37, A75): a priority list of leaf clusters, failing over
//! between them as between EDS priorities, each leaf keeping its own LB policy,
//! circuit breaker, drops and outlier detection. A leaf is started when the failover
//! reaches it; leaf clusters are shared with the routes that name them directly.

use std::sync::Arc;
use std::time::Duration;

use super::api::ConnectivityState;
use super::cluster::LeafCluster;
use super::priority::{Choice, Failover};
use super::subchannel::SubchannelPool;
use crate::client::Status;
use crate::time::Instant;

#[derive(Debug)]
pub(super) struct AggregateCluster {
    /// The leaf clusters' slots, in priority order.
    leaves: Vec<u32>,
    failover: Failover,
    started: bool,
    pub(super) failure_status: Arc<Status>,
}

impl AggregateCluster {
    pub(super) fn new(
        leaves: Vec<u32>,
        failover_timeout: Duration,
        failure_status: Arc<Status>,
    ) -> AggregateCluster {
        AggregateCluster {
            failover: Failover::new(leaves.len(), failover_timeout),
            leaves,
            started: false,
            failure_status,
        }
    }

    pub(super) fn is_started(&self) -> bool {
        self.started
    }

    /// Keeps the failover state of a previous instance over the same leaves.
    pub(super) fn inherit(&mut self, previous: AggregateCluster) {
        if previous.leaves == self.leaves {
            self.failover = previous.failover;
            self.started = previous.started;
        }
    }

    pub(super) fn state(&self) -> ConnectivityState {
        if self.started {
            self.failover.state()
        } else {
            ConnectivityState::Idle
        }
    }

    pub(super) fn start(
        &mut self,
        now: Instant,
        leaves: &mut [Option<LeafCluster>],
        pool: &mut SubchannelPool,
    ) {
        if !self.started {
            self.started = true;
            self.refresh(now, leaves, pool);
        }
    }

    /// Takes the leaves' states and runs the failover, starting leaves it reaches.
    pub(super) fn refresh(
        &mut self,
        now: Instant,
        leaves: &mut [Option<LeafCluster>],
        pool: &mut SubchannelPool,
    ) {
        if !self.started {
            return;
        }
        for (i, slot) in self.leaves.iter().enumerate() {
            if self.failover.is_started(i)
                && let Some(leaf) = &leaves[*slot as usize]
            {
                self.failover.child_state(now, i, leaf.state());
            }
        }
        loop {
            match self.failover.choose() {
                Choice::Start(i) => {
                    let state = match &mut leaves[self.leaves[i] as usize] {
                        Some(leaf) => {
                            leaf.start(now, pool);
                            leaf.state()
                        }
                        None => ConnectivityState::TransientFailure,
                    };
                    self.failover.started(now, i, state);
                }
                Choice::Use(_) | Choice::None => return,
            }
        }
    }

    /// The leaf slot picks go to.
    pub(super) fn current_leaf(&self) -> Option<u32> {
        self.failover.current().map(|i| self.leaves[i])
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.failover.next_deadline()
    }

    pub(super) fn handle_timeout(&mut self, now: Instant) -> bool {
        self.failover.handle_timeout(now)
    }
}
