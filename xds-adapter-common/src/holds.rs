//! Held requests: a burst of watches leaves as one request per type, however the
//! application's tasks and the machine schedule it. While watch and cancel commands of
//! a type keep coming, the core holds that type's requests back
//! ([`XdsClient::hold_requests_of`]). A type goes once its burst has settled: no
//! command of it for [`SETTLE`], found at two looks of the driver with a yield between
//! them, so that every task that was ready to run (one of the application's watchers,
//! scheduled behind the driver) has queued its watch first. [`MAX_HOLD`] only bounds a
//! steady trickle that never settles.
//!
//! Types are held apart, so a loop that watches the listener, then 10,000 clusters,
//! then 10,000 endpoint sets sends the listener's request at once, the clusters' once
//! their part of the loop is through, and so on: the server starts on the first while
//! the client takes the rest.
//!
//! Without holds, one request per type relied on the driver lagging behind the
//! application: a driver that caught up, or an application thread descheduled
//! mid-burst, sent a first request with the names taken so far, and the server sent
//! those resources twice. A fixed window (20 ms at most) then split the bursts of
//! applications that watch from one task per watcher, which take longer than that, and
//! a driver that ran before the watchers it had woken released their type first.

use std::time::Duration;

use xds_proto_core::{Instant, XdsClient};

/// How long a type's requests are held after its last watch or cancel command: long
/// enough for an application's loop that was interrupted to queue its next watch,
/// short beside any network round trip. Longer ones split no fewer bursts end to end
/// (a fixed 1 ms: 11 of 120 runs split, against 5 of 120 at 0.5 ms; growing by 0.4 µs
/// a command to 4 ms: 20 of 48, against 18 of 48, one task per watcher at load 10):
/// the threads of a loaded machine stall for tens of milliseconds, and a lone watch
/// would wait for it.
pub(crate) const SETTLE: Duration = Duration::from_micros(500);

/// The longest a type's requests are held while its commands keep coming, a safety
/// bound for a steady trickle that never settles, far beyond any burst: 20,000 watches
/// from one task each take 20–100 ms to register on 2 busy vCPUs.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(1);

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
    /// The watch and cancel commands of the type taken since `since`.
    commands: u32,
    /// The driver found the hold due and let the other ready tasks run before letting
    /// it go; a command of the type meanwhile clears it.
    due_seen: bool,
}

/// The types whose requests the driver holds (a handful at most).
#[derive(Debug, Default)]
pub(crate) struct Holds {
    held: Vec<Hold>,
    /// The types the batch of commands being taken has held so far, with how many
    /// commands of each it took.
    batch: Vec<(&'static str, u32)>,
}

impl Holds {
    /// A watch or cancel of `type_url` is about to reach the core: the type is held
    /// from now on (the core sends a request of a type not held at once).
    pub(crate) fn hold(&mut self, core: &mut XdsClient, type_url: &'static str) {
        if let Some((_, n)) = self.batch.iter_mut().find(|(t, _)| *t == type_url) {
            *n += 1;
        } else if core.hold_requests_of(type_url) {
            self.batch.push((type_url, 1));
        }
    }

    /// Whether no type is held, nor being held by the batch being taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty() && self.batch.is_empty()
    }

    /// The batch of commands ended at `now`: each type it held waits [`SETTLE`] more,
    /// up to [`MAX_HOLD`] in all.
    pub(crate) fn end_batch(&mut self, now: Instant) {
        while let Some((type_url, n)) = self.batch.pop() {
            self.extend(type_url, n, now);
        }
    }

    fn extend(&mut self, type_url: &'static str, n: u32, now: Instant) {
        if let Some(hold) = self.held.iter_mut().find(|h| h.type_url == type_url) {
            hold.commands = hold.commands.saturating_add(n);
            hold.until = (now + SETTLE).min(hold.since + MAX_HOLD);
            hold.due_seen = false;
            return;
        }
        let until = now + SETTLE;
        self.held.push(Hold {
            type_url,
            since: now,
            until,
            check: until,
            commands: n,
            due_seen: false,
        });
    }

    /// The first look at `now`: lets go a lone watch's (or cancel's) type whose hold
    /// has settled, marks the settled bursts as seen due, and moves the next check of
    /// the others to when theirs may have. True when a burst is due: the driver then
    /// lets the other ready tasks run once (one of them may be about to queue a watch
    /// of the type) before the second look, [`release_seen`](Self::release_seen). A
    /// lone watch does not wait for that: the yield added 0.2–0.3 ms to the median
    /// time to a lone watch's request (`xds-e2e --lone`, tokio, a busy machine), and
    /// splitting a one-name subscription resends one resource.
    pub(crate) fn settled(&mut self, core: &mut XdsClient, now: Instant) -> bool {
        let mut due = false;
        self.held.retain_mut(|hold| {
            if hold.until <= now {
                if hold.commands <= 1 {
                    core.release_requests_of(hold.type_url);
                    return false;
                }
                hold.due_seen = true;
                due = true;
            } else if hold.check <= now {
                hold.check = hold.until;
            }
            true
        });
        due
    }

    /// The second look: lets go the types found due by [`settled`](Self::settled) that
    /// no command has extended since.
    pub(crate) fn release_seen(&mut self, core: &mut XdsClient) {
        self.held.retain(|hold| {
            if hold.due_seen {
                core.release_requests_of(hold.type_url);
                return false;
            }
            true
        });
    }

    /// When the driver should next call [`settled`](Self::settled).
    pub(crate) fn next_check(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.check).min()
    }
}

#[cfg(test)]
mod tests {
    use xds_proto_core::{Action, Bootstrap, Cds, Eds, XdsClientConfig};

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

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// One batch of `n` commands of `type_url` taken at `now`.
    fn batch(
        holds: &mut Holds,
        core: &mut XdsClient,
        type_url: &'static str,
        n: u32,
        now: Instant,
    ) {
        for _ in 0..n {
            holds.hold(core, type_url);
        }
        holds.end_batch(now);
    }

    /// What the driver does when its timer fires at `now`: a due hold is let go at the
    /// second look, if no command of its type came in between.
    fn timer(holds: &mut Holds, core: &mut XdsClient, now: Instant) {
        if holds.settled(core, now) {
            holds.release_seen(core);
        }
    }

    /// Each type settles on its own: the clusters' hold ends a settle time after their
    /// last command although endpoint commands keep coming.
    #[test]
    fn each_type_settles_on_its_own() {
        let mut core = client();
        let mut holds = Holds::default();
        let t0 = Instant::from_secs(1);
        batch(&mut holds, &mut core, CDS, 1, t0);
        batch(&mut holds, &mut core, CDS, 1, t0 + us(250));
        assert_eq!(holds.next_check(), Some(t0 + SETTLE));
        // The first check finds the clusters' burst still going: checked again later.
        timer(&mut holds, &mut core, t0 + SETTLE);
        let cds_until = t0 + us(250) + SETTLE;
        assert_eq!(holds.next_check(), Some(cds_until));
        batch(&mut holds, &mut core, EDS, 1, t0 + ms(1));
        let mut now = t0 + ms(1);
        while now < t0 + ms(3) {
            batch(&mut holds, &mut core, EDS, 1, now);
            timer(&mut holds, &mut core, now);
            now += us(100);
        }
        assert!(core.requests_held(), "the endpoints are still held");
        assert!(core.watch::<Cds>("c").is_ok());
        let actions: Vec<_> = std::iter::from_fn(|| core.poll_action()).collect();
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::SendRequest { .. })),
            "the clusters were let go: their watch's request goes at once ({actions:?})"
        );
    }

    /// A command of the type between the driver finding a burst's hold due and its
    /// second look (a task that ran when the driver let the others run) keeps it held;
    /// a lone watch's hold goes at the first look.
    #[test]
    fn a_command_between_the_two_looks_keeps_the_hold() {
        let mut core = client();
        let mut holds = Holds::default();
        let t0 = Instant::from_secs(1);
        batch(&mut holds, &mut core, CDS, 2, t0);
        assert!(
            holds.settled(&mut core, t0 + ms(5)),
            "due after 5 ms of nothing"
        );
        assert!(core.requests_held(), "held until the second look");
        batch(&mut holds, &mut core, CDS, 1, t0 + ms(5));
        holds.release_seen(&mut core);
        assert!(core.requests_held(), "the late command kept it");
        assert!(!holds.settled(&mut core, t0 + ms(5)));
        assert!(holds.settled(&mut core, t0 + ms(6)));
        holds.release_seen(&mut core);
        assert!(!core.requests_held());

        batch(&mut holds, &mut core, EDS, 1, t0 + ms(10));
        assert!(!holds.settled(&mut core, t0 + ms(11)), "no second look");
        assert!(!core.requests_held(), "a lone watch goes at the first look");
    }

    /// A steady trickle that never settles is let go [`MAX_HOLD`] after its first
    /// command, and a watch of the type goes through the core as usual afterwards.
    #[test]
    fn a_trickle_is_let_go_after_the_longest_hold() {
        let mut core = client();
        let mut holds = Holds::default();
        let t0 = Instant::from_secs(1);
        // Endpoint commands every 0.25 ms for 1.5 s: let go 1 s after the first.
        let mut now = t0;
        while now < t0 + ms(1500) {
            batch(&mut holds, &mut core, EDS, 1, now);
            if holds.next_check().is_some_and(|c| c <= now) {
                timer(&mut holds, &mut core, now);
            }
            if !core.requests_held() {
                break;
            }
            now += us(250);
        }
        assert!(
            now >= t0 + MAX_HOLD && now < t0 + MAX_HOLD + ms(1),
            "let go at {now:?}"
        );
        assert!(core.watch::<Eds>("c").is_ok());
    }
}
