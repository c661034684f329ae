//! `least_request` (gRFC A48): every endpoint connected; a pick samples `choice_count`
//! READY endpoints at random (with replacement) and takes the one with the fewest calls
//! in flight, the first sampled on a tie. Calls in flight are counted per subchannel by
//! the pool, so load sent through other clusters sharing an address counts too.

use super::api::{ConnectivityState, SubchannelId};
use super::endpoint_list::EndpointList;
use super::policy::{Ctx, EndpointSpec, PickRng, Picked};
use super::subchannel::SubchannelPool;

#[derive(Debug)]
pub(super) struct LeastRequest {
    endpoints: EndpointList,
    choice_count: u32,
}

impl LeastRequest {
    pub(super) fn new(ctx: &mut Ctx, specs: &[EndpointSpec], choice_count: u32) -> LeastRequest {
        LeastRequest {
            endpoints: EndpointList::new(ctx, specs),
            choice_count,
        }
    }

    pub(super) fn state(&self) -> ConnectivityState {
        self.endpoints.state()
    }

    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        self.endpoints.on_state(ctx, id);
    }

    pub(super) fn pick(&self, pool: &SubchannelPool, rng: &mut PickRng) -> Picked {
        let ready = self.endpoints.ready();
        if ready.is_empty() {
            return Picked::not_ready(self.state());
        }
        let n = ready.len() as u64;
        let mut best = ready[rng.below(n) as usize];
        let mut best_load = pool.in_flight(best);
        for _ in 1..self.choice_count {
            let candidate = ready[rng.below(n) as usize];
            let load = pool.in_flight(candidate);
            if load < best_load {
                best = candidate;
                best_load = load;
            }
        }
        Picked::Subchannel(best)
    }
}
