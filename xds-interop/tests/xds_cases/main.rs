//! The driver: gRPC's xDS interop test cases (`doc/xds-test-descriptions.md`, and
//! psm-interop's fault injection test) run against `xds-interop-server` backends and
//! `xds-interop-client`, both as processes, on the loopback control plane of
//! `xds-test-server`. Each case starts its own control plane, backends and client on
//! free ports, so the cases run in parallel; they assert what the description asserts
//! through the client's LoadBalancerStatsService, polling it rather than sleeping. The
//! times of the timeout and fault injection cases are scaled down, their order kept.
//! `--nocapture` prints each case's wall time; `XDS_INTEROP_LOGS=1` shows the
//! processes' stderr (with `RUST_LOG` for their traces).

mod binaries;
mod fault;
mod lb;
mod routing;
mod support;
