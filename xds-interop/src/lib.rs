//! gRPC's xDS interop test binaries on xds-proto, and what they share.
//!
//! `xds-interop-server` is gRPC's xDS test server (TestService answering with its
//! hostname and server id, the `rpc-behavior` metadata, XdsUpdateHealthService and the
//! gRPC health service; with `--secure_mode=true` TestService is served by an
//! xDS-enabled server, `XdsServer`, and the maintenance port adds CSDS); `xds-interop-client` is gRPC's xDS test client (RPCs at a
//! constant rate per channel over [`xds_adapter_tokio::XdsChannel`], with
//! LoadBalancerStatsService, XdsUpdateClientConfigureService and CSDS on its stats
//! port). Their flags, services and messages are those of gRPC's
//! `doc/xds-test-descriptions.md` and `grpc/testing/*.proto`, so gRPC's own driver can
//! run them; `tests/` holds a local driver that runs gRPC's xDS test cases against them
//! with the loopback control plane of `xds-test-server`, each case with gRPC-Go's own
//! interop client too, the client against gRPC-Go's interop server, and both clients
//! against the server in secure mode.
//!
//! The parts: [`flags`] (typed flag parsing), [`routes`] (several tonic services on
//! one HTTP/2 port), [`behavior`] (`rpc-behavior`), [`server`] (the server's services),
//! [`stats`] (what the client counts and how it answers for it), [`client`] (the RPC
//! loop and the client's services).

pub mod behavior;
pub mod client;
pub mod flags;
pub mod routes;
pub mod server;
pub mod stats;

/// The generated grpc.testing and grpc.health.v1 messages, clients and servers.
pub mod pb {
    /// `grpc.testing`: the interop services and messages.
    pub mod testing {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("grpc.testing");
    }
    /// `grpc.health.v1`: the health checking protocol.
    pub mod health {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("grpc.health.v1");
    }
}

/// Logs to stderr by `RUST_LOG`, when it is set.
pub fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
}
