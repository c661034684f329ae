//! `round_robin`: every endpoint connected, picks cycling over the READY ones from a
//! random starting position (as gRPC, so that many clients do not start in step).

use super::api::ConnectivityState;
use super::endpoint_list::EndpointList;
use super::policy::{Ctx, EndpointSpec, Picked};

#[derive(Debug)]
pub(super) struct RoundRobin {
    endpoints: EndpointList,
    next: usize,
}

impl RoundRobin {
    pub(super) fn new(ctx: &mut Ctx, specs: &[EndpointSpec]) -> RoundRobin {
        let next = (ctx.random() % (specs.len().max(1) as u64)) as usize;
        RoundRobin {
            endpoints: EndpointList::new(ctx, specs),
            next,
        }
    }

    pub(super) fn state(&self) -> ConnectivityState {
        self.endpoints.state()
    }

    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: super::SubchannelId) {
        self.endpoints.on_state(ctx, id);
    }

    pub(super) fn pick(&mut self) -> Picked {
        let ready = self.endpoints.ready();
        if ready.is_empty() {
            return Picked::not_ready(self.state());
        }
        if self.next >= ready.len() {
            self.next = 0;
        }
        let id = ready[self.next];
        self.next += 1;
        Picked::Subchannel(id)
    }
}
