//! Weighted localities (`wrr_locality` over gRPC's `weighted_target`): one endpoint
//! policy per locality; a pick chooses among the READY localities in proportion to
//! their weights, then asks that locality's policy. The aggregate state is READY if
//! any locality is, else CONNECTING, else IDLE, else TRANSIENT_FAILURE.

use super::api::{ConnectivityState, SubchannelId};
use super::policy::{Ctx, EndpointPolicy, PickRng, Picked};

#[derive(Debug)]
pub(super) struct Localities {
    children: Vec<(u32, EndpointPolicy)>,
    /// Cumulative weights of the READY localities, with their positions.
    ready: Vec<(u64, u32)>,
    state: ConnectivityState,
}

impl Localities {
    pub(super) fn new(children: Vec<(u32, EndpointPolicy)>) -> Localities {
        let mut localities = Localities {
            ready: Vec::with_capacity(children.len()),
            children,
            state: ConnectivityState::Idle,
        };
        localities.refresh();
        localities
    }

    /// The localities' policies, in order.
    pub(super) fn policies(&self) -> impl Iterator<Item = &EndpointPolicy> {
        self.children.iter().map(|(_, policy)| policy)
    }

    pub(super) fn state(&self) -> ConnectivityState {
        self.state
    }

    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        for (_, child) in &mut self.children {
            child.on_state(ctx, id);
        }
        self.refresh();
    }

    /// Weighted round robin's weights may have changed: its localities rebuild their
    /// schedulers (the READY set is unchanged).
    pub(super) fn refresh_weights(&mut self, ctx: &mut Ctx) {
        for (_, child) in &mut self.children {
            child.refresh_weights(ctx);
        }
    }

    fn refresh(&mut self) {
        self.ready.clear();
        let mut total = 0u64;
        for (i, (weight, child)) in self.children.iter().enumerate() {
            if child.state() == ConnectivityState::Ready {
                total += u64::from(*weight);
                self.ready.push((total, i as u32));
            }
        }
        let any = |s| self.children.iter().any(|(_, c)| c.state() == s);
        self.state = if !self.ready.is_empty() {
            ConnectivityState::Ready
        } else if any(ConnectivityState::Connecting) {
            ConnectivityState::Connecting
        } else if any(ConnectivityState::Idle) {
            ConnectivityState::Idle
        } else {
            ConnectivityState::TransientFailure
        };
    }

    pub(super) fn pick(&mut self, ctx: &mut Ctx, hash: Option<u64>, rng: &mut PickRng) -> Picked {
        let Some(&(total, _)) = self.ready.last() else {
            // Nothing READY: an IDLE locality (pick_first after a disconnect) is woken.
            if self.state == ConnectivityState::Idle {
                for (_, child) in &mut self.children {
                    child.pick(ctx, hash, rng);
                }
            }
            return Picked::not_ready(self.state);
        };
        let point = rng.below(total);
        let at = self
            .ready
            .partition_point(|(cumulative, _)| *cumulative <= point);
        let child = self.ready[at].1 as usize;
        self.children[child].1.pick(ctx, hash, rng)
    }
}
