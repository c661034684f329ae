//! Priority failover, gRPC's `priority` policy: children in priority order (a cluster's
//! EDS priorities, or an aggregate cluster's leaf clusters, A37/A75), started lazily.
//! The highest child that is READY or IDLE is used, or one still CONNECTING within its
//! failover timeout (10 s); a child in TRANSIENT_FAILURE, or whose timeout passed,
//! hands over to the next, which is started then. The timeout starts when a child is
//! started and again when it falls from READY or IDLE back to CONNECTING.
//!
//! The owner keeps the children; this type only decides, from their reported states.

use std::time::Duration;

use super::api::ConnectivityState;
use crate::time::Instant;

#[derive(Clone, Copy, Debug)]
struct ChildStatus {
    started: bool,
    state: ConnectivityState,
    /// While the child may keep connecting before the next priority is tried.
    failover_at: Option<Instant>,
    seen_ready_or_idle: bool,
}

/// The failover state of one set of prioritized children.
#[derive(Debug)]
pub(super) struct Failover {
    children: Vec<ChildStatus>,
    timeout: Duration,
    current: Option<usize>,
}

impl Failover {
    pub(super) fn new(count: usize, timeout: Duration) -> Failover {
        Failover {
            children: vec![
                ChildStatus {
                    started: false,
                    state: ConnectivityState::Idle,
                    failover_at: None,
                    seen_ready_or_idle: false,
                };
                count
            ],
            timeout,
            current: None,
        }
    }

    /// The child in use.
    pub(super) fn current(&self) -> Option<usize> {
        self.current
    }

    pub(super) fn is_started(&self, child: usize) -> bool {
        self.children.get(child).is_some_and(|c| c.started)
    }

    /// Records that the owner started `child`, in `state`.
    pub(super) fn started(&mut self, now: Instant, child: usize, state: ConnectivityState) {
        let c = &mut self.children[child];
        c.started = true;
        c.state = ConnectivityState::Connecting;
        c.failover_at = Some(now + self.timeout);
        c.seen_ready_or_idle = false;
        self.child_state(now, child, state);
    }

    /// Records that the owner stopped `child`.
    pub(super) fn stopped(&mut self, child: usize) {
        let c = &mut self.children[child];
        c.started = false;
        c.failover_at = None;
    }

    /// A started child reports its state. A child in TRANSIENT_FAILURE stays there
    /// while it reconnects (CONNECTING), as in gRPC: only READY or IDLE bring it back.
    pub(super) fn child_state(&mut self, now: Instant, child: usize, state: ConnectivityState) {
        let c = &mut self.children[child];
        match state {
            ConnectivityState::Ready | ConnectivityState::Idle => {
                c.seen_ready_or_idle = true;
                c.failover_at = None;
            }
            ConnectivityState::TransientFailure => {
                c.seen_ready_or_idle = false;
                c.failover_at = None;
            }
            ConnectivityState::Connecting => {
                if c.state == ConnectivityState::TransientFailure {
                    return;
                }
                if c.seen_ready_or_idle && c.state != ConnectivityState::Connecting {
                    c.failover_at = Some(now + self.timeout);
                    c.seen_ready_or_idle = false;
                }
            }
        }
        c.state = state;
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.children.iter().filter_map(|c| c.failover_at).min()
    }

    /// Fires the timeouts due at `now`; true if one fired.
    pub(super) fn handle_timeout(&mut self, now: Instant) -> bool {
        let mut fired = false;
        for c in &mut self.children {
            if c.failover_at.is_some_and(|at| at <= now) {
                c.failover_at = None;
                fired = true;
            }
        }
        fired
    }

    /// Chooses the child to use. Returns the child to start first, if the choice falls
    /// on one not started yet (the owner starts it and calls
    /// [`started`](Self::started), then chooses again).
    pub(super) fn choose(&mut self) -> Choice {
        for (i, c) in self.children.iter().enumerate() {
            if !c.started {
                return Choice::Start(i);
            }
            // READY or IDLE, or still within its failover timeout.
            let usable = matches!(c.state, ConnectivityState::Ready | ConnectivityState::Idle)
                || c.failover_at.is_some();
            if usable {
                self.current = Some(i);
                return Choice::Use(i);
            }
        }
        // Every child failed: use the first one still connecting, else the last.
        let fallback = self
            .children
            .iter()
            .position(|c| c.state == ConnectivityState::Connecting)
            .or(self.children.len().checked_sub(1));
        self.current = fallback;
        match fallback {
            Some(i) => Choice::Use(i),
            None => Choice::None,
        }
    }

    /// The state of the whole: the current child's, or TRANSIENT_FAILURE without one.
    pub(super) fn state(&self) -> ConnectivityState {
        self.current
            .map_or(ConnectivityState::TransientFailure, |i| {
                self.children[i].state
            })
    }
}

/// What [`Failover::choose`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Choice {
    /// Start this child, report it, and choose again.
    Start(usize),
    /// Use this child; children after it may be stopped.
    Use(usize),
    /// There are no children.
    None,
}
