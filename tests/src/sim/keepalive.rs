//! The transport's HTTP/2 keepalive as the adapters configure it
//! ([`KeepaliveSettings`], whose documentation states the rule): which settings a
//! simulated client's transport has, and when a connection whose peer went silent fails.
//!
//! The rule: while the ADS stream is open, a PING goes out once `interval` has passed
//! since the last frame read that counts as activity (a response, or the ACK of a PING),
//! and the connection fails ("keep-alive timed out") when that PING has no ACK `timeout`
//! later. A reachable server ACKs every PING, so in the simulator only a partition (a
//! blackhole fault) silences a connection. The PING's round trip is neglected: it is
//! far shorter than any interval drawn.
//!
//! With keepalive off nothing in the client notices a partition: the stream hangs until
//! the partition lifts, and then TCP delivers what was held back. TCP itself gives up
//! only after its retransmissions time out (about 15 minutes on Linux), far longer than
//! any partition here (at most 60 s, or until the heal), so that is not modelled.

use std::time::Duration;

use xds_adapter_common::{
    DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_TIMEOUT, KeepaliveSettings,
};
use xds_proto_core::Instant;

use super::rng::SimRng;

/// A client's keepalive: the adapter's default (35 %), short values that fail a
/// partitioned connection within the partition (40 %), or off (25 %).
pub(super) fn draw(rng: &mut SimRng) -> Option<KeepaliveSettings> {
    match rng.below(20) {
        0..7 => Some(KeepaliveSettings {
            interval: DEFAULT_KEEPALIVE_INTERVAL,
            timeout: DEFAULT_KEEPALIVE_TIMEOUT,
        }),
        7..15 => Some(KeepaliveSettings {
            interval: Duration::from_secs(rng.range(1, 30)),
            timeout: Duration::from_secs(rng.range(1, 20)),
        }),
        _ => None,
    }
}

/// When a connection fails that is partitioned from `partitioned_at` on and last read
/// activity at `last_activity`, or `None` with keepalive off. Until the partition the
/// idle connection's PINGs were ACKed every `interval`; the first PING after it goes
/// unanswered, and the connection fails `timeout` after sending it.
pub(super) fn failure_at(
    keepalive: Option<KeepaliveSettings>,
    last_activity: Instant,
    partitioned_at: Instant,
) -> Option<Instant> {
    let KeepaliveSettings { interval, timeout } = keepalive?;
    let idle = partitioned_at.saturating_duration_since(last_activity);
    let acked_pings = idle.as_nanos() / interval.as_nanos().max(1);
    let last_ack = last_activity + interval * u32::try_from(acked_pings).unwrap_or(u32::MAX);
    Some(last_ack + interval + timeout)
}

/// How a plan line shows a client's keepalive.
pub(super) fn describe(keepalive: Option<KeepaliveSettings>) -> String {
    match keepalive {
        Some(k) => format!("{:?}+{:?}", k.interval, k.timeout),
        None => "off".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_partitioned_connection_fails_a_timeout_after_its_first_unanswered_ping() {
        let k = Some(KeepaliveSettings {
            interval: secs(10),
            timeout: secs(3),
        });
        let t0 = Instant::from_secs(1_000);
        // Partitioned 4 s after the last response: the PING at 10 s goes unanswered.
        assert_eq!(failure_at(k, t0, t0 + secs(4)), Some(t0 + secs(13)));
        // Partitioned 25 s after it: the PINGs at 10 s and 20 s were ACKed.
        assert_eq!(failure_at(k, t0, t0 + secs(25)), Some(t0 + secs(33)));
        assert_eq!(failure_at(None, t0, t0 + secs(4)), None);
    }
}
