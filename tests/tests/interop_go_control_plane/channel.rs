//! The data plane through go-control-plane: an `xds:///` channel (tokio adapter)
//! resolves `split.example.com` from the go server's snapshot (`-split`: one route
//! splitting 80/20 over two EDS clusters) and sends 2,000 RPCs to two echo backends
//! on loopback. The server runs in per-request mode, since the channel's client
//! subscribes only to the clusters its routes name.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use xds_adapter_tokio::{ClientPool, XdsChannel};
use xds_test_server::echo::{EchoBackend, call_echo, echo_request};

use super::{NODE_ID, binary_or_skip, bootstrap};

/// Kills the server when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_channel_splits_rpcs_80_20_through_go_control_plane() {
    const RPCS: u32 = 2_000;
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let backends = [EchoBackend::start("split-0"), EchoBackend::start("split-1")];
    let split = format!("80:{},20:{}", backends[0].port(), backends[1].port());
    let mut child = Command::new(&binary)
        .args(["-port", "0", "-node-id", NODE_ID, "-clusters", "1"])
        .args(["-ads=false", "-split", &split])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let stdout = child.stdout.take().expect("the server's stdout");
    let server = Killed(child);
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("READY ").map(str::to_owned))
    });
    let port: u16 = tokio::time::timeout(std::time::Duration::from_secs(30), ready)
        .await
        .expect("READY in time")
        .expect("the reader")
        .expect("a READY line")
        .trim()
        .parse()
        .expect("READY <port>");

    let pool = ClientPool::from_bootstrap_json(&bootstrap(port)).expect("a pool");
    let channel = XdsChannel::builder("xds:///split.example.com")
        .pool(&pool)
        .seed(7)
        .build()
        .expect("a channel");
    let mut first = 0;
    for i in 0..RPCS {
        let request = echo_request(&format!("split {i}"));
        let call = call_echo(channel.clone(), request);
        let reply = tokio::time::timeout(std::time::Duration::from_secs(30), call)
            .await
            .expect("an RPC in time")
            .expect("an RPC through go-control-plane's config");
        if reply.backend == "split-0" {
            first += 1;
        }
    }
    let share = f64::from(first) / f64::from(RPCS);
    println!("go-control-plane split: {first} of {RPCS} RPCs to split-0 ({share:.3})");
    assert!((0.77..=0.83).contains(&share), "split-0 got {share:.3}");
    assert_eq!(backends[0].served() + backends[1].served(), u64::from(RPCS));
    drop(server);
}
