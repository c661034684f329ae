//! Replays every committed fuzz input through the library function its cargo-fuzz
//! target calls (`xds_proto_tests::sim::fuzz::<target>`): the crashes found so far in
//! `fuzz/regressions/<target>/` and the seed inputs in `fuzz/seeds/<target>/`.
//! Two of them also have a hand-written test below that shows the bug in a few steps.
//!
//! `cargo test -p xds-proto-tests --test fuzz_regressions -- --ignored write_seed_corpus`
//! regenerates the seed inputs from `sim::fuzz::seed_inputs`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use xds_proto_core::Cds;

use xds_proto_tests::sim::fuzz;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 5] = [
    ("interleave", fuzz::interleave),
    ("decode_response", fuzz::decode_response),
    ("bootstrap", fuzz::bootstrap),
    ("lb", fuzz::lb),
    ("rbac", fuzz::rbac),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_none_or(|e| e != "md"))
        .collect();
    files.sort();
    files
}

#[test]
fn committed_fuzz_inputs_replay_cleanly() {
    let mut failures = Vec::new();
    for (target, run) in TARGETS {
        let mut replayed = 0;
        for kind in ["regressions", "seeds"] {
            for path in inputs(&fuzz_dir().join(kind).join(target)) {
                let data = std::fs::read(&path).expect("readable input");
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(&data))) {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    failures.push(format!("{target}: {}: {message}", path.display()));
                }
                replayed += 1;
            }
        }
        assert!(
            replayed > 0,
            "no inputs for fuzz target {target} under {}",
            fuzz_dir().display()
        );
    }
    assert!(
        failures.is_empty(),
        "fuzz inputs that fail:\n{}",
        failures.join("\n")
    );
}

#[test]
#[ignore = "writes fuzz/seeds; run by hand after changing sim::fuzz::seed_inputs"]
fn write_seed_corpus() {
    for (i, (target, data)) in fuzz::seed_inputs().into_iter().enumerate() {
        let dir = fuzz_dir().join("seeds").join(target);
        std::fs::create_dir_all(&dir).expect("seed directory");
        std::fs::write(dir.join(format!("seed-{i:02}")), data).expect("seed written");
    }
}

#[test]
#[ignore = "debugging aid: prints the steps of the interleave input in FUZZ_INPUT"]
fn show_interleave_steps() {
    let path = std::env::var("FUZZ_INPUT").expect("FUZZ_INPUT=path/to/input");
    let (steps, violation) = fuzz::interleave_steps(&std::fs::read(path).expect("readable input"));
    for s in steps {
        println!("{s}");
    }
    println!("{violation:?}");
}

/// Regression, an engine bug found by the `interleave` fuzzer (input in
/// `fuzz/regressions/interleave/crash-69b7…`): a name whose subscribing request was reported sent
/// before the stream connected stays in the stream's "sent before connect" list after
/// its watch is cancelled (and the unsubscribing request is sent). When it is watched
/// again, its new subscribing request still outstanding, and the stream then connects,
/// `mark_connected` starts the does-not-exist timer for the new subscription, which the
/// server has not been sent: A57 says the timer starts only once the subscribing
/// request has been sent. The watcher is told does-not-exist 15 s later although the
/// server never heard of the resource (rule `dne-timer-eligibility`).
/// Fixed by forgetting a name's pending timer starts when it is unsubscribed.
#[test]
fn rewatch_before_connect_does_not_start_the_timer_early() {
    use std::time::Duration;
    use xds_proto_tests::{CDS, Harness, Req};
    let mut h = Harness::new();
    let wx = h.watch::<Cds>("x");
    let s = h.expect_start();
    assert_eq!(
        h.expect_request(s),
        Req::new(CDS, &["x"], "", "").with_node()
    );
    h.watch::<Cds>("y");
    h.sent(s); // taken by the transport before the connection is up
    assert_eq!(h.expect_request(s), Req::new(CDS, &["x", "y"], "", ""));
    h.sent(s);
    h.cancel(wx);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["y"], "", ""));
    h.sent(s); // the server's view is now [y]
    let wx2 = h.watch::<Cds>("x");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["x", "y"], "", "")); // outstanding
    h.started(s);
    h.take();
    h.advance(Duration::from_secs(16));
    let told: Vec<_> = h.take();
    assert!(
        told.iter()
            .all(|a| !matches!(a, xds_proto_core::Action::Notify(n) if n.watcher == wx2)),
        "x's subscribing request was never sent, yet its watcher was told {told:?}"
    );
}

/// Regression, a bug found by the `bootstrap` fuzzer (input in
/// `fuzz/regressions/bootstrap/crash-d696…`): serde_json's default float parser is not
/// correctly rounded, so a `node.metadata` number such as `1.11111111111e48` was read as
/// one f64, printed as `1.1111111111099999e+48`, and read back one ulp away: the
/// metadata the node reports could differ in the last bit from the document's value.
/// Fixed by enabling serde_json's `float_roundtrip` feature for the workspace.
#[test]
fn bootstrap_numbers_round_trip_exactly() {
    let json = r#"{
      "xds_servers": [{"server_uri": "s:443", "channel_creds": [{"type": "insecure"}]}],
      "node": {"id": "n", "metadata": {"f": 1.11111111111e48, "g": 0.1, "h": 5e-324}}
    }"#;
    let parsed = xds_proto_core::Bootstrap::from_json_str(json).expect("parses");
    assert_eq!(parsed.node.metadata["f"].as_f64(), Some(1.11111111111e48));
    let again = xds_proto_core::Bootstrap::from_json_str(
        &xds_proto_tests::sim::bootstrap_json::to_json(&parsed),
    )
    .expect("re-parses");
    assert_eq!(again, parsed);
    assert_eq!(
        again.node.metadata["f"].as_f64().map(f64::to_bits),
        Some(1.11111111111e48f64.to_bits())
    );
}
