//! The built `xds` binary against a server that accepts TCP and never speaks HTTP/2
//! (a silent `FaultProxy`): it never says "connected", and reports the attempt failed
//! at the connect deadline.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xds_test_server::FaultProxy;

#[test]
fn a_server_that_never_sends_settings_is_never_connected() {
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let proxy = FaultProxy::start(upstream.local_addr().expect("addr"));
    proxy.set_silent(true);
    let uri = proxy.uri();
    let mut child = Command::new(env!("CARGO_BIN_EXE_xds"))
        .args(["--server", &uri, "--cds", "c", "--connect-timeout", "0.4"])
        .args(["--duration", "1.5"])
        .env_remove("GRPC_XDS_BOOTSTRAP")
        .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run xds");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("xds kept running past --duration");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout)
        .expect("stdout");
    assert!(proxy.connections() >= 1, "the CLI dialled the proxy");
    assert!(
        stdout.contains(&format!("CONNECTIVITY LOST: cannot connect to {uri}"))
            && stdout.contains("timed out before receiving SETTINGS frame"),
        "{stdout}"
    );
    assert!(!stdout.contains("connected;"), "{stdout}");
    assert!(!stdout.contains(": connected"), "{stdout}");
}
