//! gRPC-Go's own xDS interop client and server (`interop/grpc-go/build.sh xds-interop`,
//! gRPC-Go from Debian): the cases run against its client beside ours, which checks
//! that the driver asserts what gRPC's binaries do, and its server serves as backends.
//! Without its build a case skips with a message, unless `XDS_INTEROP_REQUIRED` is set
//! (CI sets it), which makes that a failure.

use std::path::PathBuf;
use std::sync::OnceLock;
use xds_test_server::interop_build::{interop_required, run_build_script};

/// The two binaries build.sh prints.
#[derive(Clone, Debug)]
pub struct GrpcGoBinaries {
    pub client: PathBuf,
    pub server: PathBuf,
}

/// Runs `build.sh xds-interop` (a quarter of a second when up to date; a cold run
/// fetches Go and gRPC-Go from Debian) and takes the two paths it prints last.
fn build() -> Result<GrpcGoBinaries, String> {
    let stdout = run_build_script("interop/grpc-go/build.sh", &["xds-interop"])?;
    let mut last = stdout.lines().rev().map(|l| PathBuf::from(l.trim()));
    let (server, client) = (last.next(), last.next());
    match (client, server) {
        (Some(client), Some(server)) if client.is_file() && server.is_file() => {
            Ok(GrpcGoBinaries { client, server })
        }
        _ => Err(format!("build.sh printed no two binaries: {stdout:?}")),
    }
}

/// gRPC-Go's binaries, built once per test binary; `None`: skip `case` (the reason is
/// printed), unless `XDS_INTEROP_REQUIRED` is set, which makes it a failure.
pub fn binaries_or_skip(case: &str) -> Option<GrpcGoBinaries> {
    static BINARIES: OnceLock<Result<GrpcGoBinaries, String>> = OnceLock::new();
    match BINARIES.get_or_init(build) {
        Ok(binaries) => Some(binaries.clone()),
        Err(why) if !interop_required() => {
            eprintln!(
                "SKIPPED {case}, its gRPC-Go part: gRPC-Go's interop binaries are \
                 unavailable ({why}); set XDS_INTEROP_REQUIRED=1 to make this a failure"
            );
            None
        }
        Err(why) => {
            panic!(
                "XDS_INTEROP_REQUIRED is set but gRPC-Go's interop binaries are unavailable: {why}"
            )
        }
    }
}
