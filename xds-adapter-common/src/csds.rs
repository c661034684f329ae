//! The CSDS gRPC service, `envoy.service.status.v3.ClientStatusDiscoveryService`, over a
//! [`ClientPool`]: `FetchClientStatus` (unary) and `StreamClientStatus` (one response
//! per request) both answer with [`ClientPool::csds_response`], one `ClientConfig` per
//! client with `client_scope` set to its target.
//!
//! [`CsdsService`] is a plain `tower` service over HTTP/2 requests with tonic's server
//! codec, so it runs under any HTTP/2 server on any runtime: `xds-adapter-tokio` serves
//! it on a TCP listener of its own, and it can be added to a tonic `Router` as is
//! (it implements `NamedService`).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use tonic::codec::Streaming;
use tonic::server::{Grpc, NamedService, StreamingService, UnaryService};
use xds_proto_core::pb::envoy::service::status::v3::{ClientStatusRequest, ClientStatusResponse};

use crate::pool::ClientPool;
use crate::runtime::{BoxFuture, Runtime};

/// The gRPC service name of CSDS.
pub const CSDS_SERVICE_NAME: &str = "envoy.service.status.v3.ClientStatusDiscoveryService";

/// The path of the unary `FetchClientStatus` method.
pub const FETCH_CLIENT_STATUS_METHOD: &str =
    "/envoy.service.status.v3.ClientStatusDiscoveryService/FetchClientStatus";

/// The path of the bidirectional `StreamClientStatus` method.
pub const STREAM_CLIENT_STATUS_METHOD: &str =
    "/envoy.service.status.v3.ClientStatusDiscoveryService/StreamClientStatus";

/// The CSDS service of a [`ClientPool`]. Cheap to clone; see the module documentation.
pub struct CsdsService<R> {
    pool: ClientPool<R>,
}

impl<R> Clone for CsdsService<R> {
    fn clone(&self) -> Self {
        CsdsService {
            pool: self.pool.clone(),
        }
    }
}

impl<R: Runtime> std::fmt::Debug for CsdsService<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsdsService")
            .field("pool", &self.pool)
            .finish()
    }
}

impl<R: Runtime> CsdsService<R> {
    /// The service reporting every client of `pool`.
    pub fn new(pool: ClientPool<R>) -> CsdsService<R> {
        CsdsService { pool }
    }

    /// The pool it reports.
    pub fn pool(&self) -> &ClientPool<R> {
        &self.pool
    }

    /// Answers one request, as both methods do.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when the request carries `node_matchers`: every client of a
    /// pool has the one node of its bootstrap, and filtering by node is not supported
    /// (as in gRPC's own CSDS services).
    pub async fn client_status(
        &self,
        request: &ClientStatusRequest,
    ) -> Result<ClientStatusResponse, tonic::Status> {
        if !request.node_matchers.is_empty() {
            return Err(tonic::Status::invalid_argument(format!(
                "node_matchers are not supported (the request has {})",
                request.node_matchers.len()
            )));
        }
        Ok(self.pool.csds_response().await)
    }
}

impl<R> NamedService for CsdsService<R> {
    const NAME: &'static str = CSDS_SERVICE_NAME;
}

fn grpc() -> Grpc<tonic_prost::ProstCodec<ClientStatusResponse, ClientStatusRequest>> {
    Grpc::new(tonic_prost::ProstCodec::default())
}

impl<R, B> tower_service::Service<http::Request<B>> for CsdsService<R>
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
        let service = self.clone();
        match request.uri().path() {
            FETCH_CLIENT_STATUS_METHOD => {
                Box::pin(async move { Ok(grpc().unary(Fetch(service), request).await) })
            }
            STREAM_CLIENT_STATUS_METHOD => {
                Box::pin(async move { Ok(grpc().streaming(Watch(service), request).await) })
            }
            path => {
                let status = tonic::Status::unimplemented(format!("no method {path}"));
                Box::pin(futures::future::ready(Ok(status.into_http())))
            }
        }
    }
}

/// `FetchClientStatus`.
struct Fetch<R>(CsdsService<R>);

impl<R: Runtime> UnaryService<ClientStatusRequest> for Fetch<R> {
    type Response = ClientStatusResponse;
    type Future = BoxFuture<Result<tonic::Response<ClientStatusResponse>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<ClientStatusRequest>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move {
            service
                .client_status(request.get_ref())
                .await
                .map(tonic::Response::new)
        })
    }
}

/// The responses of a `StreamClientStatus` call.
type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<ClientStatusResponse, tonic::Status>> + Send>>;

/// `StreamClientStatus`: one response per request, until the caller half-closes (OK)
/// or a request is refused (its status ends the call).
struct Watch<R>(CsdsService<R>);

impl<R: Runtime> StreamingService<ClientStatusRequest> for Watch<R> {
    type Response = ClientStatusResponse;
    type ResponseStream = ResponseStream;
    type Future = BoxFuture<Result<tonic::Response<ResponseStream>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Streaming<ClientStatusRequest>>) -> Self::Future {
        let state = (self.0.clone(), request.into_inner(), false);
        let responses =
            futures::stream::unfold(state, |(service, mut inbound, ended)| async move {
                if ended {
                    return None;
                }
                match inbound.message().await {
                    Ok(Some(request)) => {
                        let response = service.client_status(&request).await;
                        let ended = response.is_err();
                        Some((response, (service, inbound, ended)))
                    }
                    Ok(None) => None,
                    Err(status) => Some((Err(status), (service, inbound, true))),
                }
            });
        let responses: ResponseStream = Box::pin(responses);
        Box::pin(futures::future::ready(Ok(tonic::Response::new(responses))))
    }
}
