//! One LRS server's stream, as a state machine: opened with the node while some
//! cluster reports to the server; the server's `LoadStatsResponse` says which
//! clusters and how often; a report goes out every interval (timed from when the last
//! one was taken by the transport, as gRPC does), except a second one in a row with
//! nothing counted; a stream that ends after a response reopens at once, one that
//! ends before any waits out the backoff (A57, with the ADS stream's backoff).

use std::sync::Arc;
use std::time::Duration;

use super::response::ReportingSettings;
use super::store::ClusterReport;
use crate::backoff::{Backoff, BackoffConfig};
use crate::bootstrap::ServerConfig;
use crate::client::{Status, StreamId};
use crate::time::Instant;

/// The stream open to a server.
#[derive(Debug)]
pub(super) struct LrsStream {
    pub(super) id: StreamId,
    /// A response arrived (the backoff resets, and a close reopens at once).
    saw_response: bool,
    /// A request was emitted and the transport has not yet taken it.
    send_pending: bool,
    /// What the server asked for; `None` before its first response.
    settings: Option<ReportingSettings>,
    next_report: Option<Instant>,
    /// The last report counted nothing: another such one is not sent.
    last_was_zero: bool,
}

/// What the stream wants done after an input.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    Nothing,
    /// Send this request.
    Send(Box<crate::pb::envoy::service::load_stats::v3::LoadStatsRequest>),
}

/// One LRS server's stream and retry state.
#[derive(Debug)]
pub(super) struct LrsServer {
    pub(super) config: Arc<ServerConfig>,
    pub(super) stream: Option<LrsStream>,
    backoff: Backoff,
    pub(super) retry_at: Option<Instant>,
}

impl LrsServer {
    pub(super) fn new(config: Arc<ServerConfig>, backoff: BackoffConfig) -> LrsServer {
        LrsServer {
            config,
            stream: None,
            backoff: Backoff::new(backoff),
            retry_at: None,
        }
    }

    /// Whether the server's LRS stream is open or waits to reopen.
    pub(super) fn in_use(&self) -> bool {
        self.stream.is_some() || self.retry_at.is_some()
    }

    /// Records a new stream, whose first request (the node) is being sent.
    pub(super) fn opened(&mut self, id: StreamId) {
        self.stream = Some(LrsStream {
            id,
            saw_response: false,
            send_pending: true,
            settings: None,
            next_report: None,
            last_was_zero: false,
        });
    }

    /// Whether a request of the open stream waits for the transport.
    pub(super) fn send_pending(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.send_pending)
    }

    pub(super) fn stream_id(&self) -> Option<StreamId> {
        self.stream.as_ref().map(|s| s.id)
    }

    /// The transport took the outstanding request: the next report is due one
    /// interval from now, once the server has said what it wants.
    pub(super) fn request_sent(&mut self, now: Instant) {
        if let Some(stream) = &mut self.stream {
            stream.send_pending = false;
            stream.schedule(now);
        }
    }

    /// A `LoadStatsResponse`: the new settings take effect (a changed interval
    /// restarts the timer; the same settings again change nothing).
    pub(super) fn response(&mut self, now: Instant, settings: ReportingSettings) {
        let Some(stream) = &mut self.stream else {
            return;
        };
        stream.saw_response = true;
        self.backoff.reset();
        if stream.settings.as_ref() == Some(&settings) {
            return;
        }
        let interval_changed =
            stream.settings.as_ref().map(|s| s.interval) != Some(settings.interval);
        tracing::debug!(
            server = %self.config.server_uri,
            stream = %stream.id,
            send_all_clusters = settings.send_all_clusters,
            clusters = settings.clusters.len(),
            ignored = settings.ignored_names,
            interval = ?settings.interval,
            "LRS settings received"
        );
        if settings.ignored_names > 0 {
            tracing::warn!(
                server = %self.config.server_uri,
                ignored = settings.ignored_names,
                "LoadStatsResponse names too many clusters; the rest are ignored"
            );
        }
        stream.settings = Some(settings);
        if interval_changed {
            stream.next_report = None;
            stream.schedule(now);
        }
    }

    /// The stream ended: the next one opens at once after a response (the returned
    /// `None`), or after the backoff (`Some(delay)`).
    pub(super) fn closed(
        &mut self,
        now: Instant,
        status: &Status,
        rng: &mut impl rand_core::RngCore,
    ) -> Option<Duration> {
        let stream = self.stream.take()?;
        if stream.saw_response {
            tracing::debug!(server = %self.config.server_uri, stream = %stream.id, %status, "LRS stream closed after a response; reopening");
            self.backoff.reset();
            return None;
        }
        let delay = self.backoff.next_delay(rng);
        tracing::warn!(server = %self.config.server_uri, stream = %stream.id, %status, backoff = ?delay, "LRS stream closed before any response");
        self.retry_at = Some(now + delay);
        Some(delay)
    }

    /// The earliest of the next report and the reopening.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let report = self.stream.as_ref().and_then(|s| s.next_report);
        match (report, self.retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the report is due at `now`.
    pub(super) fn report_due(&self, now: Instant) -> bool {
        (self.stream.as_ref()).is_some_and(|s| s.next_report.is_some_and(|at| at <= now))
    }

    /// The clusters the server wants (`None` before its first response).
    pub(super) fn settings(&self) -> Option<&ReportingSettings> {
        self.stream.as_ref()?.settings.as_ref()
    }

    /// The report of `clusters` is due: sent, unless it and the one before counted
    /// nothing (then the next is due one interval later).
    pub(super) fn report(&mut self, now: Instant, clusters: Vec<ClusterReport>) -> Step {
        let Some(stream) = &mut self.stream else {
            return Step::Nothing;
        };
        stream.next_report = None;
        let zero = clusters.iter().all(|c| c.snapshot.is_zero());
        let skip = zero && stream.last_was_zero;
        stream.last_was_zero = zero;
        if skip {
            stream.schedule(now);
            return Step::Nothing;
        }
        tracing::debug!(server = %self.config.server_uri, stream = %stream.id, clusters = clusters.len(), "sending load report");
        stream.send_pending = true;
        Step::Send(Box::new(super::report::load_report(clusters)))
    }
}

impl LrsStream {
    /// Arms the report timer one interval from `now`, when the server has said what
    /// it wants and no request is outstanding.
    fn schedule(&mut self, now: Instant) {
        if self.send_pending || self.next_report.is_some() {
            return;
        }
        if let Some(settings) = &self.settings {
            self.next_report = Some(now + settings.interval);
        }
    }
}
