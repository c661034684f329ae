//! The driver's side of the stream tasks: one spawned per `StartStream` (ADS) or
//! `StartLoadReportStream` (LRS), with its tracing span and request channel; requests
//! handed over in order, each ADS request's summary kept until the task reports it
//! sent; the task aborted on `CloseStream`; each ADS report turned into the channel
//! event that tells it (LRS streams are only logged). The connection slots (one per
//! server, which its successive streams, ADS and LRS, share) are kept here too.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use futures::FutureExt;
use futures::channel::mpsc::{self, Sender, UnboundedSender};
use futures::future::{AbortHandle, Abortable};
use tracing::Instrument;
use xds_proto_core::bootstrap::ServerConfig;
use xds_proto_core::pb::envoy::service::load_stats::v3::LoadStatsRequest;
use xds_proto_core::{AdsRequest, DeltaRequest, ServerId, Status, StreamId};

use crate::ads::{Outgoing, Report, StreamKind, StreamTask, TaskMessage};
use crate::events::{ChannelEvent, DeltaSent};
use crate::runtime::Runtime;
use crate::transport::{ChannelSlot, TransportSettings};

/// The `RequestSent` event of a SotW request on `stream`, built as it is queued.
fn sotw_sent(
    server: ServerId,
    server_uri: Arc<str>,
    stream: StreamId,
    request: &AdsRequest,
) -> ChannelEvent {
    ChannelEvent::RequestSent {
        server,
        server_uri,
        stream,
        type_url: request.type_url,
        version: request.version_info.clone(),
        nonce: request.response_nonce.clone(),
        resource_names: request.resource_names.clone(),
        nack: request.error_detail.as_ref().map(|s| s.message.clone()),
        delta: None,
    }
}

/// The `RequestSent` event of a delta request on `stream`, built as it is queued.
fn delta_sent(
    server: ServerId,
    server_uri: Arc<str>,
    stream: StreamId,
    request: &DeltaRequest,
) -> ChannelEvent {
    ChannelEvent::RequestSent {
        server,
        server_uri,
        stream,
        type_url: request.type_url,
        version: String::new(),
        nonce: request.response_nonce.clone(),
        resource_names: request.resource_names_subscribe.iter().cloned().collect(),
        nack: request.error_detail.as_ref().map(|s| s.message.clone()),
        delta: Some(DeltaSent {
            unsubscribe: request.resource_names_unsubscribe.clone(),
            initial_resource_versions: request.initial_resource_versions.len(),
        }),
    }
}

/// Logs what happens to an LRS stream (which tells channel-event subscribers nothing).
fn log_load_report_stream(report: &Report) {
    match report {
        Report::ConnectFailed(reason) => {
            tracing::debug!(reason = %reason, "LRS stream: connection attempt failed")
        }
        Report::Closed(status) => tracing::info!(status = %status, "LRS stream closed"),
        Report::Response(bytes) => tracing::debug!(bytes = bytes.len(), "LRS response received"),
        other => tracing::trace!(report = ?other, "LRS stream"),
    }
}

/// Logs a request's `RequestSent` event as the request is queued or sent (`what`).
fn log_request(event: &ChannelEvent, what: &str) {
    if let ChannelEvent::RequestSent {
        type_url,
        version,
        nonce,
        resource_names,
        nack,
        delta,
        ..
    } = event
    {
        tracing::debug!(
            type_url = %type_url,
            resources = ?resource_names,
            version = %version,
            nonce = %nonce,
            nack = ?nack,
            delta = ?delta,
            "request {what}"
        );
    }
}

struct StreamEntry {
    server: ServerId,
    server_uri: Arc<str>,
    kind: StreamKind,
    requests: UnboundedSender<Outgoing>,
    abort: AbortHandle,
    /// The queued requests' `RequestSent` events, oldest first.
    queued: VecDeque<ChannelEvent>,
    span: tracing::Span,
}

impl StreamEntry {
    /// Hands a request to the task, and keeps its `RequestSent` event for when HTTP/2
    /// takes it.
    fn queue(&mut self, sent: ChannelEvent, request: Outgoing) {
        self.span.in_scope(|| log_request(&sent, "queued"));
        self.queued.push_back(sent);
        let _ = self.requests.unbounded_send(request);
    }
}

/// A stream task's report as [`StreamTasks::event`] turns it.
pub(crate) struct ReportEvent {
    pub(crate) server: ServerId,
    /// What the stream carries.
    pub(crate) kind: StreamKind,
    /// What to tell the channel-event subscribers.
    pub(crate) event: Option<ChannelEvent>,
    /// The stream's span, for what the core does with the report.
    pub(crate) span: tracing::Span,
}

/// The open streams' tasks and the servers' connection slots.
pub(crate) struct StreamTasks<R: Runtime> {
    rt: R,
    settings: Arc<TransportSettings>,
    /// Where the tasks send their reports, and their responses (bounded).
    reports: UnboundedSender<TaskMessage>,
    inbound: Sender<TaskMessage>,
    streams: HashMap<StreamId, StreamEntry>,
    channels: HashMap<ServerId, Arc<ChannelSlot>>,
}

impl<R: Runtime> StreamTasks<R> {
    /// Where the stream tasks report: for tests that play a task.
    #[cfg(test)]
    pub(crate) fn report_sender(&self) -> UnboundedSender<TaskMessage> {
        self.reports.clone()
    }

    pub(crate) fn new(
        rt: R,
        settings: TransportSettings,
        reports: UnboundedSender<TaskMessage>,
        inbound: Sender<TaskMessage>,
    ) -> StreamTasks<R> {
        StreamTasks {
            rt,
            settings: Arc::new(settings),
            reports,
            inbound,
            streams: HashMap::new(),
            channels: HashMap::new(),
        }
    }

    /// Spawns the task of the ADS stream `stream` to `server`; returns the event
    /// announcing it.
    pub(crate) fn start(
        &mut self,
        server: ServerId,
        config: Arc<ServerConfig>,
        stream: StreamId,
    ) -> ChannelEvent {
        let server_uri: Arc<str> = Arc::from(config.server_uri.as_str());
        let span = tracing::info_span!("xds_ads_stream", server = %server_uri, stream = %stream);
        span.in_scope(|| tracing::debug!("opening ADS stream"));
        self.spawn(server, config, stream, StreamKind::Ads, span);
        ChannelEvent::StreamRequested {
            server,
            server_uri,
            stream,
        }
    }

    /// Spawns the task of the LRS stream `stream` to `server`, on the connection its
    /// ADS streams use.
    pub(crate) fn start_load_reporting(
        &mut self,
        server: ServerId,
        config: Arc<ServerConfig>,
        stream: StreamId,
    ) {
        let span =
            tracing::info_span!("xds_lrs_stream", server = %config.server_uri, stream = %stream);
        span.in_scope(|| tracing::debug!("opening LRS stream"));
        self.spawn(server, config, stream, StreamKind::LoadReport, span);
    }

    fn spawn(
        &mut self,
        server: ServerId,
        config: Arc<ServerConfig>,
        stream: StreamId,
        kind: StreamKind,
        span: tracing::Span,
    ) {
        let server_uri: Arc<str> = Arc::from(config.server_uri.as_str());
        let (requests_tx, requests) = mpsc::unbounded();
        let task = StreamTask {
            rt: self.rt.clone(),
            server,
            config,
            stream,
            kind,
            slot: self.channels.entry(server).or_default().clone(),
            settings: self.settings.clone(),
            requests,
            reports: self.reports.clone(),
            inbound: self.inbound.clone(),
        };
        let (abort, registration) = AbortHandle::new_pair();
        let fut = Abortable::new(task.run(), registration)
            .map(|_| ())
            .instrument(span.clone());
        self.rt.spawn(Box::pin(fut));
        let entry = StreamEntry {
            server,
            server_uri,
            kind,
            requests: requests_tx,
            abort,
            queued: VecDeque::new(),
            span,
        };
        self.streams.insert(stream, entry);
    }

    /// Hands a SotW request to its stream's task.
    pub(crate) fn send(&mut self, stream: StreamId, request: Box<AdsRequest>) {
        if let Some(entry) = self.streams.get_mut(&stream) {
            let event = sotw_sent(entry.server, entry.server_uri.clone(), stream, &request);
            entry.queue(event, Outgoing::Sotw(request));
        }
    }

    /// Hands a delta request to its stream's task.
    pub(crate) fn send_delta(&mut self, stream: StreamId, request: Box<DeltaRequest>) {
        if let Some(entry) = self.streams.get_mut(&stream) {
            let event = delta_sent(entry.server, entry.server_uri.clone(), stream, &request);
            entry.queue(event, Outgoing::Delta(request));
        }
    }

    /// Hands a `LoadStatsRequest` to its LRS stream's task.
    pub(crate) fn send_load_report(&mut self, stream: StreamId, request: Box<LoadStatsRequest>) {
        if let Some(entry) = self.streams.get_mut(&stream) {
            let reports = request.cluster_stats.len();
            (entry.span).in_scope(|| tracing::debug!(clusters = reports, "load report queued"));
            let _ = entry.requests.unbounded_send(Outgoing::LoadReport(request));
        }
    }

    /// What `stream` carries, while it is open.
    pub(crate) fn kind(&self, stream: StreamId) -> Option<StreamKind> {
        self.streams.get(&stream).map(|e| e.kind)
    }

    /// Aborts the task of `stream`, which the client closes for `status`; returns the
    /// event telling it, if the stream was open (and an ADS stream).
    pub(crate) fn close(&mut self, stream: StreamId, status: Status) -> Option<ChannelEvent> {
        let entry = self.streams.remove(&stream)?;
        (entry.span).in_scope(|| tracing::debug!(%status, "closing stream"));
        entry.abort.abort();
        if entry.kind == StreamKind::LoadReport {
            return None;
        }
        Some(ChannelEvent::StreamClosed {
            server: entry.server,
            server_uri: entry.server_uri,
            stream,
            status,
            by_client: true,
        })
    }

    /// Forgets `server`'s connection slot: its next stream connects anew.
    pub(crate) fn drop_channel(&mut self, server: ServerId) {
        tracing::debug!(server = %server, "dropping channel");
        self.channels.remove(&server);
    }

    /// What the driver needs to handle `report` of `stream`: the stream's server and
    /// tracing span, and the event telling the report (logged in that span), if there
    /// is one. `None` for a stream the client has closed, whose reports are stale. A
    /// `Closed` report forgets the stream.
    pub(crate) fn event(&mut self, stream: StreamId, report: &Report) -> Option<ReportEvent> {
        let entry = self.streams.get_mut(&stream)?;
        let (server, server_uri, kind) = (entry.server, entry.server_uri.clone(), entry.kind);
        let span = entry.span.clone();
        if kind == StreamKind::LoadReport {
            span.in_scope(|| log_load_report_stream(report));
            if matches!(report, Report::Closed(_)) {
                self.streams.remove(&stream);
            }
            return Some(ReportEvent {
                server,
                kind,
                event: None,
                span,
            });
        }
        let _enter = span.enter();
        let event = match report {
            Report::Connecting => {
                tracing::debug!("connecting");
                Some(ChannelEvent::Connecting { server, server_uri })
            }
            Report::Connected { reused } => {
                tracing::debug!(reused, "connected");
                Some(ChannelEvent::Connected {
                    server,
                    server_uri,
                    reused: *reused,
                })
            }
            Report::ConnectFailed(reason) => {
                tracing::warn!(reason = %reason, "xDS connection attempt failed");
                Some(ChannelEvent::ConnectFailed {
                    server,
                    server_uri,
                    reason: reason.clone(),
                })
            }
            Report::Started => {
                tracing::debug!("ADS stream started");
                Some(ChannelEvent::StreamStarted {
                    server,
                    server_uri,
                    stream,
                })
            }
            // Every request is reported sent once, in order.
            Report::Sent => {
                let event = entry.queued.pop_front();
                event.inspect(|e| log_request(e, "sent"))
            }
            Report::Response(bytes) => {
                tracing::debug!(bytes = bytes.len(), "response received");
                Some(ChannelEvent::ResponseReceived {
                    server,
                    server_uri,
                    stream,
                    bytes: bytes.len(),
                })
            }
            Report::Closed(status) => {
                tracing::info!(status = %status, "ADS stream closed");
                self.streams.remove(&stream);
                Some(ChannelEvent::StreamClosed {
                    server,
                    server_uri,
                    stream,
                    status: status.clone(),
                    by_client: false,
                })
            }
        };
        drop(_enter);
        Some(ReportEvent {
            server,
            kind,
            event,
            span,
        })
    }

    /// Aborts every task and forgets every connection (the client is stopping).
    pub(crate) fn abort_all(&mut self) {
        for (_, entry) in self.streams.drain() {
            entry.abort.abort();
        }
        self.channels.clear();
    }
}
