//! `xds-compare`: the same end-to-end xDS workload through xds-proto's tokio client
//! and through the `xds-client` crate, side by side.
//!
//! The parent starts xds-proto's loopback ADS server on 127.0.0.1 serving one listener
//! (whose inline route table references every cluster), `--clusters` Istio-like
//! clusters and as many endpoint sets (the testing kit's `resources::mesh`). For each
//! client it then runs itself as a child process (`--child ours|xds-client`), so that
//! each client's peak memory (`VmHWM`) is its own. A child watches the listener, every cluster and every
//! endpoint set, one task per watcher, and reports the time from the first watch until
//! every watcher holds its resource. The clients alternate, run after run, and the
//! parent prints a table: median and minimum time, peak RSS, the RSS of an idle child
//! (connected, holding one cluster), the requests each client sent, and the ratios.
//!
//! ```text
//! cargo run --release --manifest-path compare/Cargo.toml -- [--iterations 5] [--clusters 10000]
//!     [--clients ours,xds-client,xds-client-wildcard] [--timeout 600]
//! ```

mod child;
mod ours;
mod theirs;

use std::process::Command;
use std::time::{Duration, Instant};

use child::{ChildArgs, Mode};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url;
use xds_proto_testing::resources::mesh;
use xds_test_server::{LoopbackServer, ServerStats};

/// The clients compared, by their command-line names.
/// `xds-client-wildcard` is `xds-client` with one wildcard watch per type (CDS, EDS)
/// registered before the named watches: see the README.
const CLIENTS: [&str; 3] = ["ours", "xds-client", "xds-client-wildcard"];

const USAGE: &str = "usage: xds-compare [--iterations N] [--clusters N] \
[--clients ours,xds-client,xds-client-wildcard] [--timeout SECS]";

/// The parent's command line.
struct Args {
    iterations: usize,
    clusters: usize,
    clients: Vec<String>,
    timeout: Duration,
}

fn parse_number(flag: &str, value: Option<String>) -> u64 {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fail(&format!("{flag} needs a number\n{USAGE}")))
}

fn fail(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(2)
}

fn main() {
    let mut argv = std::env::args().skip(1);
    let mut args = Args {
        iterations: 5,
        clusters: 10_000,
        clients: CLIENTS.iter().map(|c| c.to_string()).collect(),
        timeout: Duration::from_secs(600),
    };
    let mut child: Option<String> = None;
    let mut addr: Option<String> = None;
    let mut mode = Mode::Full;
    while let Some(flag) = argv.next() {
        match flag.as_str() {
            "--iterations" => args.iterations = parse_number(&flag, argv.next()) as usize,
            "--clusters" => args.clusters = parse_number(&flag, argv.next()) as usize,
            "--timeout" => args.timeout = Duration::from_secs(parse_number(&flag, argv.next())),
            "--clients" => {
                args.clients = argv
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::to_string)
                    .collect();
                if args.clients.iter().any(|c| !CLIENTS.contains(&c.as_str())) {
                    fail(&format!(
                        "--clients takes a list of ours, xds-client, xds-client-wildcard\n{USAGE}"
                    ));
                }
            }
            // Internal: how the parent runs a child.
            "--child" => child = argv.next(),
            "--addr" => addr = argv.next(),
            "--mode" => {
                mode = argv
                    .next()
                    .and_then(|m| Mode::parse(&m))
                    .unwrap_or_else(|| fail("--mode takes full or idle"))
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            other => fail(&format!("unknown argument {other}\n{USAGE}")),
        }
    }
    match child {
        Some(client) => run_child(
            &client,
            ChildArgs {
                addr: addr.unwrap_or_else(|| fail("--child needs --addr")),
                clusters: args.clusters,
                mode,
                timeout: args.timeout,
            },
        ),
        None => run_parent(&args),
    }
}

/// Runs one client's child on a fresh multi-threaded tokio runtime (one worker per
/// core, tokio's default), then exits.
fn run_child(client: &str, args: ChildArgs) -> ! {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match client {
        "ours" => runtime.block_on(ours::run(args)),
        "xds-client" => runtime.block_on(theirs::run(args, false)),
        "xds-client-wildcard" => runtime.block_on(theirs::run(args, true)),
        other => fail(&format!("unknown client {other}")),
    }
}

/// One child's report.
#[derive(Clone, Debug)]
struct RunResult {
    client: String,
    watchers: usize,
    received: usize,
    failed: usize,
    timed_out: bool,
    elapsed: Duration,
    /// The child's CPU time (user + system), all of its life.
    cpu: Duration,
    hwm_kb: u64,
    rss_kb: u64,
    first_error: String,
    /// What the server saw during the run.
    server: ServerStats,
    /// The parent's (the server's) CPU time during the run.
    server_cpu: Duration,
}

impl RunResult {
    fn ok(&self) -> bool {
        !self.timed_out && self.failed == 0 && self.received == self.watchers
    }
}

fn parse_result(stdout: &str) -> Option<RunResult> {
    let line = stdout.lines().find_map(|l| l.strip_prefix("RESULT "))?;
    let (fields, first_error) = line.split_once(" first_error=")?;
    let field = |key: &str| {
        fields
            .split(' ')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    let number = |key: &str| field(key)?.parse::<u64>().ok();
    Some(RunResult {
        client: field("client")?,
        watchers: number("watchers")? as usize,
        received: number("received")? as usize,
        failed: number("failed")? as usize,
        timed_out: field("timed_out")? == "true",
        elapsed: Duration::from_micros(number("elapsed_us")?),
        cpu: Duration::from_micros(number("cpu_us")?),
        hwm_kb: number("hwm_kb")?,
        rss_kb: number("rss_kb")?,
        first_error: first_error.to_string(),
        server: ServerStats::default(),
        server_cpu: Duration::ZERO,
    })
}

fn stats_delta(after: ServerStats, before: ServerStats) -> ServerStats {
    ServerStats {
        connections: after.connections - before.connections,
        streams: after.streams - before.streams,
        open_streams: after.open_streams,
        requests: after.requests - before.requests,
        acks: after.acks - before.acks,
        nacks: after.nacks - before.nacks,
        responses: after.responses - before.responses,
        responses_taken: after.responses_taken - before.responses_taken,
    }
}

fn run_one(server: &LoopbackServer, args: &Args, client: &str, mode: Mode) -> RunResult {
    let exe = std::env::current_exe().expect("the path of this program");
    let before = server.stats();
    let cpu_before = child::cpu_time();
    let output = Command::new(exe)
        .args([
            "--child",
            client,
            "--addr",
            &server.uri(),
            "--mode",
            mode.as_str(),
        ])
        .args(["--clusters", &args.clusters.to_string()])
        .args(["--timeout", &args.timeout.as_secs().to_string()])
        .output()
        .expect("the child runs");
    // Let the server see the child's stream end before the next run.
    let settle = Instant::now();
    while server.stats().open_streams > 0 && settle.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut result = parse_result(&stdout).unwrap_or_else(|| {
        fail(&format!(
            "the {client} child failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    });
    result.server = stats_delta(server.stats(), before);
    result.server_cpu = child::cpu_time().saturating_sub(cpu_before);
    result
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn median<T: Copy + Ord>(values: &[T]) -> Option<T> {
    let mut v = values.to_vec();
    v.sort();
    v.get(v.len() / 2).copied()
}

fn total_bytes(resources: &[Any]) -> usize {
    resources.iter().map(|r| r.value.len()).sum()
}

fn run_parent(args: &Args) {
    let n = args.clusters;
    let listener = vec![mesh::listener(n)];
    let clusters: Vec<Any> = (0..n).map(mesh::service_cluster).collect();
    let endpoints: Vec<Any> = (0..n).map(mesh::service_endpoints).collect();
    println!(
        "workload: 1 listener ({} virtual hosts inline, {} bytes), {n} clusters ({} bytes each \
         on average), {n} endpoint sets ({} endpoints, {} bytes each on average)",
        n,
        total_bytes(&listener),
        total_bytes(&clusters) / n.max(1),
        mesh::ENDPOINTS_PER_SET,
        total_bytes(&endpoints) / n.max(1),
    );
    println!(
        "{} iterations, clients alternating; {} CPUs; each client in its own child process",
        args.iterations,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let server = LoopbackServer::start();
    // Count requests, but keep none: xds-client resends every subscribed name on each
    // new watch, and keeping its ~20,000 requests would cost the parent gigabytes.
    server.record_requests(false);
    server.set_resources(type_url::LISTENER, "1", listener);
    server.set_resources(type_url::CLUSTER, "1", clusters);
    server.set_resources(type_url::CLUSTER_LOAD_ASSIGNMENT, "1", endpoints);

    let mut full: Vec<RunResult> = Vec::new();
    let mut idle: Vec<RunResult> = Vec::new();
    for iteration in 0..args.iterations {
        // Alternate the order, so that no client always runs first.
        let mut order = args.clients.clone();
        if iteration % 2 == 1 {
            order.reverse();
        }
        for client in &order {
            let base = run_one(&server, args, client, Mode::Idle);
            let run = run_one(&server, args, client, Mode::Full);
            println!(
                "run {}/{} {client:<19} {:>9.3} s  CPU {:>7.3} s  server CPU {:>7.3} s  \
                 peak RSS {:>6.1} MiB  idle RSS {:>4.1} MiB  {}/{} watchers  \
                 {} requests  {} responses{}",
                iteration + 1,
                args.iterations,
                run.elapsed.as_secs_f64(),
                run.cpu.as_secs_f64(),
                run.server_cpu.as_secs_f64(),
                mib(run.hwm_kb),
                mib(base.hwm_kb),
                run.received,
                run.watchers,
                run.server.requests,
                run.server.responses,
                if run.ok() {
                    String::new()
                } else {
                    format!(
                        "  FAILED ({} failed, timed out: {}; first error: {})",
                        run.failed, run.timed_out, run.first_error
                    )
                }
            );
            idle.push(base);
            full.push(run);
        }
    }

    println!();
    println!(
        "{:<19} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "client",
        "ok",
        "median",
        "min",
        "CPU",
        "server CPU",
        "peak RSS",
        "RSS at end",
        "idle RSS",
        "requests",
        "responses"
    );
    let mut summaries: Vec<(String, Summary)> = Vec::new();
    for client in &args.clients {
        let runs: Vec<&RunResult> = full.iter().filter(|r| &r.client == client).collect();
        let ok: Vec<&RunResult> = runs.iter().copied().filter(|r| r.ok()).collect();
        let med = |f: &dyn Fn(&RunResult) -> u64| {
            median(&ok.iter().map(|r| f(r)).collect::<Vec<_>>()).unwrap_or(0)
        };
        let idle_kb = median(
            &idle
                .iter()
                .filter(|r| &r.client == client)
                .map(|r| r.hwm_kb)
                .collect::<Vec<_>>(),
        )
        .unwrap_or(0);
        let Some(min) = ok.iter().map(|r| r.elapsed).min() else {
            println!(
                "{client:<19} {:>5} (no successful run)",
                format!("0/{}", runs.len())
            );
            continue;
        };
        let us = |d: Duration| d.as_micros() as u64;
        let summary = Summary {
            median: Duration::from_micros(med(&|r| us(r.elapsed))),
            min,
            cpu: Duration::from_micros(med(&|r| us(r.cpu))),
            hwm_kb: med(&|r| r.hwm_kb),
            idle_kb,
        };
        println!(
            "{client:<19} {:>5} {:>8.3} s {:>8.3} s {:>8.3} s {:>8.3} s {:>6.1} MiB {:>6.1} MiB \
             {:>6.1} MiB {:>9} {:>9}",
            format!("{}/{}", ok.len(), runs.len()),
            summary.median.as_secs_f64(),
            summary.min.as_secs_f64(),
            summary.cpu.as_secs_f64(),
            Duration::from_micros(med(&|r| us(r.server_cpu))).as_secs_f64(),
            mib(summary.hwm_kb),
            mib(med(&|r| r.rss_kb)),
            mib(idle_kb),
            med(&|r| r.server.requests),
            med(&|r| r.server.responses),
        );
        summaries.push((client.clone(), summary));
    }
    if let Some(((first, x), others)) = summaries.split_first() {
        let ratio = |p: f64, q: f64| if q > 0.0 { p / q } else { f64::NAN };
        if !others.is_empty() {
            println!();
        }
        for (other, y) in others {
            println!(
                "ratio {first}/{other}: median time {:.4}, min time {:.4}, CPU {:.4}, \
                 peak RSS {:.3}, peak RSS above idle {:.3}",
                ratio(x.median.as_secs_f64(), y.median.as_secs_f64()),
                ratio(x.min.as_secs_f64(), y.min.as_secs_f64()),
                ratio(x.cpu.as_secs_f64(), y.cpu.as_secs_f64()),
                ratio(x.hwm_kb as f64, y.hwm_kb as f64),
                ratio(
                    x.hwm_kb.saturating_sub(x.idle_kb) as f64,
                    y.hwm_kb.saturating_sub(y.idle_kb) as f64
                ),
            );
        }
    }
}

/// One client's figures over its successful runs.
struct Summary {
    median: Duration,
    min: Duration,
    cpu: Duration,
    hwm_kb: u64,
    idle_kb: u64,
}
