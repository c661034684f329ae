//! `pick_first` over an ordered address list (gRFCs A61, A62): connect to the addresses
//! in order until one is READY and use it. An address tried next starts when the one
//! before fails, or, as A61's Happy Eyeballs does, once that attempt has run for the
//! connection attempt delay (250 ms) without an outcome, beside it: the first READY
//! wins. After a full pass of failures report TRANSIENT_FAILURE and keep it (sticky)
//! while reconnecting every address as its backoff ends; when the chosen connection
//! closes, go IDLE until asked to connect.
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
    /// The last address started during a pass (the earlier ones may still be
    /// connecting); the address count once every one has been started.
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
    /// one is connected and becomes the attempt, as does the first CONNECTING one whose
    /// attempt has not yet run for the connection attempt delay. Past the end the pass
    /// waits for the attempts still connecting, or failed if none is.
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
                ConnectivityState::Connecting if !ctx.attempt_delayed(id) => {
                    self.attempt = Some(i);
                    return;
                }
                ConnectivityState::Connecting | ConnectivityState::TransientFailure => {}
            }
        }
        self.attempt = Some(self.addresses.len());
        self.fail_pass_if_done(ctx);
    }

    /// Every address has been started: unless one is still connecting, the pass
    /// failed. Sticky TRANSIENT_FAILURE, reconnecting each address as its backoff ends
    /// (see `on_state`).
    fn fail_pass_if_done(&mut self, ctx: &mut Ctx) {
        let connecting = |a: &SubchannelId| ctx.state(*a) == ConnectivityState::Connecting;
        if self.addresses.iter().any(connecting) {
            return;
        }
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
        if state == ConnectivityState::Ready {
            return self.select(i);
        }
        let Some(attempt) = self.attempt else {
            if state == ConnectivityState::Idle && self.state == ConnectivityState::TransientFailure
            {
                ctx.connect(id);
            }
            return;
        };
        match state {
            // The latest attempt failed, or its connection closed before it was READY.
            ConnectivityState::TransientFailure | ConnectivityState::Idle if i == attempt => {
                self.try_from(ctx, i + 1)
            }
            // An earlier attempt failed after every address was started: the pass may
            // be over.
            ConnectivityState::TransientFailure | ConnectivityState::Idle
                if attempt == self.addresses.len() =>
            {
                self.fail_pass_if_done(ctx)
            }
            // The latest attempt has run for the connection attempt delay: start the
            // next address beside it (Happy Eyeballs).
            ConnectivityState::Connecting if i == attempt && ctx.attempt_delayed(id) => {
                self.try_from(ctx, i + 1)
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
