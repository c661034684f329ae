//! `weighted_round_robin` (A58): every endpoint connected, as `round_robin`; picks go
//! to the READY endpoints in proportion to their weights (the cluster's
//! [`EndpointWeights`](super::wrr_weights::EndpointWeights), from ORCA reports)
//! through a static stride scheduler (as gRPC C-core and gRPC-Go, rather than the
//! earliest-deadline-first scheduler of A58's text). The scheduler is rebuilt, from the
//! weights at that moment, whenever the READY set changes and every weight update
//! period (the cluster's timer); a pick only runs it.

use super::api::{ConnectivityState, SubchannelId};
use super::endpoint_list::EndpointList;
use super::policy::{Ctx, EndpointSpec, Picked};
use super::wrr_scheduler::StrideScheduler;

#[derive(Debug)]
pub(super) struct WeightedRoundRobin {
    endpoints: EndpointList,
    scheduler: StrideScheduler,
    /// The READY endpoints' weights, kept to rebuild the scheduler without allocating.
    weights: Vec<f64>,
}

impl WeightedRoundRobin {
    pub(super) fn new(ctx: &mut Ctx, specs: &[EndpointSpec]) -> WeightedRoundRobin {
        let mut policy = WeightedRoundRobin {
            endpoints: EndpointList::new(ctx, specs),
            scheduler: StrideScheduler::default(),
            weights: Vec::with_capacity(specs.len()),
        };
        policy.refresh_weights(ctx);
        policy
    }

    pub(super) fn state(&self) -> ConnectivityState {
        self.endpoints.state()
    }

    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        self.endpoints.on_state(ctx, id);
        self.refresh_weights(ctx);
    }

    /// Rebuilds the scheduler over the READY endpoints with their current weights.
    pub(super) fn refresh_weights(&mut self, ctx: &mut Ctx) {
        self.weights.clear();
        for id in self.endpoints.ready() {
            let weight = ctx.weight(*id);
            self.weights.push(weight);
        }
        self.scheduler.rebuild(&self.weights, || ctx.random());
    }

    pub(super) fn pick(&mut self) -> Picked {
        let ready = self.endpoints.ready();
        match self.scheduler.pick() {
            Some(i) if ready.len() == self.scheduler.len() => Picked::Subchannel(ready[i]),
            _ => Picked::not_ready(self.state()),
        }
    }
}
