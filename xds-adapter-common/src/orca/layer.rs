//! [`OrcaLayer`]: per-call ORCA reports on a server's responses. Each request gets a
//! fresh [`CallMetricRecorder`] in its extensions; when the response ends, the call's
//! metrics over the server's become the `endpoint-load-metrics-bin` trailer (in the
//! headers of a Trailers-Only response). A call for which nothing was recorded, on a
//! server with no metrics set, gets no trailer.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tonic::metadata::{BinaryMetadataValue, MetadataKey, MetadataMap};
use xds_proto_core::orca::{self, OrcaLoadReport};

use super::{CallMetricRecorder, ServerMetricRecorder};
use crate::runtime::BoxFuture;

/// A tower layer adding per-call ORCA load reports to a gRPC server's responses (see
/// the [module documentation](super)).
#[derive(Clone, Debug, Default)]
pub struct OrcaLayer {
    server: Option<ServerMetricRecorder>,
}

impl OrcaLayer {
    /// Reports the server's metrics with each call's, which take precedence.
    pub fn new(server: ServerMetricRecorder) -> OrcaLayer {
        OrcaLayer {
            server: Some(server),
        }
    }

    /// Reports only what each call records.
    pub fn per_call() -> OrcaLayer {
        OrcaLayer::default()
    }
}

impl<S> tower_layer::Layer<S> for OrcaLayer {
    type Service = OrcaMiddleware<S>;

    fn layer(&self, inner: S) -> OrcaMiddleware<S> {
        OrcaMiddleware {
            inner,
            server: self.server.clone(),
        }
    }
}

/// The service [`OrcaLayer`] makes of a service.
#[derive(Clone, Debug)]
pub struct OrcaMiddleware<S> {
    inner: S,
    server: Option<ServerMetricRecorder>,
}

impl<S, B, ResBody> tower_service::Service<http::Request<B>> for OrcaMiddleware<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<OrcaBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let call = CallMetricRecorder::default();
        request.extensions_mut().insert(call.clone());
        let server = self.server.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let (mut parts, body) = response.await?.into_parts();
            let pending = if parts.headers.contains_key("grpc-status") {
                // Trailers-Only: the call is over, and its headers are its trailers.
                if let Some(report) = call.report(server.as_ref()) {
                    parts.headers = with_report(std::mem::take(&mut parts.headers), &report);
                }
                None
            } else {
                Some((call, server))
            };
            Ok(http::Response::from_parts(
                parts,
                OrcaBody {
                    inner: body,
                    pending,
                },
            ))
        })
    }
}

/// `headers` with `report` added as the `endpoint-load-metrics-bin` trailer.
fn with_report(headers: HeaderMap, report: &OrcaLoadReport) -> HeaderMap {
    let mut metadata = MetadataMap::from_headers(headers);
    let value = BinaryMetadataValue::from_bytes(&report.encode_to_vec());
    metadata.insert_bin(MetadataKey::from_static(orca::TRAILER), value);
    metadata.into_headers()
}

/// A response body whose trailers get the call's load report.
#[derive(Debug)]
pub struct OrcaBody<B> {
    inner: B,
    /// Until the trailers pass: the call's recorder and the server's.
    pending: Option<(CallMetricRecorder, Option<ServerMetricRecorder>)>,
}

impl<B> Body for OrcaBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        let Some(Ok(frame)) = frame else {
            return Poll::Ready(frame);
        };
        if !frame.is_trailers() {
            return Poll::Ready(Some(Ok(frame)));
        }
        let report = (self.pending.take()).and_then(|(call, server)| call.report(server.as_ref()));
        let Some(report) = report else {
            return Poll::Ready(Some(Ok(frame)));
        };
        let trailers = frame.into_trailers().unwrap_or_default();
        Poll::Ready(Some(Ok(Frame::trailers(with_report(trailers, &report)))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
