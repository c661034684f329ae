//! `pick_first` over an ordered address list (gRFCs A61, A62): connect to the addresses
//! one at a time until one is READY and use it; after a full pass of failures report
//! TRANSIENT_FAILURE and keep it (sticky) while reconnecting every address as its
//! backoff ends; when the chosen connection closes, go IDLE until asked to connect.
//!
//! It is both a policy (over every address of a priority or locality) and, as A61
//! prescribes, the connection manager of each endpoint under the other policies (over
//! that endpoint's addresses).

use super::api::{ConnectivityState, SubchannelId};
use super::policy::{Ctx, Picked};

#[derive(Debug)]
pub(super) struct PickFirst {
    addresses: Vec<SubchannelId>,
    state: ConnectivityState,
    /// The READY address in use.
    selected: Option<usize>,
    /// The address being tried during a pass.
    attempt: Option<usize>,
}

impl PickFirst {
    /// Starts IDLE, or READY at once when one of the addresses is already connected
    /// (a subchannel another cluster shares).
    pub(super) fn new(ctx: &Ctx, addresses: Vec<SubchannelId>) -> PickFirst {
        let selected = addresses
            .iter()
            .position(|a| ctx.state(*a) == ConnectivityState::Ready);
        PickFirst {
            state: if selected.is_some() {
                ConnectivityState::Ready
            } else {
                ConnectivityState::Idle
            },
            addresses,
            selected,
            attempt: None,
        }
    }

    pub(super) fn state(&self) -> ConnectivityState {
        self.state
    }

    /// The subchannel in use, while READY.
    pub(super) fn selected(&self) -> Option<SubchannelId> {
        self.selected.map(|i| self.addresses[i])
    }

    pub(super) fn addresses(&self) -> &[SubchannelId] {
        &self.addresses
    }

    /// Starts a pass over the addresses when IDLE.
    pub(super) fn exit_idle(&mut self, ctx: &mut Ctx) {
        if self.state == ConnectivityState::Idle {
            if self.addresses.is_empty() {
                self.state = ConnectivityState::TransientFailure;
                return;
            }
            self.state = ConnectivityState::Connecting;
            self.try_from(ctx, 0);
        }
    }

    /// Tries addresses from `start` on: the first READY one is selected, the first IDLE
    /// or CONNECTING one becomes the attempt; past the end, the pass failed.
    fn try_from(&mut self, ctx: &mut Ctx, start: usize) {
        for i in start..self.addresses.len() {
            let id = self.addresses[i];
            match ctx.state(id) {
                ConnectivityState::Ready => return self.select(i),
                ConnectivityState::Idle => {
                    ctx.connect(id);
                    self.attempt = Some(i);
                    return;
                }
                ConnectivityState::Connecting => {
                    self.attempt = Some(i);
                    return;
                }
                ConnectivityState::TransientFailure => {}
            }
        }
        // Every address failed: sticky TRANSIENT_FAILURE, reconnecting each address as
        // its backoff ends (see `on_state`).
        self.attempt = None;
        self.state = ConnectivityState::TransientFailure;
        for i in 0..self.addresses.len() {
            ctx.connect(self.addresses[i]);
        }
    }

    fn select(&mut self, i: usize) {
        self.selected = Some(i);
        self.attempt = None;
        self.state = ConnectivityState::Ready;
    }

    /// A subchannel's state changed (ignored unless it is one of ours).
    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        let Some(i) = self.addresses.iter().position(|a| *a == id) else {
            return;
        };
        let state = ctx.state(id);
        if self.selected == Some(i) {
            if state != ConnectivityState::Ready {
                self.selected = None;
                self.state = ConnectivityState::Idle;
            }
            return;
        }
        if self.selected.is_some() {
            return;
        }
        match state {
            ConnectivityState::Ready => self.select(i),
            // A failed attempt, or one whose connection closed before it was READY.
            ConnectivityState::TransientFailure | ConnectivityState::Idle
                if self.attempt == Some(i) =>
            {
                self.try_from(ctx, i + 1)
            }
            ConnectivityState::Idle if self.state == ConnectivityState::TransientFailure => {
                ctx.connect(id)
            }
            _ => {}
        }
    }

    /// The pick of `pick_first` as a policy: IDLE starts connecting and queues.
    pub(super) fn pick(&mut self, ctx: &mut Ctx) -> Picked {
        match self.selected() {
            Some(id) => Picked::Subchannel(id),
            None => {
                self.exit_idle(ctx);
                Picked::not_ready(self.state)
            }
        }
    }
}
