//! Held requests: a burst of watches leaves as one request per type. While watch and
//! cancel commands of a type keep coming, the core holds that type's requests back
//! ([`XdsClient::hold_requests_of`]); once none has come for [`SETTLE`] (or after
//! [`MAX_HOLD`] of a steady trickle) they go. Types are held apart, so a loop that
//! watches the listener, then 10,000 clusters, then 10,000 endpoint sets sends the
//! listener's request at once, the clusters' once their part of the loop is through,
//! and so on: the server starts on the first while the client takes the rest.
//!
//! Without it, one request per type relied on the driver lagging behind the
//! application: a driver that caught up, or an application thread descheduled
//! mid-burst, sent a first request with the names taken so far, and the server sent
//! those resources twice.

use std::time::Duration;

use xds_proto_core::{Instant, XdsClient};

/// How long a type's requests are held after its last watch or cancel command: long
/// enough for an application's loop that was interrupted to queue its next watch,
/// short beside any network round trip.
pub(crate) const SETTLE: Duration = Duration::from_micros(500);

/// The longest a type's requests are held while its watch commands keep coming.
pub(crate) const MAX_HOLD: Duration = Duration::from_millis(20);

/// One type's requests, held since `since`, until `until` unless another of its
/// commands comes. The driver's timer is armed for `check`, an earlier `until`: a
/// burst pushing `until` on with every command re-arms it once per [`SETTLE`], not
/// once per command.
#[derive(Clone, Copy, Debug)]
struct Hold {
    type_url: &'static str,
    since: Instant,
    until: Instant,
    check: Instant,
}

/// The types whose requests the driver holds (a handful at most).
#[derive(Debug, Default)]
pub(crate) struct Holds {
    held: Vec<Hold>,
    /// The types the batch of commands being taken has held so far.
    batch: Vec<&'static str>,
}

impl Holds {
    /// A watch or cancel of `type_url` is about to reach the core: the type is held
    /// from now on (the core sends a request of a type not held at once).
    pub(crate) fn hold(&mut self, core: &mut XdsClient, type_url: &'static str) {
        if !self.batch.contains(&type_url) && core.hold_requests_of(type_url) {
            self.batch.push(type_url);
        }
    }

    /// Whether the batch being taken held a type (then [`end_batch`](Self::end_batch)
    /// needs the time).
    pub(crate) fn holding(&self) -> bool {
        !self.batch.is_empty()
    }

    /// The batch of commands ended at `now`: each type it held waits [`SETTLE`] more,
    /// up to [`MAX_HOLD`] in all, and the types whose burst has settled go (a long
    /// batch may have outlasted another type's burst).
    pub(crate) fn end_batch(&mut self, core: &mut XdsClient, now: Instant) {
        while let Some(type_url) = self.batch.pop() {
            self.extend(type_url, now);
        }
        self.release_settled(core, now);
    }

    fn extend(&mut self, type_url: &'static str, now: Instant) {
        if let Some(hold) = self.held.iter_mut().find(|h| h.type_url == type_url) {
            hold.until = (now + SETTLE).min(hold.since + MAX_HOLD);
            return;
        }
        let until = now + SETTLE;
        self.held.push(Hold {
            type_url,
            since: now,
            until,
            check: until,
        });
    }

    /// Lets go the types whose burst has settled by `now`; the others are checked
    /// again when theirs may have.
    pub(crate) fn release_settled(&mut self, core: &mut XdsClient, now: Instant) {
        self.held.retain_mut(|hold| {
            if hold.until <= now {
                core.release_requests_of(hold.type_url);
                return false;
            }
            if hold.check <= now {
                hold.check = hold.until;
            }
            true
        });
    }

    /// When the driver should next call [`release_settled`](Self::release_settled).
    pub(crate) fn next_check(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.check).min()
    }
}

#[cfg(test)]
mod tests {
    use xds_proto_core::{Bootstrap, Cds, Eds, XdsClientConfig};

    use super::*;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

    fn client() -> XdsClient {
        let bootstrap = Bootstrap::from_json_str(
            r#"{"xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
                "node": {"id": "n"}}"#,
        )
        .expect("a valid bootstrap");
        XdsClient::new(XdsClientConfig::new(bootstrap), 1)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Each type settles on its own: the clusters' hold ends 0.5 ms after their last
    /// command although endpoint commands keep coming; a steady trickle is let go
    /// after 20 ms.
    #[test]
    fn each_type_settles_on_its_own_and_a_trickle_is_let_go() {
        let mut core = client();
        let mut holds = Holds::default();
        let t0 = Instant::from_secs(1);
        holds.hold(&mut core, CDS);
        holds.end_batch(&mut core, t0);
        holds.hold(&mut core, CDS);
        holds.end_batch(&mut core, t0 + ms(1) / 4);
        assert_eq!(holds.next_check(), Some(t0 + SETTLE));
        // The first check finds the clusters' burst still going: checked again later.
        holds.release_settled(&mut core, t0 + SETTLE);
        assert_eq!(holds.next_check(), Some(t0 + ms(1) / 4 + SETTLE));
        holds.hold(&mut core, EDS);
        holds.end_batch(&mut core, t0 + ms(1));
        assert_eq!(holds.next_check(), Some(t0 + ms(1) + SETTLE));
        assert!(core.requests_held(), "the endpoints are still held");
        // Endpoint commands every 0.25 ms for 30 ms: let go at 20 ms after the first.
        let mut now = t0 + ms(1);
        while now < t0 + ms(31) {
            holds.hold(&mut core, EDS);
            holds.end_batch(&mut core, now);
            if holds.next_check().is_none() {
                break;
            }
            now += ms(1) / 4;
        }
        assert!(now >= t0 + ms(21) && now < t0 + ms(22), "let go at {now:?}");
        assert!(!core.requests_held());
        // A watch of the type goes through the core as usual once released.
        assert!(core.watch::<Cds>("c").is_ok());
        assert!(core.watch::<Eds>("c").is_ok());
    }
}
