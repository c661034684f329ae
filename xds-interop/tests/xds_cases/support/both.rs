//! Running a case with both interop clients at once: `xds-interop-client` and gRPC-Go's
//! own (when its build is there, see [`grpc_go`](super::grpc_go)). A case gRPC-Go's
//! client passes asserts what gRPC's binaries do; ours must pass it too. The two runs
//! are independent processes on their own control planes, in parallel; a failure
//! names the client (or both) that failed.

use std::future::Future;

use super::grpc_go;
use super::processes::ClientBinary;

/// A client a case runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// `xds-interop-client`.
    Ours,
    /// gRPC-Go's interop client.
    GrpcGo,
}

/// Both clients.
pub const BOTH: &[Which] = &[Which::Ours, Which::GrpcGo];

/// Runs `case` with each of `clients` in parallel and waits for all of them; panics
/// naming each client whose run failed, with its message. gRPC-Go's run is skipped
/// (with a message) when its build is unavailable and not required.
pub async fn run_case<F, Fut>(name: &str, clients: &[Which], case: F)
where
    F: Fn(ClientBinary) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut runs = Vec::new();
    for which in clients {
        let binary = match which {
            Which::Ours => ClientBinary::Ours,
            Which::GrpcGo => match grpc_go::binaries_or_skip(name) {
                Some(go) => ClientBinary::GrpcGo(go.client),
                None => continue,
            },
        };
        runs.push((binary.label(), tokio::spawn(case(binary))));
    }
    let mut failures = Vec::new();
    for (label, run) in runs {
        if let Err(error) = run.await {
            let message = match error.try_into_panic() {
                Ok(panic) => panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".to_string()),
                Err(error) => error.to_string(),
            };
            failures.push(format!("with {label}: {message}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{name} failed {}",
        failures.join("; and ")
    );
}
