//! Load reporting (LRS, gRFC A27; A64 named metrics), sans-IO, owned by the
//! `XdsClient` beside its ADS streams.
//!
//! A cluster whose CDS resource says `lrs_server: self` reports its load to the server
//! that sent it, over a second stream (`StreamLoadStats`) on that server's connection.
//! The parts, one owner each:
//! - `stats`: the shared counters of one cluster (per locality: calls issued,
//!   succeeded, failed, in progress, A64 named metrics; drops per category and
//!   uncategorized), which the load balancer counts into on the pick path without a
//!   lock or an allocation;
//! - `store`: every cluster's counters by server, cluster and EDS service name, the
//!   snapshot-and-reset of a report, and when a cluster nobody holds leaves;
//! - `stream`: one server's stream as a state machine (settings, report timer,
//!   A57-style reopening with backoff);
//! - `response` and `report`: the messages, the response read as bounded input;
//! - this module: `LoadReporting`, which routes the client's inputs to them and
//!   opens and closes the streams as clusters come and go.
//!
//! The client's vocabulary is reused: `Action::StartLoadReportStream`,
//! `Action::SendLoadReport` and `Action::CloseStream` out; the stream events of ADS in
//! (`StreamStarted`, `RequestSent`, `ResponseReceived` with the `LoadStatsResponse`,
//! `StreamClosed`).

mod report;
mod response;
mod stats;
mod store;
mod stream;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

pub use report::SEND_ALL_CLUSTERS_FEATURE;
pub use response::{
    DEFAULT_MIN_LOAD_REPORTING_INTERVAL, MAX_LOAD_REPORTING_INTERVAL, MAX_REPORTED_CLUSTER_NAMES,
    ReportingSettings,
};
pub use stats::{
    ClusterLoadStats, ClusterSnapshot, DropCounter, LocalityLoadStats, LocalitySnapshot,
    MAX_NAMED_METRICS, NamedMetric,
};

use self::store::LoadStore;
use self::stream::{LrsServer, Step};
use crate::backoff::BackoffConfig;
use crate::bootstrap::ServerConfig;
use crate::client::{Action, Event, ServerId, StreamId};
use crate::pb::envoy::config::core::v3::Node;
use crate::time::Instant;

/// What the load reporting needs of its client for one input.
pub(crate) struct Ctx<'a, R> {
    pub(crate) actions: &'a mut VecDeque<Action>,
    pub(crate) next_stream: &'a mut u64,
    pub(crate) rng: &'a mut R,
    pub(crate) node: &'a Node,
}

impl<R> Ctx<'_, R> {
    fn new_stream(&mut self) -> StreamId {
        let id = StreamId::from_raw(*self.next_stream);
        *self.next_stream += 1;
        id
    }
}

/// The client's load reporting: the store, and one stream state per LRS server (by
/// the client's server index).
#[derive(Debug)]
pub(crate) struct LoadReporting {
    store: LoadStore,
    servers: Vec<Option<LrsServer>>,
    min_interval: Duration,
    backoff: BackoffConfig,
    /// Servers whose load reporting ended since the client last looked: it drops
    /// their channel if ADS does not use them either.
    released: Vec<usize>,
}

impl LoadReporting {
    pub(crate) fn new(min_interval: Duration, backoff: BackoffConfig) -> LoadReporting {
        LoadReporting {
            store: LoadStore::default(),
            servers: Vec::new(),
            min_interval,
            backoff,
            released: Vec::new(),
        }
    }

    /// The counters of a cluster reporting to `server` (`config`), created with its
    /// interval starting at `now`; the server's stream opens if it is not open.
    pub(crate) fn cluster_stats<R: rand_core::RngCore>(
        &mut self,
        server: usize,
        config: &Arc<ServerConfig>,
        cluster: &str,
        eds_service_name: Option<&str>,
        now: Instant,
        ctx: &mut Ctx<'_, R>,
    ) -> ClusterLoadStats {
        let stats = (self.store).get_or_create(server, cluster, eds_service_name, now);
        if self.servers.len() <= server {
            self.servers.resize_with(server + 1, || None);
        }
        let backoff = self.backoff;
        self.servers[server].get_or_insert_with(|| LrsServer::new(config.clone(), backoff));
        self.ensure_stream(server, ctx);
        stats
    }

    /// Whether `server` has an LRS stream open or waiting to reopen.
    pub(crate) fn uses_server(&self, server: usize) -> bool {
        matches!(self.servers.get(server), Some(Some(s)) if s.in_use())
    }

    /// The server of an LRS stream.
    pub(crate) fn server_of_stream(&self, stream: StreamId) -> Option<usize> {
        (self.servers.iter())
            .position(|s| s.as_ref().and_then(LrsServer::stream_id) == Some(stream))
    }

    /// The servers whose load reporting ended since the last call.
    pub(crate) fn take_released(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.released)
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next run.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        (self.servers.iter().flatten())
            .filter_map(LrsServer::next_deadline)
            .min()
    }

    /// An event of `server`'s LRS stream.
    pub(crate) fn handle_event<R: rand_core::RngCore>(
        &mut self,
        server: usize,
        now: Instant,
        event: Event,
        ctx: &mut Ctx<'_, R>,
    ) {
        let Some(srv) = self.servers.get_mut(server).and_then(Option::as_mut) else {
            return;
        };
        match event {
            Event::StreamStarted { stream } => {
                tracing::debug!(server = %srv.config.server_uri, %stream, "LRS stream connected");
            }
            Event::RequestSent { .. } => {
                srv.request_sent(now);
                self.close_if_unused(server, ctx);
            }
            Event::ResponseReceived { bytes, .. } => {
                match ReportingSettings::decode(bytes, self.min_interval) {
                    Ok(settings) => srv.response(now, settings),
                    // gRPC ignores a response it cannot parse and keeps the stream.
                    Err(e) => tracing::warn!(
                        server = %srv.config.server_uri,
                        error = %e,
                        "LoadStatsResponse could not be decoded; ignored"
                    ),
                }
            }
            Event::StreamClosed { status, .. } => {
                let at_once = srv.closed(now, &status, ctx.rng).is_none();
                if at_once {
                    self.reopen(server, ctx);
                }
            }
            // Connectivity is the ADS stream's concern; this stream's close follows.
            _ => {}
        }
    }

    /// Runs the reports and reopenings due at `now`.
    pub(crate) fn handle_timeout<R: rand_core::RngCore>(
        &mut self,
        now: Instant,
        ctx: &mut Ctx<'_, R>,
    ) {
        for server in 0..self.servers.len() {
            let Some(srv) = &mut self.servers[server] else {
                continue;
            };
            if srv.retry_at.is_some_and(|at| at <= now) {
                srv.retry_at = None;
                self.reopen(server, ctx);
            } else if srv.report_due(now) {
                self.report(server, now, ctx);
            }
        }
    }

    /// Sends `server`'s due report: every cluster is snapshotted and reset, the ones
    /// the server wants are reported.
    fn report<R>(&mut self, server: usize, now: Instant, ctx: &mut Ctx<'_, R>) {
        let Some(srv) = &mut self.servers[server] else {
            return;
        };
        let Some(settings) = srv.settings() else {
            return;
        };
        let clusters = self.store.take_report(server, now, |c| settings.wants(c));
        match srv.report(now, clusters) {
            Step::Send(request) => {
                let stream = srv.stream_id().expect("a report is due on an open stream");
                ctx.actions
                    .push_back(Action::SendLoadReport { stream, request });
            }
            // Without a request in flight, a stream with nothing left to report ends
            // now; otherwise once the transport has taken the last report.
            Step::Nothing => self.close_if_unused(server, ctx),
        }
    }

    /// Opens `server`'s stream again, unless nobody holds its clusters any more.
    fn reopen<R>(&mut self, server: usize, ctx: &mut Ctx<'_, R>) {
        self.store.forget_released(server);
        if self.store.has_clusters(server) {
            self.ensure_stream(server, ctx);
        } else {
            self.released.push(server);
        }
    }

    /// Opens `server`'s stream (and sends the node) when clusters report to it and no
    /// stream is open or waiting to reopen.
    fn ensure_stream<R>(&mut self, server: usize, ctx: &mut Ctx<'_, R>) {
        let Some(srv) = self.servers.get_mut(server).and_then(Option::as_mut) else {
            return;
        };
        if srv.in_use() || !self.store.has_clusters(server) {
            return;
        }
        let stream = ctx.new_stream();
        srv.opened(stream);
        tracing::debug!(server = %srv.config.server_uri, %stream, "LRS stream starting");
        ctx.actions.push_back(Action::StartLoadReportStream {
            server: ServerId::from_raw(server),
            config: srv.config.clone(),
            stream,
        });
        let request = Box::new(report::initial_request(ctx.node));
        ctx.actions
            .push_back(Action::SendLoadReport { stream, request });
    }

    /// Closes `server`'s stream once no cluster reports to it and no request is
    /// outstanding.
    fn close_if_unused<R>(&mut self, server: usize, ctx: &mut Ctx<'_, R>) {
        if self.store.has_clusters(server) {
            return;
        }
        let Some(srv) = self.servers.get_mut(server).and_then(Option::as_mut) else {
            return;
        };
        if srv.send_pending() {
            return;
        }
        if let Some(stream) = srv.stream.take() {
            tracing::debug!(server = %srv.config.server_uri, stream = %stream.id, "no cluster reports load to the server; closing its LRS stream");
            ctx.actions
                .push_back(Action::CloseStream { stream: stream.id });
        }
        srv.retry_at = None;
        self.released.push(server);
    }
}
