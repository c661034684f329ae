//! The endpoints of an eagerly connecting policy (`round_robin`, `least_request`): one
//! `pick_first` per endpoint (A61), every one kept connecting, the list of the READY
//! ones' subchannels for the picker, and the aggregate state gRPC gives such a policy
//! (READY if any endpoint is, else CONNECTING if any is connecting or idle, else
//! TRANSIENT_FAILURE).

use super::api::{ConnectivityState, SubchannelId};
use super::pick_first::PickFirst;
use super::policy::{Ctx, EndpointSpec};

#[derive(Debug)]
pub(super) struct EndpointList {
    endpoints: Vec<PickFirst>,
    /// The subchannels of the READY endpoints, in endpoint order.
    ready: Vec<SubchannelId>,
    state: ConnectivityState,
}

impl EndpointList {
    pub(super) fn new(ctx: &mut Ctx, specs: &[EndpointSpec]) -> EndpointList {
        let mut endpoints: Vec<PickFirst> = specs
            .iter()
            .map(|e| PickFirst::new(ctx, e.subchannels.clone()))
            .collect();
        for endpoint in &mut endpoints {
            endpoint.exit_idle(ctx);
        }
        let mut list = EndpointList {
            endpoints,
            ready: Vec::with_capacity(specs.len()),
            state: ConnectivityState::Connecting,
        };
        list.refresh();
        list
    }

    pub(super) fn state(&self) -> ConnectivityState {
        self.state
    }

    pub(super) fn ready(&self) -> &[SubchannelId] {
        &self.ready
    }

    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        let mut touched = false;
        for endpoint in &mut self.endpoints {
            if endpoint.addresses().contains(&id) {
                endpoint.on_state(ctx, id);
                // An endpoint whose connection closed reconnects at once.
                endpoint.exit_idle(ctx);
                touched = true;
            }
        }
        if touched {
            self.refresh();
        }
    }

    fn refresh(&mut self) {
        self.ready.clear();
        self.ready
            .extend(self.endpoints.iter().filter_map(PickFirst::selected));
        self.state = if !self.ready.is_empty() {
            ConnectivityState::Ready
        } else if self
            .endpoints
            .iter()
            .any(|e| e.state() != ConnectivityState::TransientFailure)
        {
            ConnectivityState::Connecting
        } else {
            ConnectivityState::TransientFailure
        };
    }
}
