//! The test server's services: TestService (answers with the server's hostname and
//! id, in the response and in a `hostname` header, after the `rpc-behavior` the
//! request carries), XdsUpdateHealthService and the gRPC health service it drives.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tonic::{Request, Response, Status};

use crate::behavior::{Behavior, RPC_BEHAVIOR};
use crate::pb::health::health_check_response::ServingStatus;
use crate::pb::health::health_server::{Health, HealthServer};
use crate::pb::health::{HealthCheckRequest, HealthCheckResponse};
use crate::pb::testing::test_service_server::{TestService, TestServiceServer};
use crate::pb::testing::xds_update_health_service_server::{
    XdsUpdateHealthService, XdsUpdateHealthServiceServer,
};
use crate::pb::testing::{Empty, SimpleRequest, SimpleResponse};
use crate::routes::Routes;

/// Who the server says it is.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Its hostname (the machine's, or `--host_name_override`).
    pub hostname: String,
    /// `--server_id`.
    pub server_id: String,
}

/// TestService.
#[derive(Clone, Debug)]
pub struct TestServer {
    identity: Arc<Identity>,
}

impl TestServer {
    /// A TestService answering as `identity`.
    pub fn new(identity: Identity) -> TestServer {
        TestServer {
            identity: Arc::new(identity),
        }
    }

    /// The service, for [`Routes::with`].
    pub fn service(self) -> TestServiceServer<TestServer> {
        TestServiceServer::new(self)
    }

    /// Plays the request's `rpc-behavior`, then answers `reply` with the hostname
    /// header.
    async fn answer<T, U>(&self, request: &Request<T>, reply: U) -> Result<Response<U>, Status> {
        let metadata = request.metadata();
        let values = metadata
            .get_all(RPC_BEHAVIOR)
            .iter()
            .filter_map(|v| v.to_str().ok());
        let previous = metadata
            .get("grpc-previous-rpc-attempts")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        let behavior = Behavior::parse(values, &self.identity.hostname, previous)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if !behavior.succeed_now {
            if behavior.keep_open {
                futures::future::pending::<()>().await;
            }
            tokio::time::sleep(behavior.sleep).await;
            if let Some(code) = behavior.error_code {
                return Err(self.with_hostname(Status::new(
                    tonic::Code::from_i32(code),
                    "error-code asked by rpc-behavior",
                )));
            }
        }
        let mut response = Response::new(reply);
        if let Ok(value) = self.identity.hostname.parse() {
            response.metadata_mut().insert("hostname", value);
        }
        Ok(response)
    }

    fn with_hostname(&self, status: Status) -> Status {
        let mut metadata = tonic::metadata::MetadataMap::new();
        if let Ok(value) = self.identity.hostname.parse() {
            metadata.insert("hostname", value);
        }
        Status::with_metadata(status.code(), status.message(), metadata)
    }
}

#[tonic::async_trait]
impl TestService for TestServer {
    async fn empty_call(&self, request: Request<Empty>) -> Result<Response<Empty>, Status> {
        self.answer(&request, Empty {}).await
    }

    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let reply = SimpleResponse {
            hostname: self.identity.hostname.clone(),
            server_id: self.identity.server_id.clone(),
            ..Default::default()
        };
        self.answer(&request, reply).await
    }
}

/// Whether the server says it is serving: XdsUpdateHealthService sets it, the health
/// service reports it.
#[derive(Clone, Debug)]
pub struct Serving(Arc<AtomicBool>);

impl Default for Serving {
    fn default() -> Serving {
        Serving(Arc::new(AtomicBool::new(true)))
    }
}

#[tonic::async_trait]
impl XdsUpdateHealthService for Serving {
    async fn set_serving(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        self.0.store(true, Ordering::Relaxed);
        Ok(Response::new(Empty {}))
    }

    async fn set_not_serving(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        self.0.store(false, Ordering::Relaxed);
        Ok(Response::new(Empty {}))
    }
}

#[tonic::async_trait]
impl Health for Serving {
    async fn check(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let status = if self.0.load(Ordering::Relaxed) {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        Ok(Response::new(HealthCheckResponse {
            status: status as i32,
        }))
    }
}

impl Serving {
    /// The maintenance services: XdsUpdateHealthService and health.
    pub fn routes(self, routes: Routes) -> Routes {
        routes
            .with(XdsUpdateHealthServiceServer::new(self.clone()))
            .with(HealthServer::new(self))
    }
}
