//! The recorders and the layer without a network: what a handler records ends up in
//! the response's trailer, over the server's metrics, and only then.

use std::convert::Infallible;
use std::time::Duration;

use futures::FutureExt;
use http_body_util::BodyExt;
use tower_layer::Layer;
use tower_service::Service;
use xds_proto_core::orca::{self, OrcaLoadReport};
use xds_proto_core::pb::xds::service::orca::v3::OrcaLoadReportRequest;

use super::*;

/// A handler answering with a data frame and OK trailers (or, with `trailers_only`,
/// a Trailers-Only response), after `record` ran on the call's recorder.
#[derive(Clone)]
struct Handler {
    trailers_only: bool,
    record: fn(&CallMetricRecorder),
}

impl Service<http::Request<()>> for Handler {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = futures::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<()>) -> Self::Future {
        if let Some(call) = request.extensions().get::<CallMetricRecorder>() {
            (self.record)(call);
        }
        if self.trailers_only {
            return futures::future::ready(Ok(tonic::Status::unavailable("busy").into_http()));
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let frames = vec![
            Ok::<_, tonic::Status>(http_body::Frame::data(bytes::Bytes::from_static(b"reply"))),
            Ok(http_body::Frame::trailers(trailers)),
        ];
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(futures::stream::iter(
            frames,
        )));
        futures::future::ready(Ok(http::Response::new(body)))
    }
}

/// The report a response carries (in its trailers, or its headers when Trailers-Only).
fn served(layer: OrcaLayer, handler: Handler) -> Option<OrcaLoadReport> {
    let mut service = layer.layer(handler);
    let response = service.call(http::Request::new(())).now_or_never()?.ok()?;
    let (parts, body) = response.into_parts();
    let collected = body.collect().now_or_never()?.ok()?;
    let headers = collected.trailers().cloned().unwrap_or(parts.headers);
    let value = headers.get(orca::TRAILER)?;
    let metadata = tonic::metadata::MetadataMap::from_headers({
        let mut one = http::HeaderMap::new();
        one.insert(orca::TRAILER, value.clone());
        one
    });
    let bytes = metadata.get_bin(orca::TRAILER)?.to_bytes().ok()?;
    Some(OrcaLoadReport::decode(&bytes).expect("a valid report"))
}

#[test]
fn the_call_report_goes_over_the_servers_metrics() {
    let server = ServerMetricRecorder::new();
    server.set_cpu_utilization(0.4);
    server.set_qps(100.0);
    server.set_named_utilization("disk", 0.5);
    let handler = Handler {
        trailers_only: false,
        record: |call| {
            call.record_qps(250.0)
                .record_eps(0.0)
                .record_named_metric("queue", 3.0)
                .record_request_cost("db", 2.0)
                .record_utilization("disk", 0.75);
        },
    };
    let report = served(OrcaLayer::new(server.clone()), handler).expect("a report");
    assert_eq!(report.cpu_utilization, 0.4, "the server's");
    assert_eq!(report.qps, 250.0, "the call's wins");
    assert_eq!(report.utilization["disk"], 0.75, "the call's wins");
    assert_eq!(report.named_metrics["queue"], 3.0);
    assert_eq!(report.request_cost["db"], 2.0);
    // A recorded 0 overrides too.
    let handler = Handler {
        trailers_only: false,
        record: |call| {
            call.record_cpu_utilization(0.0);
        },
    };
    let report = served(OrcaLayer::new(server), handler).expect("a report");
    assert_eq!((report.cpu_utilization, report.qps), (0.0, 100.0));
}

#[test]
fn a_trailers_only_response_carries_the_report_in_its_headers() {
    let handler = Handler {
        trailers_only: true,
        record: |call| {
            call.record_application_utilization(0.8);
        },
    };
    let report = served(OrcaLayer::per_call(), handler).expect("a report");
    assert_eq!(report.application_utilization, 0.8);
}

#[test]
fn nothing_recorded_means_no_trailer() {
    let handler = Handler {
        trailers_only: false,
        record: |_| {},
    };
    assert_eq!(served(OrcaLayer::per_call(), handler.clone()), None);
    assert_eq!(
        served(OrcaLayer::new(ServerMetricRecorder::new()), handler),
        None
    );
}

#[test]
fn values_out_of_range_are_ignored() {
    let server = ServerMetricRecorder::new();
    server.set_cpu_utilization(f64::NAN);
    server.set_mem_utilization(1.5);
    server.set_qps(-1.0);
    server.set_eps(f64::INFINITY);
    server.set_named_utilization("disk", 2.0);
    assert_eq!(server.snapshot(), OrcaLoadReport::default());
    server.set_mem_utilization(0.5);
    server.set_application_utilization(3.0);
    assert_eq!(server.snapshot().mem_utilization, 0.5);
    assert_eq!(server.snapshot().application_utilization, 3.0);
    server.clear_application_utilization();
    assert_eq!(server.snapshot().application_utilization, 0.0);
    let call = CallMetricRecorder::default();
    call.record_named_metric("nan", f64::NAN)
        .record_utilization("over", 1.1)
        .record_qps(f64::NEG_INFINITY);
    assert_eq!(call.report(None), None);
}

#[test]
fn the_service_never_reports_more_often_than_its_minimum() {
    #[derive(Clone)]
    struct NoRuntime;
    impl crate::runtime::Runtime for NoRuntime {
        type TcpStream = futures::io::Cursor<Vec<u8>>;
        fn current() -> Result<Self, String> {
            Ok(NoRuntime)
        }
        fn spawn(&self, _: crate::runtime::BoxFuture<()>) {}
        fn now(&self) -> xds_proto_core::Instant {
            xds_proto_core::Instant::ZERO
        }
        fn sleep(&self, _: Duration) -> crate::runtime::BoxFuture<()> {
            Box::pin(futures::future::pending())
        }
        fn connect_tcp(
            &self,
            _: &str,
            _: u16,
        ) -> crate::runtime::BoxFuture<std::io::Result<Self::TcpStream>> {
            Box::pin(futures::future::pending())
        }
    }
    let service = OrcaService::new(ServerMetricRecorder::new(), NoRuntime)
        .min_report_interval(Duration::from_secs(5));
    let asking = |d: Duration| orca::oob_request(d);
    assert_eq!(
        service.interval_for(&asking(Duration::from_secs(1))),
        Duration::from_secs(5)
    );
    assert_eq!(
        service.interval_for(&asking(Duration::from_secs(9))),
        Duration::from_secs(9)
    );
    assert_eq!(
        service.interval_for(&OrcaLoadReportRequest::default()),
        Duration::from_secs(5),
        "none asked: the minimum"
    );
    let default = OrcaService::new(ServerMetricRecorder::new(), NoRuntime);
    assert_eq!(
        default.interval_for(&asking(Duration::from_secs(1))),
        DEFAULT_MIN_REPORT_INTERVAL
    );
}
