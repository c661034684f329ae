//! [`OrcaService`]: the out-of-band `xds.service.orca.v3.OpenRcaService` of A51. A
//! `StreamCoreMetrics` call gets the server's metrics at once, then every interval: the
//! one the request asks for, raised to the service's minimum (also used when the
//! request asks for none), until the client goes away.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tonic::server::{Grpc, NamedService, ServerStreamingService};
use xds_proto_core::orca::{self, OOB_SERVICE, STREAM_CORE_METRICS_PATH};
use xds_proto_core::pb::xds::data::orca::v3::OrcaLoadReport as ReportPb;
use xds_proto_core::pb::xds::service::orca::v3::OrcaLoadReportRequest;

use super::ServerMetricRecorder;
use crate::runtime::{BoxFuture, Runtime};

/// The minimum reporting interval by default (gRPC's).
pub const DEFAULT_MIN_REPORT_INTERVAL: Duration = Duration::from_secs(30);

/// The out-of-band ORCA service of a [`ServerMetricRecorder`], a tower service over
/// HTTP/2 requests with tonic's server codec (it implements `NamedService`, so it can
/// be added to a tonic `Router`). Cheap to clone.
#[derive(Clone, Debug)]
pub struct OrcaService<R> {
    recorder: ServerMetricRecorder,
    min_interval: Duration,
    rt: R,
}

impl<R: Runtime> OrcaService<R> {
    /// Reports `recorder`'s metrics, timing the reports on `rt`, at most every
    /// [`DEFAULT_MIN_REPORT_INTERVAL`].
    pub fn new(recorder: ServerMetricRecorder, rt: R) -> OrcaService<R> {
        OrcaService {
            recorder,
            min_interval: DEFAULT_MIN_REPORT_INTERVAL,
            rt,
        }
    }

    /// Sets the minimum interval between two reports of a call.
    pub fn min_report_interval(mut self, interval: Duration) -> OrcaService<R> {
        self.min_interval = interval;
        self
    }

    /// The interval a call asking for `request` gets.
    pub fn interval_for(&self, request: &OrcaLoadReportRequest) -> Duration {
        orca::requested_interval(request)
            .unwrap_or(self.min_interval)
            .max(self.min_interval)
    }
}

impl<R> NamedService for OrcaService<R> {
    const NAME: &'static str = OOB_SERVICE;
}

impl<R, B> tower_service::Service<http::Request<B>> for OrcaService<R>
where
    R: Runtime,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<tonic::body::Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != STREAM_CORE_METRICS_PATH {
            let path = request.uri().path();
            let status = tonic::Status::unimplemented(format!("no method {path}"));
            return Box::pin(futures::future::ready(Ok(status.into_http())));
        }
        let method = StreamCoreMetrics(self.clone());
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<ReportPb, OrcaLoadReportRequest>::default();
            Ok(Grpc::new(codec).server_streaming(method, request).await)
        })
    }
}

type Reports = Pin<Box<dyn Stream<Item = Result<ReportPb, tonic::Status>> + Send>>;

struct StreamCoreMetrics<R>(OrcaService<R>);

impl<R: Runtime> ServerStreamingService<OrcaLoadReportRequest> for StreamCoreMetrics<R> {
    type Response = ReportPb;
    type ResponseStream = Reports;
    type Future = BoxFuture<Result<tonic::Response<Reports>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<OrcaLoadReportRequest>) -> Self::Future {
        let service = self.0.clone();
        let interval = service.interval_for(request.get_ref());
        let reports = futures::stream::unfold(true, move |first| {
            let service = service.clone();
            async move {
                if !first {
                    service.rt.sleep(interval).await;
                }
                Some((Ok(service.recorder.snapshot().to_proto()), false))
            }
        });
        let reports: Reports = Box::pin(reports);
        Box::pin(futures::future::ready(Ok(tonic::Response::new(reports))))
    }
}
