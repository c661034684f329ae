//! The loopback server's HTTP/2 side: one connection served by hyper, and the gRPC
//! service that routes the two ADS methods (SotW and delta) to their sessions and LRS
//! to its own (`lrs`).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::codec::ServerCodec;
use crate::delta::DeltaSession;
use crate::server::Shared;
use crate::session::{Protocol, StreamHandler};
use crate::sotw::SotwSession;

/// Serves one accepted connection until it ends.
pub(crate) async fn serve_connection<I>(io: I, service: AdsService)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let result = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(
            hyper_util::rt::TokioIo::new(io),
            hyper_util::service::TowerToHyperService::new(service),
        )
        .await;
    if let Err(e) = result {
        tracing::debug!("loopback server: connection ended: {e}");
    }
}

const ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";
const LRS_PATH: &str = "/envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats";

/// The HTTP service: routes the two ADS methods (SotW and delta) and LRS, answers
/// everything else UNIMPLEMENTED.
#[derive(Clone)]
pub(crate) struct AdsService {
    pub(crate) shared: Arc<Shared>,
}

impl tower_service::Service<http::Request<hyper::body::Incoming>> for AdsService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        let shared = self.shared.clone();
        match request.uri().path() {
            ADS_PATH => serve_stream::<SotwSession>(shared, request).boxed(),
            DELTA_ADS_PATH => serve_stream::<DeltaSession>(shared, request).boxed(),
            LRS_PATH => async move { Ok(crate::lrs::serve(shared, request).await) }.boxed(),
            path => {
                let status = tonic::Status::unimplemented(format!("no method {path}"));
                async move { Ok(status.into_http()) }.boxed()
            }
        }
    }
}

async fn serve_stream<P: Protocol>(
    shared: Arc<Shared>,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<tonic::body::Body>, Infallible> {
    let mut grpc = tonic::server::Grpc::new(ServerCodec::<P::Request, P::Response>::default())
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(usize::MAX);
    Ok(grpc
        .streaming(StreamHandler::<P>::new(shared), request)
        .await)
}
