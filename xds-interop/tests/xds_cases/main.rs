//! The driver: gRPC's xDS interop test cases (`doc/xds-test-descriptions.md`, and
//! psm-interop's fault injection test) run against `xds-interop-server` backends and
//! an interop client, both as processes, on the loopback control plane of
//! `xds-test-server`. Each case runs with `xds-interop-client` and, in parallel, with
//! gRPC-Go's own interop client (skipped without its build, see `support/grpc_go.rs`):
//! a case gRPC-Go's client passes asserts what gRPC's binaries do, and ours must pass
//! it too. `grpc_go_server` runs ours against gRPC-Go's interop server as backends,
//! plain and xDS-enabled; `xds_server` runs both clients against ours in secure mode
//! (xDS-enabled, plaintext and mTLS). Each case starts its own control plane, backends
//! and client on free ports, so the cases run in parallel; they assert what the description
//! asserts through the client's LoadBalancerStatsService, polling it rather than
//! sleeping. The times of the timeout and fault injection cases are scaled
//! down, their order kept. `--nocapture` prints each case's wall time;
//! `XDS_INTEROP_LOGS=1` shows the processes' stderr (with `RUST_LOG` for their traces).

mod binaries;
mod fault;
mod grpc_go_server;
mod lb;
mod routing;
mod support;
mod xds_server;

/// A test per case, running it with `xds-interop-client` and gRPC-Go's client in
/// parallel ([`support::both`]).
macro_rules! cases {
    ($($module:ident::$case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                support::both::run_case(stringify!($case), support::both::BOTH, $module::$case)
                    .await;
            }
        )*
    };
}

cases!(
    lb::ping_pong,
    lb::round_robin,
    lb::backends_restart,
    lb::secondary_locality_gets_requests_on_primary_failure,
    lb::change_backend_service,
    lb::traffic_splitting,
    routing::path_matching,
    routing::header_matching,
    routing::circuit_breaking,
    routing::timeout,
    fault::fault_injection,
);
