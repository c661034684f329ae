//! The built `xds` binary refusing a bad server at startup: a server URI the transport
//! cannot dial ends the CLI at once with the bootstrap field that is wrong, rather than
//! a client retrying it forever.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `xds` with `args` and no bootstrap in the environment; kills it (and fails)
/// if it has not exited within 10 seconds. Returns its status code and stderr.
fn run_xds(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xds"))
        .args(args)
        .env_remove("GRPC_XDS_BOOTSTRAP")
        .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xds");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("xds {args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    (status.code(), stderr)
}

#[test]
fn an_http_server_uri_is_a_startup_error_naming_the_field() {
    let (code, stderr) = run_xds(&[
        "--server",
        "http://127.0.0.1:18000",
        "--cds",
        "c",
        "--duration",
        "30",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            r#"xds_servers[0].server_uri: unsupported scheme "http" in "http://127.0.0.1:18000""#
        ),
        "{stderr}"
    );
}

#[test]
fn a_server_uri_with_a_bad_port_is_a_startup_error() {
    let (code, stderr) = run_xds(&["--server", "127.0.0.1:99999", "--cds", "c"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(r#"xds_servers[0].server_uri: invalid port "99999""#),
        "{stderr}"
    );
}

#[test]
fn a_target_naming_an_unknown_authority_is_a_startup_error() {
    let (code, stderr) = run_xds(&[
        "--server",
        "127.0.0.1:18000",
        "--target",
        "xds://nope.example/foo",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(r#"--target xds://nope.example/foo: authority "nope.example" is not in the bootstrap's authorities"#),
        "{stderr}"
    );
}
