//! `xds-interop-client` against gRPC-Go's interop server as backends: plain
//! (`--secure_mode=false`), and as an xDS-enabled server (`--secure_mode=true`, gRFC
//! A36) that fetches its own Listener from the same loopback control plane and serves
//! only once it has it, in plaintext through the fallback of its xDS credentials, or
//! with mTLS from `file_watcher` certificates (gRFC A29, `xds-interop-client
//! --secure_mode=true`): xds-interop-client calls a gRPC-Go xDS server.
//!
//! Only these cases: gRPC-Go's server (1.79) plays `rpc-behavior` on UnaryCall only
//! (EmptyCall ignores it, so circuit_breaking's `keep-open` EmptyCalls would end),
//! sleeps whole seconds only (timeout's scaled-down `sleep-1.2` is refused as
//! INVALID_ARGUMENT), and listens on every IPv4 address (no `--listen_host`).

use crate::lb::{Servers, ping_pong_on, round_robin_on};
use crate::support::ClientBinary;
use crate::support::grpc_go::binaries_or_skip;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_plain() {
    if let Some(go) = binaries_or_skip("ping_pong on gRPC-Go's servers") {
        ping_pong_on(ClientBinary::Ours, Servers::GrpcGo(go.server)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_plain() {
    if let Some(go) = binaries_or_skip("round_robin on gRPC-Go's servers") {
        round_robin_on(ClientBinary::Ours, Servers::GrpcGo(go.server)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_xds_enabled() {
    if let Some(go) = binaries_or_skip("ping_pong on gRPC-Go's xDS servers") {
        ping_pong_on(ClientBinary::Ours, Servers::GrpcGoXds(go.server)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_xds_enabled() {
    if let Some(go) = binaries_or_skip("round_robin on gRPC-Go's xDS servers") {
        round_robin_on(ClientBinary::Ours, Servers::GrpcGoXds(go.server)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_xds_enabled_mtls() {
    if let Some(go) = binaries_or_skip("ping_pong on gRPC-Go's xDS servers with mTLS") {
        ping_pong_on(ClientBinary::Ours, Servers::GrpcGoXdsMtls(go.server)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_xds_enabled_mtls() {
    if let Some(go) = binaries_or_skip("round_robin on gRPC-Go's xDS servers with mTLS") {
        round_robin_on(ClientBinary::Ours, Servers::GrpcGoXdsMtls(go.server)).await;
    }
}
