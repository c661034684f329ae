//! When to resolve each LOGICAL_DNS cluster's host, as gRPC's DNS resolver under the
//! xDS cluster resolver does: at once when the cluster appears (or its host changes);
//! again when one of its connections fails or closes (a subchannel going TRANSIENT_FAILURE
//! or IDLE: gRPC's policies then ask for re-resolution), at most once per 30 s; and
//! after a failed resolution with gRPC's backoff (1 s, ×1.6, ±20 %, 120 s cap), reset
//! by a success. One request at a time per cluster: the next waits for the answer to
//! the last.

use std::collections::BTreeMap;
use std::time::Duration;

use rand_xoshiro::Xoshiro256PlusPlus;

use super::api::LbAction;
use crate::backoff::{Backoff, BackoffConfig};
use crate::time::Instant;

/// The least time between two resolutions asked for by connection failures (gRPC's
/// `grpc.dns_min_time_between_resolutions_ms` default).
pub(super) const MIN_TIME_BETWEEN_RESOLUTIONS: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Resolution {
    host: String,
    port: u16,
    /// A `ResolveDns` is out and unanswered.
    in_flight: bool,
    /// When the last `ResolveDns` went out.
    last_at: Instant,
    /// A resolution to ask for then.
    due: Option<Instant>,
    /// Between failed resolutions.
    backoff: Backoff,
}

/// The resolution state of every LOGICAL_DNS cluster of one load balancer.
#[derive(Debug)]
pub(super) struct DnsResolutions {
    by_cluster: BTreeMap<String, Resolution>,
    backoff: BackoffConfig,
}

impl DnsResolutions {
    pub(super) fn new(backoff: BackoffConfig) -> DnsResolutions {
        DnsResolutions {
            by_cluster: BTreeMap::new(),
            backoff,
        }
    }

    /// A new cluster, or a new host for one: resolves at once.
    pub(super) fn start(
        &mut self,
        now: Instant,
        cluster: &str,
        host: String,
        port: u16,
        actions: &mut impl Extend<LbAction>,
    ) {
        let mut resolution = Resolution {
            host,
            port,
            in_flight: false,
            last_at: now,
            due: None,
            backoff: Backoff::new(self.backoff),
        };
        resolution.ask(now, cluster, actions);
        self.by_cluster.insert(cluster.to_owned(), resolution);
    }

    /// Forgets the clusters that left the config (or are no longer LOGICAL_DNS).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.by_cluster.retain(|name, _| keep(name));
    }

    /// The embedder answered: a failure is retried after the backoff.
    pub(super) fn resolved(
        &mut self,
        now: Instant,
        cluster: &str,
        ok: bool,
        rng: &mut Xoshiro256PlusPlus,
    ) {
        let Some(r) = self.by_cluster.get_mut(cluster) else {
            return;
        };
        r.in_flight = false;
        if ok {
            r.backoff.reset();
        } else {
            r.due = Some(now + r.backoff.next_delay(rng));
        }
    }

    /// A connection of the cluster failed or closed: asks for a new resolution,
    /// unless one is under way or due, and no sooner than 30 s after the last.
    pub(super) fn connection_lost(
        &mut self,
        now: Instant,
        cluster: &str,
        actions: &mut impl Extend<LbAction>,
    ) {
        let Some(r) = self.by_cluster.get_mut(cluster) else {
            return;
        };
        if r.in_flight || r.due.is_some() {
            return;
        }
        let earliest = r.last_at + MIN_TIME_BETWEEN_RESOLUTIONS;
        if earliest > now {
            r.due = Some(earliest);
        } else {
            r.ask(now, cluster, actions);
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.by_cluster.values().filter_map(|r| r.due).min()
    }

    /// Asks for the resolutions due at `now`.
    pub(super) fn handle_timeout(&mut self, now: Instant, actions: &mut impl Extend<LbAction>) {
        for (cluster, r) in &mut self.by_cluster {
            if r.due.is_some_and(|at| at <= now) {
                r.ask(now, cluster, actions);
            }
        }
    }
}

impl Resolution {
    /// Asks the embedder to resolve `cluster`'s host now.
    fn ask(&mut self, now: Instant, cluster: &str, actions: &mut impl Extend<LbAction>) {
        self.in_flight = true;
        self.last_at = now;
        self.due = None;
        actions.extend([LbAction::ResolveDns {
            cluster: cluster.to_owned(),
            host: self.host.clone(),
            port: self.port,
        }]);
    }
}
