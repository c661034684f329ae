//! Every deadline of the client in one table, keyed by purpose: the reconnect backoff
//! of a server and the does-not-exist timer of a resource on one server.

use std::collections::BTreeSet;
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

/// The deadlines, ordered for [`next_deadline`](Self::next_deadline) and indexed by key
/// so that a key is armed at most once.
#[derive(Debug, Default)]
pub(super) struct TimerTable {
    by_deadline: BTreeSet<(Instant, TimerKey)>,
    by_key: HashMap<TimerKey, Instant>,
}

impl TimerTable {
    /// Arms `key` for `at`, replacing its earlier deadline.
    pub(super) fn set(&mut self, key: TimerKey, at: Instant) {
        if let Some(old) = self.by_key.insert(key.clone(), at) {
            self.by_deadline.remove(&(old, key.clone()));
        }
        self.by_deadline.insert((at, key));
    }

    pub(super) fn cancel(&mut self, key: &TimerKey) {
        if let Some(old) = self.by_key.remove(key) {
            self.by_deadline.remove(&(old, key.clone()));
        }
    }

    /// Cancels many keys. Many at once (a first delivery): one pass over the deadline
    /// set instead of an ordered search, comparing names, per timer.
    pub(super) fn cancel_all(&mut self, keys: &[TimerKey]) {
        if keys.len() * 8 >= self.by_deadline.len() {
            for key in keys {
                self.by_key.remove(key);
            }
            let by_key = &self.by_key;
            self.by_deadline
                .retain(|(at, key)| by_key.get(key) == Some(at));
        } else {
            for key in keys {
                self.cancel(key);
            }
        }
    }

    pub(super) fn is_armed(&self, key: &TimerKey) -> bool {
        self.by_key.contains_key(key)
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.by_deadline.first().map(|(at, _)| *at)
    }

    /// Disarms and returns the earliest key due at `now`.
    pub(super) fn pop_expired(&mut self, now: Instant) -> Option<TimerKey> {
        let (at, _) = self.by_deadline.first()?;
        if *at > now {
            return None;
        }
        let (_, key) = self.by_deadline.pop_first()?;
        self.by_key.remove(&key);
        Some(key)
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
    fn cancel_all_in_one_pass_or_per_key_leaves_the_others_armed() {
        let key = |i: usize| TimerKey::Reconnect(i);
        for cancelled in [1usize, 9] {
            let mut t = TimerTable::default();
            for i in 0..10 {
                t.set(key(i), Instant::from_secs(i as u64 + 1));
            }
            let keys: Vec<TimerKey> = (0..cancelled).map(key).collect();
            t.cancel_all(&keys);
            assert!((0..cancelled).all(|i| !t.is_armed(&key(i))));
            assert!((cancelled..10).all(|i| t.is_armed(&key(i))));
            assert_eq!(
                t.next_deadline(),
                Some(Instant::from_secs(cancelled as u64 + 1))
            );
        }
    }
}
