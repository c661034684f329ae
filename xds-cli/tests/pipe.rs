//! The built `xds` binary with its stdout read by a reader that goes away, as in
//! `xds | head -2`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The demo prints dozens of lines; after the reader has taken two and closed the
/// pipe, the next line ends the CLI quietly: status 0, no panic message.
#[test]
fn a_reader_that_closes_after_two_lines_ends_the_cli_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xds"))
        .env_remove("GRPC_XDS_BOOTSTRAP")
        .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xds");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    for _ in 0..2 {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("a line");
        assert!(!line.is_empty(), "the demo printed fewer than 2 lines");
    }
    drop(stdout);

    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the CLI kept running with no reader");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(0), "{status}: {stderr}");
}
