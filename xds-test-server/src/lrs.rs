//! The loopback server's LRS service (`StreamLoadStats`, gRFC A27), on the same port
//! and connections as its ADS service: every request a client sends is recorded (the
//! first of a stream with its node, then the load reports); each stream's first
//! request is answered with the settings the test chose (`send_all_clusters` or
//! cluster names, and the interval), and every stream is told again when they change.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::channel::mpsc;
use tonic::codec::Streaming;
use xds_proto_core::pb::envoy::service::load_stats::v3::{LoadStatsRequest, LoadStatsResponse};
use xds_proto_core::pb::google::protobuf::Duration as PbDuration;

use crate::LoopbackServer;
use crate::codec::{Outbound, ServerCodec};
use crate::server::Shared;

/// What the server asks of the clients' load reporting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReportingSettings {
    /// Report every cluster (`send_all_clusters`), whatever `clusters` says.
    pub send_all_clusters: bool,
    /// The clusters to report, when not all.
    pub clusters: Vec<String>,
    /// `load_reporting_interval`.
    pub interval: Duration,
}

impl Default for LoadReportingSettings {
    /// Every cluster, every 10 s.
    fn default() -> LoadReportingSettings {
        LoadReportingSettings {
            send_all_clusters: true,
            clusters: Vec::new(),
            interval: Duration::from_secs(10),
        }
    }
}

impl LoadReportingSettings {
    fn response(&self) -> LoadStatsResponse {
        LoadStatsResponse {
            clusters: self.clusters.clone(),
            send_all_clusters: self.send_all_clusters,
            load_reporting_interval: Some(PbDuration {
                seconds: self.interval.as_secs() as i64,
                nanos: self.interval.subsec_nanos() as i32,
            }),
            report_endpoint_granularity: false,
        }
    }
}

/// One `LoadStatsRequest` the server received.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedLoadReport {
    /// The LRS stream it came on (numbered from 1 in the order they opened).
    pub stream: u64,
    /// The request: the node on a stream's first, the load reports after.
    pub request: LoadStatsRequest,
}

/// The LRS side of the server's state.
#[derive(Debug, Default)]
pub(crate) struct LrsState {
    settings: LoadReportingSettings,
    /// Bumped on every change of the settings: streams resend them.
    revision: u64,
    reports: Vec<RecordedLoadReport>,
    /// LRS streams opened, and open now.
    opened: u64,
    open: u64,
}

impl LoopbackServer {
    /// Sets what the LRS service asks of the clients (every stream is told at once).
    pub fn set_load_reporting(&self, settings: LoadReportingSettings) {
        {
            let mut lrs = self.shared.lock_lrs();
            lrs.settings = settings;
            lrs.revision += 1;
        }
        self.shared.bump();
    }

    /// Every `LoadStatsRequest` received so far, in order.
    pub fn load_reports(&self) -> Vec<RecordedLoadReport> {
        self.shared.lock_lrs().reports.clone()
    }

    /// LRS streams opened so far, and open now.
    pub fn load_report_streams(&self) -> (u64, u64) {
        let lrs = self.shared.lock_lrs();
        (lrs.opened, lrs.open)
    }

    /// Waits until `done` holds for the `LoadStatsRequest`s received (checked on every
    /// change), and returns what it returned. Runs on any executor; wrap it in a
    /// timeout.
    pub async fn wait_for_load_reports<T>(
        &self,
        mut done: impl FnMut(&[RecordedLoadReport]) -> Option<T>,
    ) -> T {
        let mut changes = self.shared.generation.subscribe();
        loop {
            if let Some(t) = done(&self.shared.lock_lrs().reports) {
                return t;
            }
            if changes.changed().await.is_err() {
                futures::future::pending::<()>().await;
            }
        }
    }
}

type ResponseStream = Pin<
    Box<dyn Stream<Item = Result<Outbound<LoadStatsResponse>, tonic::Status>> + Send + 'static>,
>;

/// Serves one `StreamLoadStats` call.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<tonic::body::Body> {
    let codec = ServerCodec::<LoadStatsRequest, LoadStatsResponse>::default();
    let mut grpc = tonic::server::Grpc::new(codec);
    grpc.streaming(LrsHandler { shared }, request).await
}

/// Starts one LRS stream's task.
struct LrsHandler {
    shared: Arc<Shared>,
}

impl tower_service::Service<tonic::Request<Streaming<LoadStatsRequest>>> for LrsHandler {
    type Response = tonic::Response<ResponseStream>;
    type Error = tonic::Status;
    type Future = futures::future::Ready<Result<Self::Response, tonic::Status>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), tonic::Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<Streaming<LoadStatsRequest>>) -> Self::Future {
        let (tx, rx) = mpsc::unbounded();
        let stream = {
            let mut lrs = self.shared.lock_lrs();
            lrs.opened += 1;
            lrs.open += 1;
            lrs.opened
        };
        self.shared.bump();
        tokio::spawn(run(self.shared.clone(), stream, request.into_inner(), tx));
        futures::future::ready(Ok(tonic::Response::new(Box::pin(rx) as ResponseStream)))
    }
}

/// One stream: records every request; answers the first with the settings, and sends
/// them again whenever the test changes them.
async fn run(
    shared: Arc<Shared>,
    stream: u64,
    mut inbound: Streaming<LoadStatsRequest>,
    tx: mpsc::UnboundedSender<Result<Outbound<LoadStatsResponse>, tonic::Status>>,
) {
    let mut changes = shared.generation.subscribe();
    // The settings revision the client was last told; none before its first request.
    let mut told: Option<u64> = None;
    loop {
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(request)) => {
                    shared.lock_lrs().reports.push(RecordedLoadReport { stream, request });
                    shared.bump();
                    told.get_or_insert(u64::MAX);
                }
                _ => break,
            },
            changed = changes.changed() => {
                if changed.is_err() {
                    break;
                }
            },
        }
        let (revision, response) = {
            let lrs = shared.lock_lrs();
            (lrs.revision, lrs.settings.response())
        };
        if told.is_some_and(|t| t != revision) {
            told = Some(revision);
            let _ = tx.unbounded_send(Ok(Outbound::Response(response)));
        }
    }
    shared.lock_lrs().open -= 1;
    shared.bump();
}
