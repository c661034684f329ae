//! `--delta`: the built `xds` binary speaks delta xDS (`DeltaAggregatedResources`) to
//! the `--server`, and refuses `--delta` with a bootstrap (which says it per server).

use std::process::{Command, Stdio};

use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_test_server::LoopbackServer;
use xds_test_server::resources::cluster_with;

#[test]
fn delta_to_the_given_server() {
    let server = LoopbackServer::start();
    server.set_resources(type_url::CLUSTER, "1", vec![cluster_with("c1", 77)]);
    let uri = server.uri();
    let output = Command::new(env!("CARGO_BIN_EXE_xds"))
        .args([
            "--server",
            &uri,
            "--delta",
            "--cds",
            "c1",
            "--duration",
            "2",
            "-v",
        ])
        .env_remove("GRPC_XDS_BOOTSTRAP")
        .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run xds");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(&format!("{uri} (delta)")), "{stdout}");
    assert!(stdout.contains("max_requests 77"), "{stdout}");
    let requests = server.requests();
    assert!(
        !requests.is_empty() && requests.iter().all(|r| r.delta.is_some()),
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.kind == xds_test_server::RequestKind::Ack),
        "{requests:#?}"
    );
}

#[test]
fn delta_with_a_bootstrap_file_is_a_startup_error() {
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("xds-cli-delta-bootstrap.json");
    let server = LoopbackServer::start();
    std::fs::write(&path, server.bootstrap_json("n", None)).expect("write the bootstrap");
    let path = path.to_str().expect("a UTF-8 path");
    let output = Command::new(env!("CARGO_BIN_EXE_xds"))
        .args([
            "--bootstrap",
            path,
            "--delta",
            "--cds",
            "c",
            "--duration",
            "5",
        ])
        .env_remove("GRPC_XDS_BOOTSTRAP")
        .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run xds");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("AGGREGATED_DELTA_GRPC"), "{stderr}");
    assert_eq!(server.stats().connections, 0, "refused before connecting");
}
