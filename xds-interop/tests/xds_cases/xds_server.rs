//! ping_pong and round_robin on `xds-interop-server --secure_mode=true` backends: each
//! an `XdsServer` (gRFC A36) that serves its TestService only once the loopback
//! control plane serves the Listener named after its address, in plaintext, or with
//! mTLS from its filter chain's DownstreamTlsContext and the bootstrap's
//! `file_watcher` certificates (gRFC A29; the clients run with `--secure_mode=true`).
//! Each runs with `xds-interop-client` and gRPC-Go's interop client in parallel
//! ([`run_case`]): the gRPC-Go peer calls an `XdsServer`.

use crate::lb::{Servers, ping_pong_on, rbac_allows_and_denies, round_robin_on};
use crate::support::both::{BOTH, run_case};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_on_xds_servers() {
    run_case("ping_pong on xDS-enabled servers", BOTH, |binary| {
        ping_pong_on(binary, Servers::OursXds)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_on_xds_servers() {
    run_case("round_robin on xDS-enabled servers", BOTH, |binary| {
        round_robin_on(binary, Servers::OursXds)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_on_xds_servers_mtls() {
    run_case(
        "ping_pong on xDS-enabled servers with mTLS",
        BOTH,
        |binary| ping_pong_on(binary, Servers::OursXdsMtls),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_on_xds_servers_mtls() {
    run_case(
        "round_robin on xDS-enabled servers with mTLS",
        BOTH,
        |binary| round_robin_on(binary, Servers::OursXdsMtls),
    )
    .await;
}

/// RBAC (gRFC A41) on the mTLS `XdsServer`s: the policy allows UnaryCall from the
/// client certificate's SPIFFE ID and nothing else; both clients see UnaryCall served
/// and EmptyCall denied with PERMISSION_DENIED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_on_xds_servers_mtls() {
    run_case(
        "RBAC on xDS-enabled servers with mTLS",
        BOTH,
        rbac_allows_and_denies,
    )
    .await;
}
