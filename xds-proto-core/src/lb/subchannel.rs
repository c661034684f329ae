//! The subchannel pool: one subchannel per address, shared by every cluster that names
//! the address. It owns each subchannel's reported state, its reconnect backoff (gRPC's
//! subchannel backoff: after TRANSIENT_FAILURE the subchannel waits, then goes IDLE and
//! may be asked to connect again), its connection attempt delay (A61's Happy Eyeballs:
//! 250 ms after an attempt started, `pick_first` may start the next address beside
//! it), its count of calls in flight (least request), its reference count, how many
//! started priorities use it (one none has used for 15 minutes has its connection
//! closed, as gRPC's priority policy drops a child kept that long), and the actions
//! queued for the embedder.

use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;

use rand_xoshiro::Xoshiro256PlusPlus;

use super::api::{ConnectivityState, LbAction, SubchannelId};
use crate::DetHashMap;
use crate::backoff::{Backoff, BackoffConfig};
use crate::time::Instant;

/// How long a connection attempt runs before `pick_first` also tries the next address
/// (gRPC's connection attempt delay for Happy Eyeballs, A61).
pub(super) const CONNECTION_ATTEMPT_DELAY: std::time::Duration =
    std::time::Duration::from_millis(250);

/// How long a subchannel no started priority uses keeps its connection (gRPC's
/// priority policy keeps a child it stopped using for as long).
pub(super) const CHILD_RETENTION: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// One kind of per-subchannel deadline, ordered for the earliest; each slot keeps its
/// own (`Slot::retry_at` and the like) so that it can be disarmed without a search.
#[derive(Debug, Default)]
struct Deadlines(BTreeSet<(Instant, SubchannelId)>);

impl Deadlines {
    /// Arms `id`'s deadline (kept in `armed`) for `at`, replacing an earlier one.
    fn arm(&mut self, armed: &mut Option<Instant>, id: SubchannelId, at: Instant) {
        self.disarm(armed, id);
        *armed = Some(at);
        self.0.insert((at, id));
    }

    fn disarm(&mut self, armed: &mut Option<Instant>, id: SubchannelId) {
        if let Some(at) = armed.take() {
            self.0.remove(&(at, id));
        }
    }

    fn next(&self) -> Option<Instant> {
        self.0.first().map(|(at, _)| *at)
    }

    /// Takes the earliest deadline due at `now`; its slot's copy is the caller's to
    /// clear.
    fn pop_due(&mut self, now: Instant) -> Option<SubchannelId> {
        let &(at, id) = self.0.first()?;
        (at <= now).then(|| {
            self.0.pop_first();
            id
        })
    }
}

/// The live slot of `id`, if it is still the subchannel `id` names.
fn live_slot(slots: &mut [Slot], id: SubchannelId) -> Option<&mut Slot> {
    slots
        .get_mut(id.index())
        .filter(|s| s.live && s.generation == id.generation())
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    live: bool,
    address: SocketAddr,
    /// Clusters holding the subchannel.
    refs: u32,
    state: ConnectivityState,
    /// A `Connect` was emitted and no state has been reported since.
    connect_pending: bool,
    backoff: Backoff,
    /// While in TRANSIENT_FAILURE: when the backoff ends and the subchannel goes IDLE.
    retry_at: Option<Instant>,
    /// While CONNECTING: when the attempt has run for [`CONNECTION_ATTEMPT_DELAY`].
    attempt_delay_at: Option<Instant>,
    /// The current attempt has run that long.
    attempt_delayed: bool,
    /// Started priorities (of any cluster) using the subchannel.
    active: u32,
    /// While no started priority uses it: when its connection closes.
    idle_at: Option<Instant>,
    in_flight: u32,
}

/// Every subchannel of one load balancer.
#[derive(Debug)]
pub(super) struct SubchannelPool {
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_address: DetHashMap<SocketAddr, SubchannelId>,
    retries: Deadlines,
    attempt_delays: Deadlines,
    idle_timers: Deadlines,
    backoff: BackoffConfig,
    pub(super) rng: Xoshiro256PlusPlus,
    pub(super) actions: VecDeque<LbAction>,
}

impl SubchannelPool {
    pub(super) fn new(backoff: BackoffConfig, rng: Xoshiro256PlusPlus) -> SubchannelPool {
        SubchannelPool {
            slots: Vec::new(),
            free: Vec::new(),
            by_address: DetHashMap::default(),
            retries: Deadlines::default(),
            attempt_delays: Deadlines::default(),
            idle_timers: Deadlines::default(),
            backoff,
            rng,
            actions: VecDeque::new(),
        }
    }

    fn slot(&self, id: SubchannelId) -> Option<&Slot> {
        self.slots
            .get(id.index())
            .filter(|s| s.live && s.generation == id.generation())
    }

    fn slot_mut(&mut self, id: SubchannelId) -> Option<&mut Slot> {
        live_slot(&mut self.slots, id)
    }

    /// Takes a reference on the subchannel of `address`, creating it (IDLE) if needed.
    pub(super) fn acquire(&mut self, address: SocketAddr) -> SubchannelId {
        if let Some(id) = self.by_address.get(&address) {
            let id = *id;
            if let Some(slot) = self.slot_mut(id) {
                slot.refs += 1;
            }
            return id;
        }
        let slot = |generation| Slot {
            generation,
            live: true,
            address,
            refs: 1,
            state: ConnectivityState::Idle,
            connect_pending: false,
            backoff: Backoff::new(self.backoff),
            retry_at: None,
            attempt_delay_at: None,
            attempt_delayed: false,
            active: 0,
            idle_at: None,
            in_flight: 0,
        };
        let id = match self.free.pop() {
            Some(index) => {
                let s = &mut self.slots[index as usize];
                let generation = s.generation.wrapping_add(1);
                *s = slot(generation);
                SubchannelId::new(index, generation)
            }
            None => {
                let index = u32::try_from(self.slots.len()).expect("fewer than 2^32 subchannels");
                self.slots.push(slot(0));
                SubchannelId::new(index, 0)
            }
        };
        self.by_address.insert(address, id);
        id
    }

    /// The subchannel of `address`, if there is one (no reference taken).
    pub(super) fn find(&self, address: SocketAddr) -> Option<SubchannelId> {
        self.by_address.get(&address).copied()
    }

    /// Drops a reference; the last one disconnects and forgets the subchannel.
    pub(super) fn release(&mut self, id: SubchannelId) {
        let Some(slot) = live_slot(&mut self.slots, id) else {
            return;
        };
        slot.refs -= 1;
        if slot.refs > 0 {
            return;
        }
        slot.live = false;
        self.retries.disarm(&mut slot.retry_at, id);
        self.attempt_delays.disarm(&mut slot.attempt_delay_at, id);
        self.idle_timers.disarm(&mut slot.idle_at, id);
        self.by_address.remove(&slot.address);
        self.free.push(id.index() as u32);
        self.actions
            .push_back(LbAction::Disconnect { subchannel: id });
    }

    pub(super) fn state(&self, id: SubchannelId) -> ConnectivityState {
        self.slot(id)
            .map_or(ConnectivityState::TransientFailure, |s| s.state)
    }

    pub(super) fn address(&self, id: SubchannelId) -> Option<SocketAddr> {
        self.slot(id).map(|s| s.address)
    }

    /// Asks the embedder for a connection attempt, if the subchannel is IDLE and none is
    /// pending.
    pub(super) fn connect(&mut self, id: SubchannelId) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        if slot.state != ConnectivityState::Idle || slot.connect_pending {
            return;
        }
        slot.connect_pending = true;
        let address = slot.address;
        self.actions.push_back(LbAction::Connect {
            subchannel: id,
            address,
        });
    }

    /// Records a reported state. Returns the state the clusters must see, when it
    /// changed. During the reconnect backoff the subchannel stays in
    /// TRANSIENT_FAILURE whatever is reported, as gRPC's subchannels do.
    pub(super) fn set_state(
        &mut self,
        now: Instant,
        id: SubchannelId,
        state: ConnectivityState,
    ) -> Option<ConnectivityState> {
        let slot = self.slots.get_mut(id.index())?;
        if !slot.live || slot.generation != id.generation() || slot.state == state {
            return None;
        }
        if slot.retry_at.is_some() && state != ConnectivityState::Ready {
            return None;
        }
        slot.connect_pending = false;
        slot.attempt_delayed = false;
        self.attempt_delays.disarm(&mut slot.attempt_delay_at, id);
        match state {
            ConnectivityState::Ready => {
                slot.backoff.reset();
                self.retries.disarm(&mut slot.retry_at, id);
            }
            ConnectivityState::TransientFailure => {
                let at = now + slot.backoff.next_delay(&mut self.rng);
                self.retries.arm(&mut slot.retry_at, id, at);
            }
            ConnectivityState::Connecting => {
                let at = now + CONNECTION_ATTEMPT_DELAY;
                self.attempt_delays.arm(&mut slot.attempt_delay_at, id, at);
            }
            ConnectivityState::Idle => {}
        }
        slot.state = state;
        Some(state)
    }

    /// The earliest backoff end, connection attempt delay or retention end.
    pub(super) fn next_timer(&self) -> Option<Instant> {
        let deadlines = [&self.retries, &self.attempt_delays, &self.idle_timers];
        deadlines.into_iter().filter_map(Deadlines::next).min()
    }

    /// A started priority uses the subchannel: it keeps its connection.
    pub(super) fn activate(&mut self, id: SubchannelId) {
        let Some(slot) = live_slot(&mut self.slots, id) else {
            return;
        };
        slot.active += 1;
        self.idle_timers.disarm(&mut slot.idle_at, id);
    }

    /// A started priority stopped using the subchannel: when none has used it for
    /// [`CHILD_RETENTION`], its connection closes.
    pub(super) fn deactivate(&mut self, now: Instant, id: SubchannelId) {
        let Some(slot) = live_slot(&mut self.slots, id) else {
            return;
        };
        slot.active = slot.active.saturating_sub(1);
        if slot.active == 0 && slot.idle_at.is_none() {
            self.idle_timers
                .arm(&mut slot.idle_at, id, now + CHILD_RETENTION);
        }
    }

    /// Ends the earliest retention due at `now`: a subchannel still connected (or
    /// connecting) that no started priority uses goes IDLE, its connection closed
    /// (`LbAction::Idle`). Returns it, or `None` when none is due.
    pub(super) fn pop_idle(&mut self, now: Instant) -> Option<Option<SubchannelId>> {
        let id = self.idle_timers.pop_due(now)?;
        let slot = &mut self.slots[id.index()];
        slot.idle_at = None;
        if slot.active > 0
            || !matches!(
                slot.state,
                ConnectivityState::Ready | ConnectivityState::Connecting
            )
        {
            return Some(None);
        }
        slot.state = ConnectivityState::Idle;
        slot.connect_pending = false;
        slot.attempt_delayed = false;
        self.attempt_delays.disarm(&mut slot.attempt_delay_at, id);
        self.actions.push_back(LbAction::Idle { subchannel: id });
        Some(Some(id))
    }

    /// Ends the earliest connection attempt delay due at `now`: the subchannel, still
    /// CONNECTING, has been for [`CONNECTION_ATTEMPT_DELAY`].
    pub(super) fn pop_attempt_delay(&mut self, now: Instant) -> Option<SubchannelId> {
        let id = self.attempt_delays.pop_due(now)?;
        let slot = &mut self.slots[id.index()];
        slot.attempt_delay_at = None;
        slot.attempt_delayed = true;
        Some(id)
    }

    /// Whether the subchannel's current connection attempt has run for
    /// [`CONNECTION_ATTEMPT_DELAY`] without an outcome.
    pub(super) fn attempt_delayed(&self, id: SubchannelId) -> bool {
        self.slot(id).is_some_and(|s| s.attempt_delayed)
    }

    /// Ends the earliest backoff due at `now`: the subchannel goes IDLE.
    pub(super) fn pop_retry(&mut self, now: Instant) -> Option<SubchannelId> {
        let id = self.retries.pop_due(now)?;
        let slot = &mut self.slots[id.index()];
        slot.retry_at = None;
        slot.state = ConnectivityState::Idle;
        Some(id)
    }

    pub(super) fn in_flight(&self, id: SubchannelId) -> u32 {
        self.slots.get(id.index()).map_or(0, |s| s.in_flight)
    }

    /// Counts a call started on the subchannel; its address, or `None` if it is gone.
    pub(super) fn call_started(&mut self, id: SubchannelId) -> Option<SocketAddr> {
        let slot = self.slot_mut(id)?;
        slot.in_flight += 1;
        Some(slot.address)
    }

    pub(super) fn call_finished(&mut self, id: SubchannelId) {
        if let Some(slot) = self.slot_mut(id) {
            slot.in_flight = slot.in_flight.saturating_sub(1);
        }
    }

    #[cfg(test)]
    pub(super) fn live_count(&self) -> usize {
        self.by_address.len()
    }
}
