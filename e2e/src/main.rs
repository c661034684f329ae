//! End-to-end benchmark: xds-proto's tokio client against go-control-plane, beside a
//! raw ADS probe that only counts what it receives (issue 11 item 22). See README.md.

mod client;
mod probe;
mod server;

use std::path::PathBuf;
use std::time::Duration;

use server::{GoServer, ServerStats};

/// The resources the server holds and both contenders subscribe to.
pub struct Workload {
    pub listener: String,
    pub route: String,
    pub clusters: Vec<String>,
}

impl Workload {
    fn new(clusters: usize) -> Workload {
        Workload {
            // The names interop/go-control-plane/scale/main.go uses.
            listener: "scale.example.com".to_string(),
            route: "scale-route".to_string(),
            clusters: (0..clusters).map(|i| format!("cluster-{i:05}")).collect(),
        }
    }

    /// Every resource: the listener, the route configuration, the clusters and as many
    /// endpoint sets.
    pub fn resource_count(&self) -> usize {
        2 + 2 * self.clusters.len()
    }

    /// Each type's URL and subscribed names, in the order a client learns them.
    pub fn subscriptions(&self) -> Vec<(&'static str, Vec<String>)> {
        vec![
            (
                "type.googleapis.com/envoy.config.listener.v3.Listener",
                vec![self.listener.clone()],
            ),
            (
                "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
                vec![self.route.clone()],
            ),
            (
                "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                self.clusters.clone(),
            ),
            (
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
                self.clusters.clone(),
            ),
        ]
    }
}

/// The CPU time every thread of this process has used so far (Linux; zero elsewhere).
pub fn process_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let nanos: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split(' ').next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

/// One timed run, as its contender saw it.
pub struct Run {
    /// The CPU time the process used meanwhile (all threads).
    pub cpu: Duration,
    pub elapsed: Duration,
    /// How long registering the watches took (the client only).
    pub registered: Duration,
    pub responses: usize,
    pub bytes: usize,
}

struct Args {
    iterations: usize,
    clusters: usize,
    ads: bool,
    server: Option<PathBuf>,
    /// Skip the probe (for profiling the client alone).
    client_only: bool,
    /// Both contenders on tokio's current-thread runtime instead of the 2-worker one.
    current_thread: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        iterations: 7,
        clusters: 10_000,
        ads: false,
        server: None,
        client_only: false,
        current_thread: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--iterations" => args.iterations = value().parse().expect("a number"),
            "--clusters" => args.clusters = value().parse().expect("a number"),
            "--server" => args.server = Some(PathBuf::from(value())),
            "--ads" => args.ads = true,
            "--client-only" => args.client_only = true,
            "--current-thread" => args.current_thread = true,
            other => panic!(
                "unknown flag {other}; flags: --iterations N, --clusters N, --ads, --client-only, --current-thread, --server PATH"
            ),
        }
    }
    args
}

fn main() {
    let args = parse_args();
    let workload = Workload::new(args.clusters);
    let mut server = GoServer::start(args.server, args.clusters, args.ads);
    println!(
        "go-control-plane on 127.0.0.1:{} (ADS mode: {}), {} resources; {} iterations",
        server.port,
        args.ads,
        workload.resource_count(),
        args.iterations
    );
    let mut builder = if args.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = builder.enable_all().build().expect("a tokio runtime");
    // One untimed round of each warms the server's caches and the allocators.
    runtime.block_on(probe::run(server.port, &workload));
    runtime.block_on(client::run(server.port, &workload));
    server.take_stats();

    let (mut probes, mut clients) = (Vec::new(), Vec::new());
    for i in 0..args.iterations {
        if !args.client_only {
            let run = runtime.block_on(probe::run(server.port, &workload));
            report(i, "raw probe", &run, server.take_stats());
            probes.push(run.elapsed);
        }
        let run = runtime.block_on(client::run(server.port, &workload));
        report(i, "tokio client", &run, server.take_stats());
        clients.push(run.elapsed);
    }
    if args.client_only {
        println!("median: tokio client {:.1} ms", ms(median(&mut clients)));
        return;
    }
    let (probe, client) = (median(&mut probes), median(&mut clients));
    println!(
        "median: raw probe {:.1} ms, tokio client {:.1} ms, ratio {:.2}",
        ms(probe),
        ms(client),
        client.as_secs_f64() / probe.as_secs_f64()
    );
}

fn report(i: usize, who: &str, run: &Run, server: ServerStats) {
    println!(
        "run {i} {who:>12}: {:7.1} ms (CPU {:.1} ms; watches registered in {:.1} ms), {} responses, {:.2} MB received \
         (server: {} requests, {} responses, {:.2} MB)",
        ms(run.elapsed),
        ms(run.cpu),
        ms(run.registered),
        run.responses,
        run.bytes as f64 / 1e6,
        server.requests,
        server.responses,
        server.response_bytes as f64 / 1e6,
    );
}

fn median(values: &mut [Duration]) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
