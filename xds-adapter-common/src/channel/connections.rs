//! The subchannels' connections, keyed by subchannel: each one's current connection
//! attempt (numbered per channel, with the security config it dials with) and its
//! connection while READY. Only the current attempt may report for its subchannel, so
//! a connection retired or dropped earlier cannot touch its successor; the balancer
//! owns one table under its lock and asks it which connection an RPC may use.

use std::collections::HashMap;
use std::hash::Hash;

use super::security::EndpointSecurity;
use crate::transport::Connection;

/// One connection attempt of a subchannel, numbered per channel: what the attempt
/// reports applies only while it is its subchannel's current attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Attempt(u64);

/// A subchannel's current attempt, what it dials with and, once READY, its
/// connection.
struct Slot {
    attempt: Attempt,
    security: EndpointSecurity,
    ready: Option<Connection>,
}

/// The subchannels' connections (keyed by subchannel): each one's current attempt,
/// and its connection while READY. A connection retired or dropped earlier (a
/// `Disconnect`, an `Idle`, a GOAWAY before the re-dial) cannot touch its successor.
pub(super) struct Connections<K> {
    slots: HashMap<K, Slot>,
    next_attempt: u64,
}

impl<K: Eq + Hash> Connections<K> {
    pub(super) fn new() -> Connections<K> {
        Connections {
            slots: HashMap::new(),
            next_attempt: 0,
        }
    }

    /// Starts a new attempt for `key` with `security`, which replaces any earlier one.
    pub(super) fn start(&mut self, key: K, security: EndpointSecurity) -> Attempt {
        let attempt = Attempt(self.next_attempt);
        self.next_attempt += 1;
        let slot = Slot {
            attempt,
            security,
            ready: None,
        };
        self.slots.insert(key, slot);
        attempt
    }

    /// Forgets `key`'s connection (RPCs on it keep their own handles).
    pub(super) fn remove(&mut self, key: &K) {
        self.slots.remove(key);
    }

    /// Takes a report of `attempt`: its connection once READY, `None` otherwise.
    /// Returns false, dropping `ready`, when `attempt` is not `key`'s current attempt:
    /// then the report is no news of the subchannel.
    pub(super) fn report(&mut self, key: &K, attempt: Attempt, ready: Option<Connection>) -> bool {
        match self.slots.get_mut(key) {
            Some(slot) if slot.attempt == attempt => {
                slot.ready = ready;
                true
            }
            _ => false,
        }
    }

    /// Retires the READY connections made with another security config than `now_is`
    /// gives their key now; returns their keys (to be reported IDLE).
    pub(super) fn retire_outdated(&mut self, now_is: impl Fn(&K) -> EndpointSecurity) -> Vec<K>
    where
        K: Clone,
    {
        let mut retired = Vec::new();
        for (key, slot) in &mut self.slots {
            if slot.ready.is_some() && slot.security != now_is(key) {
                slot.ready = None;
                retired.push(key.clone());
            }
        }
        retired
    }

    /// Whether `key`'s current attempt dials with `security`.
    pub(super) fn dials_with(&self, key: &K, security: &EndpointSecurity) -> bool {
        self.slots.get(key).is_some_and(|s| s.security == *security)
    }

    /// The connection an RPC picked for `key` may go on: READY, and taking new streams.
    pub(super) fn usable(&self, key: &K) -> Option<&Connection> {
        self.ready(key).map(|(_, conn)| conn)
    }

    /// `key`'s usable connection, with its attempt.
    pub(super) fn ready(&self, key: &K) -> Option<(Attempt, &Connection)> {
        let slot = self.slots.get(key)?;
        let conn = slot.ready.as_ref()?;
        conn.takes_new_streams().then_some((slot.attempt, conn))
    }

    /// Whether `attempt` is still `key`'s current one.
    pub(super) fn is_current(&self, key: &K, attempt: Attempt) -> bool {
        self.slots.get(key).is_some_and(|s| s.attempt == attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subchannel dialled again after its connection was dropped (the balancer's
    /// `Idle` after 15 unused minutes, say): the old connection's reports, which come
    /// when it finally closes, are no news of the subchannel.
    #[test]
    fn only_the_current_attempt_reports_for_its_subchannel() {
        let mut connections = Connections::<u32>::new();
        let first = connections.start(7, EndpointSecurity::Fallback);
        assert!(connections.report(&7, first, None), "CONNECTING");
        connections.remove(&7);
        assert!(!connections.report(&7, first, None), "forgotten");
        let second = connections.start(7, EndpointSecurity::Fallback);
        assert_ne!(first, second);
        assert!(
            !connections.report(&7, first, None),
            "the old connection's close does not idle the new attempt"
        );
        assert!(connections.report(&7, second, None));
        assert!(connections.usable(&7).is_none(), "not READY");
        let other = connections.start(8, EndpointSecurity::Fallback);
        assert!(
            !connections.report(&8, second, None),
            "another subchannel's attempt"
        );
        assert!(connections.report(&8, other, None));
    }
}
