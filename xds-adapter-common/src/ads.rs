//! One stream to an xDS server: the codec (the core's `AdsRequest`, `DeltaRequest` or
//! `LoadStatsRequest` out, raw bytes in), the request stream that reports when HTTP/2
//! takes each request, and the task that runs the stream (`StreamAggregatedResources`,
//! `DeltaAggregatedResources` for a delta server, or LRS's `StreamLoadStats`) and
//! reports what happens to it.

use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures::channel::mpsc::{Sender, UnboundedReceiver, UnboundedSender};
use futures::future::{self, Either};
use futures::{SinkExt, Stream};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use xds_proto_core::bootstrap::ServerConfig;
use xds_proto_core::pb::envoy::service::load_stats::v3::LoadStatsRequest;
use xds_proto_core::{AdsRequest, DeltaRequest};
use xds_proto_core::{Code, ServerId, Status, StreamId};

use crate::frames::ConnectionState;
use crate::runtime::Runtime;
use crate::transport::{ChannelSlot, Connection, H2Service, TransportSettings};

/// What a stream task tells the driver.
#[derive(Debug)]
pub(crate) enum Report {
    /// A connection attempt began (no usable connection was open).
    Connecting,
    /// The connection is established (`reused`: an open one was taken).
    Connected { reused: bool },
    /// The connection attempt failed.
    ConnectFailed(String),
    /// HTTP/2 began pulling the request stream: the stream is dispatched.
    Started,
    /// HTTP/2 took the oldest queued request.
    Sent,
    /// A response arrived.
    Response(Bytes),
    /// The stream ended.
    Closed(Status),
}

/// A message from a stream task or a connection task to the driver.
#[derive(Debug)]
pub(crate) enum TaskMessage {
    /// About one stream.
    Stream { stream: StreamId, report: Report },
    /// A server's connection ended.
    ConnectionClosed {
        server: ServerId,
        server_uri: Arc<str>,
        error: Option<String>,
    },
}

/// A request of either ADS variant or of LRS, as the core emitted it.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// On a SotW stream.
    Sotw(Box<AdsRequest>),
    /// On a delta stream.
    Delta(Box<DeltaRequest>),
    /// On an LRS stream.
    LoadReport(Box<LoadStatsRequest>),
}

/// What a stream carries: ADS (SotW or delta, as the server's config says) or LRS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamKind {
    Ads,
    LoadReport,
}

/// Encodes the core's requests; hands responses (`DiscoveryResponse` or
/// `DeltaDiscoveryResponse`) over undecoded.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AdsCodec;

impl Codec for AdsCodec {
    type Encode = Outgoing;
    type Decode = Bytes;
    type Encoder = AdsCodec;
    type Decoder = AdsCodec;

    fn encoder(&mut self) -> AdsCodec {
        AdsCodec
    }

    fn decoder(&mut self) -> AdsCodec {
        AdsCodec
    }
}

impl Encoder for AdsCodec {
    type Item = Outgoing;
    type Error = tonic::Status;

    fn encode(&mut self, item: Outgoing, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        match item {
            Outgoing::Sotw(request) => {
                dst.reserve(request.encoded_len());
                request.encode(dst);
            }
            Outgoing::Delta(request) => {
                dst.reserve(request.encoded_len());
                request.encode(dst);
            }
            Outgoing::LoadReport(request) => {
                dst.reserve(prost::Message::encoded_len(&*request));
                prost::Message::encode_raw(&*request, dst);
            }
        }
        Ok(())
    }
}

impl Decoder for AdsCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The request side of the stream: yields the driver's queued requests to tonic, and
/// reports `Started` at the first poll and `Sent` for every request taken.
struct RequestStream {
    requests: UnboundedReceiver<Outgoing>,
    reports: UnboundedSender<TaskMessage>,
    stream: StreamId,
    started: bool,
}

impl RequestStream {
    fn report(&self, report: Report) {
        let _ = self.reports.unbounded_send(TaskMessage::Stream {
            stream: self.stream,
            report,
        });
    }
}

impl Stream for RequestStream {
    type Item = Outgoing;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Outgoing>> {
        if !self.started {
            self.started = true;
            self.report(Report::Started);
        }
        match Pin::new(&mut self.requests).poll_next(cx) {
            Poll::Ready(Some(request)) => {
                self.report(Report::Sent);
                Poll::Ready(Some(request))
            }
            other => other,
        }
    }
}

/// Converts a tonic status into the core's, keeping the causes' text. A status tonic
/// made from a failed HTTP/2 connection (code UNKNOWN with a hyper cause) is
/// UNAVAILABLE, as gRPC reports a broken transport.
pub(crate) fn core_status(status: &tonic::Status) -> Status {
    let mut message = status.message().to_string();
    let mut code = Code(i32::from(status.code()));
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        if code == Code::UNKNOWN && cause.is::<hyper::Error>() {
            code = Code::UNAVAILABLE;
        }
        let text = cause.to_string();
        if !message.contains(&text) {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&text);
        }
        source = cause.source();
    }
    Status::new(code, message)
}

/// The status of a stream that ended with an error. When the transport broke it (not
/// a status from the server), the error that ended the connection is added.
async fn broken_stream_status<R: Runtime>(
    rt: &R,
    status: &tonic::Status,
    connection: &ConnectionState,
) -> Status {
    let mut out = core_status(status);
    if std::error::Error::source(status).is_none() {
        return out;
    }
    let end = pin!(connection.end());
    let ended = future::select(end, rt.sleep(CONNECTION_END_WAIT)).await;
    if let Either::Left((Some(error), _)) = ended
        && !out.message.contains(&error)
    {
        out.message = format!("{}; the connection ended: {error}", out.message);
    }
    out
}

/// Everything one stream task needs.
pub(crate) struct StreamTask<R> {
    pub(crate) rt: R,
    pub(crate) server: ServerId,
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) stream: StreamId,
    pub(crate) kind: StreamKind,
    pub(crate) slot: Arc<ChannelSlot>,
    pub(crate) settings: Arc<TransportSettings>,
    pub(crate) requests: UnboundedReceiver<Outgoing>,
    /// Every report but the inbound ones: few and small, never held back.
    pub(crate) reports: UnboundedSender<TaskMessage>,
    /// Responses, and the end of the stream after them: bounded, so that the task
    /// reads the stream only as fast as the driver takes them, and HTTP/2 flow control
    /// slows the server down instead of the client buffering without limit.
    pub(crate) inbound: Sender<TaskMessage>,
}

/// How long a stream broken by its transport waits for the connection's end, whose
/// error says why (a keepalive timeout, say, where the stream only sees a broken pipe).
/// The connection ends at the same moment in practice (microseconds later); the bound
/// only matters for a transport error that leaves the connection up (a stream reset),
/// whose report it delays.
const CONNECTION_END_WAIT: Duration = Duration::from_secs(1);

impl<R: Runtime> StreamTask<R> {
    fn report(&self, report: Report) {
        let _ = self.reports.unbounded_send(TaskMessage::Stream {
            stream: self.stream,
            report,
        });
    }

    /// Connects (or reuses the server's connection), runs the stream, and reports
    /// until it ends.
    pub(crate) async fn run(mut self) {
        let Some(conn) = self.connect().await else {
            return;
        };
        let connection = conn.state();
        let Some(mut grpc) = self.ready(conn).await else {
            return;
        };
        let method = match self.kind {
            StreamKind::LoadReport => crate::LRS_METHOD,
            StreamKind::Ads if self.config.is_delta() => crate::DELTA_ADS_METHOD,
            StreamKind::Ads => crate::ADS_METHOD,
        };
        let body = RequestStream {
            requests: self.requests,
            reports: self.reports.clone(),
            stream: self.stream,
            started: false,
        };
        let path = http::uri::PathAndQuery::from_static(method);
        let response = grpc
            .streaming(tonic::Request::new(body), path, AdsCodec)
            .await;
        let mut inbound = match response {
            Ok(response) => response.into_inner(),
            Err(status) => {
                let _ = self.reports.unbounded_send(TaskMessage::Stream {
                    stream: self.stream,
                    report: Report::Closed(core_status(&status)),
                });
                return;
            }
        };
        loop {
            let report = match inbound.message().await {
                Ok(Some(bytes)) => Report::Response(bytes),
                Ok(None) => Report::Closed(Status::new(Code::OK, "the server ended the stream")),
                Err(status) => {
                    Report::Closed(broken_stream_status(&self.rt, &status, &connection).await)
                }
            };
            let last = matches!(report, Report::Closed(_));
            let message = TaskMessage::Stream {
                stream: self.stream,
                report,
            };
            // Waits for room: meanwhile the next response stays unread in HTTP/2.
            if self.inbound.send(message).await.is_err() || last {
                return;
            }
        }
    }

    /// The server's connection, reused or new (reported either way); `None` when
    /// connecting failed, which is reported with the stream's close.
    async fn connect(&self) -> Option<Connection> {
        let server_uri: Arc<str> = Arc::from(self.config.server_uri.as_str());
        let on_closed = {
            let reports = self.reports.clone();
            let server = self.server;
            move |error| {
                let _ = reports.unbounded_send(TaskMessage::ConnectionClosed {
                    server,
                    server_uri,
                    error,
                });
            }
        };
        let attempt = self.slot.get_or_connect(
            &self.rt,
            &self.config,
            &self.settings,
            || self.report(Report::Connecting),
            on_closed,
        );
        match attempt.await {
            Ok((conn, fresh)) => {
                self.report(Report::Connected { reused: !fresh });
                Some(conn)
            }
            Err(reason) => {
                self.report(Report::ConnectFailed(reason.clone()));
                self.report(Report::Closed(Status::new(Code::UNAVAILABLE, reason)));
                None
            }
        }
    }

    /// A gRPC client on `conn` that is ready for the stream; `None` (the stream's
    /// close reported) when the connection cannot take it.
    async fn ready(&self, conn: Connection) -> Option<tonic::client::Grpc<H2Service>> {
        let mut grpc = tonic::client::Grpc::with_origin(H2Service(conn.send), conn.origin)
            .max_decoding_message_size(self.settings.max_receive_message_size)
            .max_encoding_message_size(usize::MAX);
        if let Err(e) = grpc.ready().await {
            let reason = format!(
                "connection not usable: {}",
                crate::transport::error_chain(&e)
            );
            self.report(Report::Closed(Status::new(Code::UNAVAILABLE, reason)));
            return None;
        }
        Some(grpc)
    }
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;
    use futures::{FutureExt, StreamExt};

    use super::*;

    fn request(type_url: &'static str) -> Outgoing {
        Outgoing::Sotw(Box::new(AdsRequest {
            version_info: String::new(),
            node: None,
            resource_names: Arc::from([]),
            type_url,
            response_nonce: String::new(),
            error_detail: None,
        }))
    }

    fn type_url_of(request: &Outgoing) -> &'static str {
        match request {
            Outgoing::Sotw(r) => r.type_url,
            Outgoing::Delta(r) => r.type_url,
            Outgoing::LoadReport(_) => "lrs",
        }
    }

    fn reports(rx: &mut UnboundedReceiver<TaskMessage>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(TaskMessage::Stream { report, .. }) = rx.try_recv() {
            out.push(format!("{report:?}"));
        }
        out
    }

    #[test]
    fn requests_count_as_sent_only_when_the_transport_pulls_them() {
        let (queue, requests) = mpsc::unbounded();
        let (reports_tx, mut reports_rx) = mpsc::unbounded();
        let mut body = RequestStream {
            requests,
            reports: reports_tx,
            stream: StreamId::from_raw(7),
            started: false,
        };
        queue.unbounded_send(request("a")).unwrap();
        queue.unbounded_send(request("b")).unwrap();
        assert!(reports(&mut reports_rx).is_empty(), "queued is not sent");

        let first = body
            .next()
            .now_or_never()
            .flatten()
            .expect("the first request");
        assert_eq!(type_url_of(&first), "a");
        assert_eq!(reports(&mut reports_rx), vec!["Started", "Sent"]);

        let second = body
            .next()
            .now_or_never()
            .flatten()
            .expect("the second request");
        assert_eq!(type_url_of(&second), "b");
        assert_eq!(reports(&mut reports_rx), vec!["Sent"]);

        assert!(
            body.next().now_or_never().is_none(),
            "nothing queued: pending"
        );
        assert!(reports(&mut reports_rx).is_empty());
    }

    #[test]
    fn the_first_poll_reports_the_stream_started_even_with_nothing_queued() {
        let (_queue, requests) = mpsc::unbounded::<Outgoing>();
        let (reports_tx, mut reports_rx) = mpsc::unbounded();
        let mut body = RequestStream {
            requests,
            reports: reports_tx,
            stream: StreamId::from_raw(1),
            started: false,
        };
        assert!(body.next().now_or_never().is_none());
        assert_eq!(reports(&mut reports_rx), vec!["Started"]);
        assert!(body.next().now_or_never().is_none());
        assert!(
            reports(&mut reports_rx).is_empty(),
            "started is reported once"
        );
    }

    #[test]
    fn statuses_keep_their_code_and_message() {
        let status = tonic::Status::new(tonic::Code::DeadlineExceeded, "slow");
        assert_eq!(
            core_status(&status),
            Status::new(Code::DEADLINE_EXCEEDED, "slow")
        );
        let status = tonic::Status::new(tonic::Code::Unavailable, "max connection age");
        assert_eq!(
            core_status(&status),
            Status::new(Code::UNAVAILABLE, "max connection age")
        );
    }
}
