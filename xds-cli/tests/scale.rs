//! How the CLI's time grows with the number of watched names: `--cds`/`--eds` pairs
//! for 1,000 / 5,000 / 10,000 clusters against a loopback server, timed from the
//! start to the last update printed. Run with
//! `cargo test -p xds-cli --test scale -- --ignored --nocapture`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xds_adapter_tokio::xds_proto_core::resource::type_url::{
    CLUSTER as CDS, CLUSTER_LOAD_ASSIGNMENT as EDS,
};
use xds_test_server::LoopbackServer;
use xds_test_server::resources::{cluster, endpoints};

/// The time until the CLI has printed every cluster and every endpoint assignment of
/// `count` names, and how many requests the server received by then.
fn time_to_all_updates(count: usize) -> (Duration, u64) {
    let server = LoopbackServer::start();
    server.record_requests(false);
    let names: Vec<String> = (0..count).map(|i| format!("c-{i}")).collect();
    server.set_resources(CDS, "1", names.iter().map(|n| cluster(n)).collect());
    let eds = names.iter().map(|n| endpoints(n, &[8080])).collect();
    server.set_resources(EDS, "1", eds);
    let mut command = Command::new(env!("CARGO_BIN_EXE_xds"));
    command
        .args(["--server", &server.uri(), "--duration", "300"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for name in &names {
        command.args(["--cds", name, "--eds", name]);
    }
    let started = Instant::now();
    let mut child = command.spawn().expect("run xds");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut updates = 0;
    for line in stdout.lines() {
        let line = line.expect("a line");
        if line.contains("] CDS c-") || line.contains("] EDS c-") {
            updates += 1;
            if std::env::var_os("SCALE_TRACE").is_some()
                && (updates == 1 || updates % (count / 2) == 0)
            {
                println!("{updates}: {line}");
            }
            if updates == 2 * count {
                break;
            }
        }
    }
    let elapsed = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(updates, 2 * count, "the CLI printed fewer updates");
    (elapsed, server.stats().requests)
}

#[test]
#[ignore = "a measurement: run it with --ignored --nocapture"]
fn time_grows_linearly_with_the_watched_names() {
    for count in [1_000, 5_000, 10_000] {
        let (elapsed, requests) = time_to_all_updates(count);
        println!(
            "{count:>6} --cds/--eds pairs: every update printed after {:.2} s ({requests} requests)",
            elapsed.as_secs_f64()
        );
    }
}
