//! A fresh process per run: the harness starts this binary again with `--child`, which
//! builds its runtime, makes one timed run against the server and prints its figures
//! on a `RESULT` line. A fresh client pays what an application's first subscription
//! pays (cold allocator, first-touch page faults, threads just started); so does the
//! probe, which runs the same way.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::table::Contender;
use crate::{Args, Run, Workload};

/// Runs `contender` once in a fresh process against the server at `port`, serving
/// `size` clusters; the child's other output (the `XDS_E2E_PHASES` timeline) is passed
/// through.
pub fn run(args: &Args, contender: Contender, port: u16, size: usize) -> Run {
    let exe = std::env::current_exe().expect("this binary's path");
    let mut command = Command::new(exe);
    command.args([
        "--child",
        &contender.child_arg(),
        "--port",
        &port.to_string(),
        "--clusters",
        &size.to_string(),
    ]);
    if args.current_thread {
        command.arg("--current-thread");
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the child starts");
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut result = None;
    for line in stdout.lines() {
        let line = line.expect("the child's output");
        match line.strip_prefix("RESULT ") {
            Some(figures) => result = Some(parse(figures)),
            None => println!("{line}"),
        }
    }
    let status = child.wait().expect("the child ends");
    assert!(status.success(), "the {} child failed", contender.label());
    result.expect("the child's RESULT line")
}

/// The child's side: one timed run, then its figures on a `RESULT` line.
pub fn child(args: &Args, contender: Contender, workload: &Workload) {
    let runtime = args.runtime();
    let run = crate::run_here(&runtime, contender, args.port, workload);
    println!(
        "RESULT {} {} {} {} {}",
        run.elapsed.as_nanos(),
        run.cpu.as_nanos(),
        run.registered.as_nanos(),
        run.responses,
        run.bytes
    );
}

fn parse(figures: &str) -> Run {
    let n: Vec<u64> = figures
        .split(' ')
        .map(|f| f.parse().expect("a number"))
        .collect();
    assert_eq!(n.len(), 5, "RESULT {figures}");
    Run {
        elapsed: Duration::from_nanos(n[0]),
        cpu: Duration::from_nanos(n[1]),
        registered: Duration::from_nanos(n[2]),
        responses: n[3] as usize,
        bytes: n[4] as usize,
    }
}
