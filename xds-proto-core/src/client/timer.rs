//! Every deadline of the client: the reconnect backoff of each server, and the
//! does-not-exist timer of each resource on each server that serves it.
//!
//! The few reconnect timers sit in an ordered set. The does-not-exist timers, armed
//! by the ten thousand for one subscribing request and stopped by the ten thousand
//! when its response arrives, sit in one queue per server: every timer of a server
//! runs for the same timeout, so arming order is deadline order, arming is a push,
//! and a timer is stopped through the ticket its resource entry keeps ([`ArmedTimers`])
//! without a name lookup or a search. Timers due at the same instant fire in key
//! order: reconnects by server first, then resources by (server, type, name), which
//! the client sorts before firing them ([`Expired::Resources`]).

use std::collections::{BTreeSet, VecDeque};

use super::TypeIdx;
use super::cache::Slot;
use crate::time::Instant;

/// The arming number of a does-not-exist timer in its server's queue.
pub(super) type Ticket = u64;

/// What [`Timers::pop_expired`] found due.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Expired {
    /// The backoff of a server's next stream attempt ran out.
    Reconnect(usize),
    /// Every does-not-exist timer due at one instant, as (server, type, where the
    /// resource sits, ticket). Firing one may stop another of them (one verdict per
    /// resource), so the client fires each only while its entry still holds the ticket.
    Resources(Vec<(usize, TypeIdx, Slot, Ticket)>),
}

/// The client's deadlines.
#[derive(Debug, Default)]
pub(super) struct Timers {
    reconnects: BTreeSet<(Instant, usize)>,
    /// Each server's armed reconnect deadline, by server index.
    reconnect_at: Vec<Option<Instant>>,
    /// Each server's does-not-exist timers, by server index.
    resources: Vec<ResourceQueue>,
}

impl Timers {
    /// Arms `server`'s reconnect for `at`, replacing its earlier deadline.
    pub(super) fn set_reconnect(&mut self, server: usize, at: Instant) {
        self.cancel_reconnect(server);
        if self.reconnect_at.len() <= server {
            self.reconnect_at.resize(server + 1, None);
        }
        self.reconnect_at[server] = Some(at);
        self.reconnects.insert((at, server));
    }

    pub(super) fn cancel_reconnect(&mut self, server: usize) {
        if let Some(at) = self.reconnect_at.get_mut(server).and_then(Option::take) {
            self.reconnects.remove(&(at, server));
        }
    }

    pub(super) fn reconnect_armed(&self, server: usize) -> bool {
        self.reconnect_at.get(server).is_some_and(Option::is_some)
    }

    /// Arms a does-not-exist timer of `server` for `at`; the ticket stops it.
    pub(super) fn arm_resource(
        &mut self,
        server: usize,
        at: Instant,
        t: TypeIdx,
        slot: Slot,
    ) -> Ticket {
        if self.resources.len() <= server {
            self.resources
                .resize_with(server + 1, ResourceQueue::default);
        }
        self.resources[server].arm(at, t, slot)
    }

    /// Stops a does-not-exist timer (one already fired or stopped is ignored).
    pub(super) fn cancel_resource(&mut self, server: usize, ticket: Ticket) {
        if let Some(queue) = self.resources.get_mut(server) {
            queue.cancel(ticket);
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let reconnect = self.reconnects.first().map(|(at, _)| *at);
        let resources = self
            .resources
            .iter()
            .filter_map(ResourceQueue::next_deadline);
        reconnect.into_iter().chain(resources).min()
    }

    /// Disarms and returns what is due at `now`, earliest first: at one instant, the
    /// reconnects (one at a time, by server) before the resources (all together).
    pub(super) fn pop_expired(&mut self, now: Instant) -> Option<Expired> {
        let at = self.next_deadline().filter(|at| *at <= now)?;
        if let Some(&(first, server)) = self.reconnects.first()
            && first == at
        {
            self.reconnects.pop_first();
            self.reconnect_at[server] = None;
            return Some(Expired::Reconnect(server));
        }
        let mut due = Vec::new();
        for (server, queue) in self.resources.iter_mut().enumerate() {
            queue.pop_due(at, |t, slot, ticket| due.push((server, t, slot, ticket)));
        }
        Some(Expired::Resources(due))
    }
}

/// One armed does-not-exist timer.
#[derive(Debug)]
struct Armed {
    ticket: Ticket,
    at: Instant,
    t: TypeIdx,
    slot: Slot,
    /// False once stopped: it stays in place until it reaches the front or the queue
    /// is compacted.
    live: bool,
}

/// One server's does-not-exist timers in arming (and so deadline) order. The front is
/// always live; stopped timers behind it are dropped once they outnumber the live
/// ones, so the queue holds at most about twice what is armed.
#[derive(Debug, Default)]
struct ResourceQueue {
    items: VecDeque<Armed>,
    next_ticket: Ticket,
    live: usize,
}

/// Below this many entries, stopped timers are left for the front to drop.
const COMPACT_FROM: usize = 1024;

/// An empty queue keeps up to this much room for the next timers.
const SHRINK_ABOVE: usize = 256;

impl ResourceQueue {
    fn arm(&mut self, at: Instant, t: TypeIdx, slot: Slot) -> Ticket {
        // One timeout per server keeps arming order deadline order; a clock that ran
        // backwards must not break it, so such a timer runs to the last deadline.
        let at = self.items.back().map_or(at, |last| at.max(last.at));
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.items.push_back(Armed {
            ticket,
            at,
            t,
            slot,
            live: true,
        });
        self.live += 1;
        ticket
    }

    fn cancel(&mut self, ticket: Ticket) {
        let Some(i) = self.position(ticket) else {
            return;
        };
        if !std::mem::replace(&mut self.items[i].live, false) {
            return;
        }
        self.live -= 1;
        self.drop_stopped_front();
        if self.items.len() >= COMPACT_FROM && self.items.len() > 2 * self.live {
            self.items.retain(|a| a.live);
        }
    }

    /// Where the timer of `ticket` sits: tickets rise along the queue, and until a
    /// compaction each sits at its distance from the front's.
    fn position(&self, ticket: Ticket) -> Option<usize> {
        let first = self.items.front()?.ticket;
        let guess = usize::try_from(ticket.checked_sub(first)?).ok()?;
        if self.items.get(guess).is_some_and(|a| a.ticket == ticket) {
            return Some(guess);
        }
        self.items.binary_search_by_key(&ticket, |a| a.ticket).ok()
    }

    fn drop_stopped_front(&mut self) {
        while self.items.front().is_some_and(|a| !a.live) {
            self.items.pop_front();
        }
        // Every timer of a large subscription stopped or fired: give the room back
        // (kept, 10,000 timers would hold 400 KB for good).
        if self.items.is_empty() && self.items.capacity() > SHRINK_ABOVE {
            self.items = VecDeque::new();
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.items.front().map(|a| a.at)
    }

    /// Takes out every live timer due at `at`, the earliest deadline queued.
    fn pop_due(&mut self, at: Instant, mut take: impl FnMut(TypeIdx, Slot, Ticket)) {
        while let Some(front) = self.items.front()
            && front.at <= at
        {
            if front.live {
                take(front.t, front.slot, front.ticket);
                self.live -= 1;
            }
            self.items.pop_front();
        }
        self.drop_stopped_front();
    }
}

/// The does-not-exist timers armed for one resource: the ticket of each server's.
/// The first sits inline (a resource is served by one server unless its authority is
/// falling back), so arming one allocates nothing; the others sit behind one pointer,
/// as every watched resource has an `ArmedTimers`.
#[derive(Debug, Default)]
pub(super) struct ArmedTimers {
    first: Option<(usize, Ticket)>,
    #[expect(
        clippy::box_collection,
        reason = "one pointer inline, not a Vec's three words, in every watched resource"
    )]
    more: Option<Box<Vec<(usize, Ticket)>>>,
}

impl ArmedTimers {
    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub(super) fn ticket(&self, server: usize) -> Option<Ticket> {
        self.first
            .iter()
            .chain(self.more.iter().flat_map(|more| more.iter()))
            .find(|(s, _)| *s == server)
            .map(|(_, ticket)| *ticket)
    }

    /// Records `server`'s timer (the caller has checked it has none).
    pub(super) fn insert(&mut self, server: usize, ticket: Ticket) {
        match self.first {
            None => self.first = Some((server, ticket)),
            Some(_) => self.more.get_or_insert_default().push((server, ticket)),
        }
    }

    /// Forgets `server`'s timer; returns its ticket.
    pub(super) fn take(&mut self, server: usize) -> Option<Ticket> {
        if let Some((s, ticket)) = self.first
            && s == server
        {
            self.first = self.more.as_mut().and_then(|more| more.pop());
            return Some(ticket);
        }
        let more = self.more.as_mut()?;
        let i = more.iter().position(|(s, _)| *s == server)?;
        Some(more.swap_remove(i).1)
    }

    /// Forgets every timer; returns them as (server, ticket).
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = (usize, Ticket)> + use<> {
        let first = self.first.take();
        first
            .into_iter()
            .chain(self.more.take().into_iter().flat_map(|more| *more))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(i: u32) -> Slot {
        Slot::for_test(i)
    }

    #[test]
    fn reconnects_replace_their_deadline_and_fire_by_server_at_one_instant() {
        let mut t = Timers::default();
        t.set_reconnect(1, Instant::from_secs(5));
        t.set_reconnect(2, Instant::from_secs(3));
        t.set_reconnect(1, Instant::from_secs(3));
        t.set_reconnect(0, Instant::from_secs(4));
        assert_eq!(t.next_deadline(), Some(Instant::from_secs(3)));
        let now = Instant::from_secs(3);
        assert_eq!(t.pop_expired(now), Some(Expired::Reconnect(1)));
        assert_eq!(t.pop_expired(now), Some(Expired::Reconnect(2)));
        assert_eq!(t.pop_expired(now), None);
        assert!(t.reconnect_armed(0) && !t.reconnect_armed(1));
        t.cancel_reconnect(0);
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn a_reconnect_fires_before_the_resources_due_at_its_instant() {
        let mut t = Timers::default();
        let first = t.arm_resource(1, Instant::from_secs(15), 0, slot(7));
        let second = t.arm_resource(0, Instant::from_secs(15), 2, slot(3));
        t.set_reconnect(4, Instant::from_secs(15));
        let now = Instant::from_secs(20);
        assert_eq!(t.pop_expired(now), Some(Expired::Reconnect(4)));
        assert_eq!(
            t.pop_expired(now),
            Some(Expired::Resources(vec![
                (0, 2, slot(3), second),
                (1, 0, slot(7), first)
            ]))
        );
        assert_eq!(t.pop_expired(now), None);
    }

    #[test]
    fn armed_timers_keep_one_ticket_per_server() {
        let mut armed = ArmedTimers::default();
        assert!(armed.is_empty());
        armed.insert(3, 30);
        armed.insert(5, 50);
        armed.insert(1, 10);
        assert_eq!(armed.ticket(5), Some(50));
        assert_eq!(armed.take(3), Some(30));
        assert_eq!(armed.take(3), None);
        assert!(!armed.is_empty());
        assert_eq!((armed.ticket(1), armed.ticket(5)), (Some(10), Some(50)));
        let mut all: Vec<_> = armed.take_all().collect();
        all.sort();
        assert_eq!(all, [(1, 10), (5, 50)]);
        assert!(armed.is_empty() && armed.ticket(1).is_none());
    }

    #[test]
    fn stopped_timers_do_not_pile_up() {
        let mut t = Timers::default();
        let tickets: Vec<_> = (0..10_000)
            .map(|i| t.arm_resource(0, Instant::from_secs(15), 0, slot(i)))
            .collect();
        // The first stays armed; every other one is stopped, from the back.
        for ticket in tickets[1..].iter().rev() {
            t.cancel_resource(0, *ticket);
        }
        let queue = &t.resources[0];
        assert_eq!(queue.live, 1);
        assert!(
            queue.items.len() < COMPACT_FROM,
            "{} entries",
            queue.items.len()
        );
        // A compacted queue still finds its tickets.
        let late = t.arm_resource(0, Instant::from_secs(16), 0, slot(1));
        t.cancel_resource(0, tickets[0]);
        assert_eq!(t.next_deadline(), Some(Instant::from_secs(16)));
        t.cancel_resource(0, late);
        assert_eq!(t.next_deadline(), None);
        // Nothing armed: the room 10,000 timers took is given back.
        assert!(t.resources[0].items.capacity() <= SHRINK_ABOVE);
    }

    /// One step of the property below.
    #[derive(Clone, Debug)]
    enum Op {
        /// Arm a resource timer of server (0..3) for (the last instant + 0..3 s).
        Arm(u8, u8),
        /// Stop the n-th timer armed (if it still runs).
        Stop(u8),
        /// Arm (or re-arm) a server's reconnect for 0..8 s.
        Reconnect(u8, u8),
        CancelReconnect(u8),
        /// Fire what is due at 0..40 s.
        Fire(u8),
    }

    impl quickcheck::Arbitrary for Op {
        fn arbitrary(g: &mut quickcheck::Gen) -> Op {
            let (a, b) = (u8::arbitrary(g), u8::arbitrary(g));
            match u8::arbitrary(g) % 8 {
                0..3 => Op::Arm(a % 3, b % 3),
                3 | 4 => Op::Stop(a),
                5 => Op::Reconnect(a % 3, b % 8),
                6 => Op::CancelReconnect(a % 3),
                _ => Op::Fire(a % 40),
            }
        }
    }

    /// What is armed, in the simplest correct form: an ordered set of (deadline,
    /// kind, server, ticket), where kind 0 is a reconnect and 1 a resource timer.
    type Model = std::collections::BTreeSet<(Instant, u8, usize, u64)>;

    quickcheck::quickcheck! {
        /// The timers behave as one ordered set: the same deadline is reported next,
        /// reconnects fire one at a time, and each instant's resource timers come out
        /// together, none stopped, none lost. Per server, arming instants only rise,
        /// as a monotonic clock and one timeout per server make them.
        fn behaves_as_an_ordered_set_of_deadlines(ops: Vec<Op>) -> bool {
            let mut timers = Timers::default();
            let mut model = Model::new();
            let mut armed: Vec<(usize, Ticket, Instant)> = Vec::new();
            let mut last_at = [0u64; 3];
            for op in ops {
                match op {
                    Op::Arm(server, step) => {
                        let s = usize::from(server);
                        last_at[s] += u64::from(step);
                        let at = Instant::from_secs(last_at[s]);
                        let ticket = timers.arm_resource(s, at, 0, slot(armed.len() as u32));
                        model.insert((at, 1, s, ticket));
                        armed.push((s, ticket, at));
                    }
                    Op::Stop(n) => {
                        if let Some(&(s, ticket, at)) = armed.get(usize::from(n)) {
                            model.remove(&(at, 1, s, ticket));
                            timers.cancel_resource(s, ticket);
                        }
                    }
                    Op::Reconnect(server, secs) => {
                        let s = usize::from(server);
                        model.retain(|&(_, kind, m, _)| !(kind == 0 && m == s));
                        model.insert((Instant::from_secs(secs.into()), 0, s, 0));
                        timers.set_reconnect(s, Instant::from_secs(secs.into()));
                    }
                    Op::CancelReconnect(server) => {
                        let s = usize::from(server);
                        model.retain(|&(_, kind, m, _)| !(kind == 0 && m == s));
                        timers.cancel_reconnect(s);
                    }
                    Op::Fire(secs) => {
                        let now = Instant::from_secs(secs.into());
                        while let Some(expired) = timers.pop_expired(now) {
                            let Some(&(at, kind, s, _)) = model.first() else {
                                return false;
                            };
                            let expected = if kind == 0 {
                                model.pop_first();
                                Expired::Reconnect(s)
                            } else {
                                let due: Vec<_> = model.iter().filter(|e| e.0 == at).copied().collect();
                                due.iter().for_each(|e| { model.remove(e); });
                                let mut due: Vec<_> = due.into_iter().map(|(_, _, s, ticket)| {
                                    let n = armed.iter().position(|a| a.0 == s && a.1 == ticket).unwrap();
                                    (s, 0, slot(n as u32), ticket)
                                }).collect();
                                due.sort_by_key(|d| (d.0, d.3));
                                Expired::Resources(due)
                            };
                            if at > now || expired != expected {
                                return false;
                            }
                        }
                        if model.first().is_some_and(|e| e.0 <= now) {
                            return false;
                        }
                    }
                }
                if timers.next_deadline() != model.first().map(|e| e.0) {
                    return false;
                }
            }
            true
        }
    }
}
