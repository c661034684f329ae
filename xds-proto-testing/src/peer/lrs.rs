//! The LRS side of the scripted peer: the client's `StartLoadReportStream` and
//! `SendLoadReport` actions, and the server's `LoadStatsResponse`.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::client::{Action, Event, StreamId};
use xds_proto_core::pb::envoy::service::load_stats::v3::{LoadStatsRequest, LoadStatsResponse};

use super::Harness;
use crate::resources::pb_duration;

/// A `LoadStatsResponse`: report every cluster (`clusters` empty) or those named,
/// every `interval`.
pub fn lrs_response(clusters: &[&str], interval: Duration) -> LoadStatsResponse {
    LoadStatsResponse {
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        send_all_clusters: clusters.is_empty(),
        load_reporting_interval: Some(pb_duration(interval)),
        report_endpoint_granularity: false,
    }
}

impl Harness {
    /// The next action must start an LRS stream; returns it.
    pub fn expect_lrs_start(&mut self) -> StreamId {
        match self.next_action() {
            Action::StartLoadReportStream { stream, .. } => stream,
            other => panic!("expected StartLoadReportStream, got {other:?}"),
        }
    }

    /// The next action must be a `LoadStatsRequest` on `stream`; returns it as the
    /// server decodes it from the wire.
    pub fn expect_load_report(&mut self, stream: StreamId) -> LoadStatsRequest {
        match self.next_action() {
            Action::SendLoadReport { stream: s, request } if s == stream => {
                LoadStatsRequest::decode(request.encode_to_vec().as_slice())
                    .expect("the client's LoadStatsRequest decodes")
            }
            other => panic!("expected SendLoadReport on {stream:?}, got {other:?}"),
        }
    }

    /// Opens the LRS stream the client asked for: expects `StartLoadReportStream` and
    /// its first request (the node, no stats), reports the stream started and the
    /// request sent. Returns the stream and that request.
    pub fn connect_lrs(&mut self) -> (StreamId, LoadStatsRequest) {
        let stream = self.expect_lrs_start();
        let first = self.expect_load_report(stream);
        self.started(stream);
        self.sent(stream);
        (stream, first)
    }

    /// Delivers a `LoadStatsResponse` on `stream`.
    pub fn respond_lrs(&mut self, stream: StreamId, response: &LoadStatsResponse) {
        self.event(Event::ResponseReceived {
            stream,
            bytes: Bytes::from(response.encode_to_vec()),
        });
    }
}
