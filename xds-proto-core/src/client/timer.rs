//! Every deadline of the client in one table, keyed by purpose: the reconnect backoff
//! of a server and the does-not-exist timer of a resource on one server.
//!
//! Deadlines are ordered by (instant, arming sequence number), so arming one of the
//! 10,000 timers a subscribing request starts costs integer comparisons, not name
//! comparisons. Timers due at the same instant still fire in key order: the table
//! takes all of them out together and sorts them before handing out the first.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::TypeIdx;
use crate::DetHashMap as HashMap;
use crate::time::Instant;

/// What a deadline is for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum TimerKey {
    /// The backoff of a server's next stream attempt.
    Reconnect(usize),
    /// A resource's does-not-exist timer on one server: during fallback (A71) every
    /// server in use times its own subscription.
    DoesNotExist(usize, TypeIdx, Arc<str>),
}

/// The bit of `ResourceEntry::timed_on` for the server at `position` in its
/// authority's list; the last bit stands for every position from 63 on.
pub(super) fn timer_bit(position: usize) -> u64 {
    1 << position.min(63)
}

/// One arming of a key: its deadline and the sequence number that tells it from an
/// earlier arming of the same key at the same instant.
type Slot = (Instant, u64);

/// The deadlines, ordered for [`next_deadline`](Self::next_deadline) and indexed by key
/// so that a key is armed at most once.
#[derive(Debug, Default)]
pub(super) struct TimerTable {
    by_deadline: BTreeMap<Slot, TimerKey>,
    by_key: HashMap<TimerKey, Slot>,
    next_seq: u64,
    /// The timers of the instant being fired, taken out of `by_deadline` and sorted
    /// in reverse key order (the next to fire last). An entry whose key was cancelled
    /// or re-armed since is skipped: `by_key` no longer holds its slot.
    due: Vec<(TimerKey, Slot)>,
}

impl TimerTable {
    /// Arms `key` for `at`, replacing its earlier deadline.
    pub(super) fn set(&mut self, key: TimerKey, at: Instant) {
        // A timer armed for no later than the instant being fired must fire in key
        // order among the rest of it: put the rest back to be sorted again.
        if self
            .due
            .last()
            .is_some_and(|(_, (due_at, _))| at <= *due_at)
        {
            self.return_due();
        }
        let slot = (at, self.next_seq);
        self.next_seq += 1;
        if let Some(old) = self.by_key.insert(key.clone(), slot) {
            self.by_deadline.remove(&old);
        }
        self.by_deadline.insert(slot, key);
    }

    pub(super) fn cancel(&mut self, key: &TimerKey) {
        if let Some(old) = self.by_key.remove(key) {
            self.by_deadline.remove(&old);
        }
    }

    pub(super) fn is_armed(&self, key: &TimerKey) -> bool {
        self.by_key.contains_key(key)
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let due = self
            .due
            .iter()
            .rev()
            .find(|(key, slot)| self.is_live(key, slot))
            .map(|(_, (at, _))| *at);
        let queued = self.by_deadline.first_key_value().map(|((at, _), _)| *at);
        match (due, queued) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Disarms and returns the earliest key due at `now`; among keys due at the same
    /// instant, the smallest first.
    pub(super) fn pop_expired(&mut self, now: Instant) -> Option<TimerKey> {
        loop {
            while let Some((key, slot)) = self.due.pop() {
                if slot.0 > now {
                    self.due.push((key, slot)); // an earlier `now` than the firing's
                    return None;
                }
                if self.is_live(&key, &slot) {
                    self.by_key.remove(&key);
                    return Some(key);
                }
            }
            let (&(at, _), _) = self.by_deadline.first_key_value()?;
            if at > now {
                return None;
            }
            while let Some(entry) = self.by_deadline.first_entry()
                && entry.key().0 == at
            {
                let slot = *entry.key();
                self.due.push((entry.remove(), slot));
            }
            self.due.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        }
    }

    fn is_live(&self, key: &TimerKey, slot: &Slot) -> bool {
        self.by_key.get(key) == Some(slot)
    }

    /// Puts the live timers of the instant being fired back among the others.
    fn return_due(&mut self) {
        for (key, slot) in std::mem::take(&mut self.due) {
            if self.is_live(&key, &slot) {
                self.by_deadline.insert(slot, key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_table_orders_deadlines_and_replaces_keys() {
        let mut t = TimerTable::default();
        t.set(TimerKey::Reconnect(1), Instant::from_secs(5));
        t.set(TimerKey::Reconnect(2), Instant::from_secs(3));
        t.set(TimerKey::Reconnect(1), Instant::from_secs(1));
        assert_eq!(t.next_deadline(), Some(Instant::from_secs(1)));
        assert_eq!(
            t.pop_expired(Instant::from_secs(2)),
            Some(TimerKey::Reconnect(1))
        );
        assert_eq!(t.pop_expired(Instant::from_secs(2)), None);
        t.cancel(&TimerKey::Reconnect(2));
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn cancelling_some_keys_leaves_the_others_armed() {
        let key = |i: usize| TimerKey::Reconnect(i);
        for cancelled in [1usize, 9] {
            let mut t = TimerTable::default();
            for i in 0..10 {
                t.set(key(i), Instant::from_secs(i as u64 + 1));
            }
            for i in 0..cancelled {
                t.cancel(&key(i));
            }
            assert!((0..cancelled).all(|i| !t.is_armed(&key(i))));
            assert!((cancelled..10).all(|i| t.is_armed(&key(i))));
            assert_eq!(
                t.next_deadline(),
                Some(Instant::from_secs(cancelled as u64 + 1))
            );
        }
    }

    #[test]
    fn timers_due_at_one_instant_fire_in_key_order_whatever_the_arming_order() {
        let name = |n: &str| TimerKey::DoesNotExist(0, 0, Arc::from(n));
        let mut t = TimerTable::default();
        for n in ["c", "a", "d", "b"] {
            t.set(name(n), Instant::from_secs(15));
        }
        t.set(TimerKey::Reconnect(3), Instant::from_secs(15));
        t.set(name("0"), Instant::from_secs(16));
        assert_eq!(
            t.pop_expired(Instant::from_secs(15)),
            Some(TimerKey::Reconnect(3))
        );
        assert_eq!(t.pop_expired(Instant::from_secs(15)), Some(name("a")));
        // Mid-firing: "c" cancelled, "b" re-armed later, "aa" armed for the same instant.
        t.cancel(&name("c"));
        t.set(name("b"), Instant::from_secs(20));
        t.set(name("aa"), Instant::from_secs(15));
        assert_eq!(t.next_deadline(), Some(Instant::from_secs(15)));
        assert_eq!(t.pop_expired(Instant::from_secs(15)), Some(name("aa")));
        assert_eq!(t.pop_expired(Instant::from_secs(15)), Some(name("d")));
        assert_eq!(t.pop_expired(Instant::from_secs(15)), None);
        assert_eq!(t.next_deadline(), Some(Instant::from_secs(16)));
        assert!(t.is_armed(&name("b")) && !t.is_armed(&name("c")));
    }

    /// One step of the property below: arm (key, seconds), cancel a key, or fire what
    /// is due at a time.
    #[derive(Clone, Debug)]
    enum Op {
        Set(u8, u8),
        Cancel(u8),
        Fire(u8),
    }

    impl quickcheck::Arbitrary for Op {
        fn arbitrary(g: &mut quickcheck::Gen) -> Op {
            let (k, at) = (u8::arbitrary(g) % 12, u8::arbitrary(g) % 8);
            match u8::arbitrary(g) % 4 {
                0 | 1 => Op::Set(k, at),
                2 => Op::Cancel(k),
                _ => Op::Fire(at),
            }
        }
    }

    fn key_of(k: u8) -> TimerKey {
        match k {
            0..3 => TimerKey::Reconnect(k as usize),
            _ => TimerKey::DoesNotExist(k as usize % 2, 0, Arc::from(format!("n{}", k % 5))),
        }
    }

    quickcheck::quickcheck! {
        /// The table behaves as one ordered set of (deadline, key), the simplest
        /// correct table: the same keys fire in the same order, and the same
        /// deadline is reported next. A firing is interleaved with arming and
        /// cancelling, as the client's timer handlers do.
        fn behaves_as_an_ordered_set_of_deadlines_and_keys(ops: Vec<Op>) -> bool {
            let mut table = TimerTable::default();
            let mut model: std::collections::BTreeSet<(Instant, TimerKey)> = Default::default();
            let model_cancel = |model: &mut std::collections::BTreeSet<(Instant, TimerKey)>, key: &TimerKey| {
                model.retain(|(_, k)| k != key);
            };
            let mut ops = ops.into_iter().peekable();
            while let Some(op) = ops.next() {
                match op {
                    Op::Set(k, at) => {
                        let at = Instant::from_secs(at.into());
                        model_cancel(&mut model, &key_of(k));
                        model.insert((at, key_of(k)));
                        table.set(key_of(k), at);
                    }
                    Op::Cancel(k) => {
                        model_cancel(&mut model, &key_of(k));
                        table.cancel(&key_of(k));
                    }
                    Op::Fire(now) => {
                        let now = Instant::from_secs(now.into());
                        loop {
                            let expected = model.first().filter(|(at, _)| *at <= now).cloned();
                            if let Some(e) = &expected {
                                model.remove(e);
                            }
                            if table.pop_expired(now) != expected.as_ref().map(|(_, k)| k.clone()) {
                                return false;
                            }
                            if expected.is_none() {
                                break;
                            }
                            // The next op runs inside this firing, as a handler would.
                            if let Some(Op::Set(..) | Op::Cancel(_)) = ops.peek() {
                                break;
                            }
                        }
                    }
                }
                if table.next_deadline() != model.first().map(|(at, _)| *at) {
                    return false;
                }
                let armed = (0..12).all(|k| {
                    table.is_armed(&key_of(k)) == model.iter().any(|(_, m)| *m == key_of(k))
                });
                if !armed {
                    return false;
                }
            }
            true
        }
    }
}
