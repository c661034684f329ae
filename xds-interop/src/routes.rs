//! Several tonic services on one HTTP/2 port, routed by their gRPC service name, as
//! tonic's router would (its `router` feature is not in the workspace): [`Routes`]
//! collects the services and [`Routes::serve`] accepts connections for them.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use hyper::body::Incoming;
use tonic::body::Body;
use tonic::server::NamedService;

type Handler =
    Arc<dyn Fn(http::Request<Incoming>) -> BoxFuture<'static, http::Response<Body>> + Send + Sync>;

/// gRPC services by name. Cheap to clone.
#[derive(Clone, Default)]
pub struct Routes {
    services: Vec<(String, Handler)>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.services.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Routes").field("services", &names).finish()
    }
}

impl Routes {
    /// No services: every RPC is UNIMPLEMENTED.
    pub fn new() -> Routes {
        Routes::default()
    }

    /// Adds `service` (a tonic-generated server, or any service of gRPC requests that
    /// never fails), reached at `/<its name>/<method>`.
    pub fn with<S>(mut self, service: S) -> Routes
    where
        S: NamedService
            + tower_service::Service<
                http::Request<Incoming>,
                Response = http::Response<Body>,
                Error = Infallible,
            > + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        let prefix = format!("/{}/", S::NAME);
        let handler: Handler = Arc::new(move |request| {
            let mut service = service.clone();
            Box::pin(async move {
                match service.call(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            })
        });
        self.services.push((prefix, handler));
        self
    }

    fn route(&self, request: http::Request<Incoming>) -> BoxFuture<'static, http::Response<Body>> {
        let path = request.uri().path();
        match self
            .services
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
        {
            Some((_, handler)) => handler(request),
            None => {
                let status = tonic::Status::unimplemented(format!("no service for {path}"));
                Box::pin(futures::future::ready(status.into_http()))
            }
        }
    }

    /// Serves these services on every connection `listener` accepts, until the
    /// returned future is dropped.
    pub async fn serve(self, listener: tokio::net::TcpListener) {
        loop {
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let routes = self.clone();
            tokio::spawn(async move {
                let result =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(
                            hyper_util::rt::TokioIo::new(tcp),
                            hyper_util::service::TowerToHyperService::new(routes),
                        )
                        .await;
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
            });
        }
    }
}

impl tower_service::Service<http::Request<Incoming>> for Routes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Self::Future {
        let response = self.route(request);
        Box::pin(async move { Ok(response.await) })
    }
}
