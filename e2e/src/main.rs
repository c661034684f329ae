//! End-to-end benchmark: xds-proto's tokio client against go-control-plane, beside a
//! raw ADS probe that only counts what it receives (issue 11 item 22, issue 24 item
//! 4). See README.md.

mod client;
mod fresh;
mod lone;
mod probe;
mod server;
mod table;

use std::path::PathBuf;
use std::time::Duration;

use client::Registration;
use server::GoServer;
use table::{Cell, Contender, Table};

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

/// Which ADS variant both contenders speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Api {
    /// State of the world (`StreamAggregatedResources`).
    Sotw,
    /// Incremental (`DeltaAggregatedResources`); the client's bootstrap says
    /// `"api_type": "AGGREGATED_DELTA_GRPC"`.
    Delta,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Sotw => "SotW",
            Api::Delta => "delta",
        }
    }

    pub fn parse(s: &str) -> Api {
        match s {
            "sotw" | "SotW" => Api::Sotw,
            "delta" => Api::Delta,
            other => panic!("unknown API {other:?}: sotw or delta"),
        }
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
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// The CPU time the process used meanwhile (all threads).
    pub cpu: Duration,
    pub elapsed: Duration,
    /// How long registering the watches took (the client only).
    pub registered: Duration,
    pub responses: usize,
    pub bytes: usize,
}

pub struct Args {
    iterations: usize,
    sizes: Vec<usize>,
    apis: Vec<Api>,
    registrations: Vec<Registration>,
    /// Each run in a fresh process (this binary, `--child`).
    fresh: bool,
    /// Print the markdown table at the end.
    table: bool,
    ads: bool,
    server: Option<PathBuf>,
    /// Skip the probe (for profiling the client alone).
    client_only: bool,
    /// Also run the decoding probe (`probe.rs`).
    decoder: bool,
    /// Both contenders on tokio's current-thread runtime instead of the 2-worker one.
    current_thread: bool,
    /// `--child probe|client`: one timed run against `--port`, its figures printed.
    child: Option<Contender>,
    port: u16,
    /// `--lone N`: time N lone watches instead (see `lone.rs`).
    lone: Option<usize>,
}

const FLAGS: &str = "flags: --iterations N, --clusters N, --sizes N,N,.., --api sotw|delta|both, \
     --register loop|tasks|both, --fresh, --table, --decoder, --lone N, --ads, --client-only, --current-thread, --server PATH";

fn list<T>(value: &str, one: impl Fn(&str) -> T, both: [&str; 2]) -> Vec<T> {
    if value == "both" {
        return both.into_iter().map(one).collect();
    }
    value.split(',').map(one).collect()
}

fn parse_args() -> Args {
    let mut args = Args {
        iterations: 7,
        sizes: vec![10_000],
        apis: vec![Api::Sotw],
        registrations: vec![Registration::Loop],
        fresh: false,
        table: false,
        ads: false,
        server: None,
        client_only: false,
        decoder: false,
        current_thread: false,
        child: None,
        port: 0,
        lone: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--iterations" => args.iterations = value().parse().expect("a number"),
            "--clusters" => args.sizes = vec![value().parse().expect("a number")],
            "--sizes" => {
                args.sizes = (value().split(','))
                    .map(|n| n.parse().expect("a number"))
                    .collect()
            }
            "--api" => args.apis = list(&value(), Api::parse, ["sotw", "delta"]),
            "--register" => {
                args.registrations = list(&value(), Registration::parse, ["loop", "tasks"])
            }
            "--fresh" => args.fresh = true,
            "--table" => {
                args.fresh = true;
                args.table = true;
                args.sizes = vec![1_000, 5_000, 10_000];
                args.apis = vec![Api::Sotw, Api::Delta];
                args.registrations = vec![Registration::Loop, Registration::Tasks];
                args.decoder = true;
            }
            "--decoder" => args.decoder = true,
            "--server" => args.server = Some(PathBuf::from(value())),
            "--ads" => args.ads = true,
            "--client-only" => args.client_only = true,
            "--current-thread" => args.current_thread = true,
            "--child" => args.child = Some(Contender::parse_child(&value())),
            "--port" => args.port = value().parse().expect("a port"),
            "--lone" => args.lone = Some(value().parse().expect("a number")),
            other => panic!("unknown flag {other}; {FLAGS}"),
        }
    }
    args
}

impl Args {
    pub fn runtime(&self) -> tokio::runtime::Runtime {
        let mut builder = if self.current_thread {
            tokio::runtime::Builder::new_current_thread()
        } else {
            tokio::runtime::Builder::new_multi_thread()
        };
        builder.enable_all().build().expect("a tokio runtime")
    }

    /// The contenders of each round: the probe and, with `--decoder`, the decoding
    /// probe (unless `--client-only`), and the client with each registration, for each
    /// API.
    fn contenders(&self) -> Vec<Contender> {
        let mut out = Vec::new();
        for &api in &self.apis {
            if !self.client_only {
                out.push(Contender::Probe(api));
                if self.decoder {
                    out.push(Contender::Decoder(api));
                }
            }
            for &registration in &self.registrations {
                out.push(Contender::Client(api, registration));
            }
        }
        out
    }
}

/// One timed run of `contender` in this process.
pub fn run_here(
    runtime: &tokio::runtime::Runtime,
    contender: Contender,
    port: u16,
    workload: &Workload,
) -> Run {
    match contender {
        Contender::Probe(api) => {
            runtime.block_on(probe::run(port, workload, api, probe::Decode::Nothing))
        }
        Contender::Decoder(api) => {
            runtime.block_on(probe::run(port, workload, api, probe::Decode::Messages))
        }
        Contender::Client(api, registration) => {
            runtime.block_on(client::run(port, workload, api, registration))
        }
    }
}

fn main() {
    let args = parse_args();
    if let Some(contender) = args.child {
        let workload = Workload::new(args.sizes[0]);
        fresh::child(&args, contender, &workload);
        return;
    }
    if let Some(rounds) = args.lone {
        let workload = Workload::new(args.sizes[0]);
        let server = GoServer::start(args.server.clone(), args.sizes[0], args.ads);
        let runtime = args.runtime();
        for &api in &args.apis {
            lone::run(&runtime, server.port, &workload, api, rounds);
        }
        return;
    }
    let load_before = table::load_average();
    let runtime = (!args.fresh).then(|| args.runtime());
    let contenders = args.contenders();
    let mut table = Table::default();
    for &size in &args.sizes {
        let workload = Workload::new(size);
        let mut server = GoServer::start(args.server.clone(), size, args.ads);
        println!(
            "go-control-plane on 127.0.0.1:{} (ADS mode: {}), {} resources; {} iterations; {}",
            server.port,
            args.ads,
            workload.resource_count(),
            args.iterations,
            if args.fresh {
                "a fresh process per run"
            } else {
                "every run in this process"
            },
        );
        let port = server.port;
        let run = |contender: Contender| match &runtime {
            Some(runtime) => run_here(runtime, contender, port, &workload),
            None => fresh::run(&args, contender, port, size),
        };
        // One untimed run of each warms the server's caches and the allocators (and,
        // with fresh processes, the page cache).
        for &contender in &contenders {
            run(contender);
        }
        server.take_stats();
        for i in 0..args.iterations {
            // The order rotates from round to round, so no contender always follows
            // the same one (the server's garbage collector runs after a large run).
            for k in 0..contenders.len() {
                let contender = contenders[(i + k) % contenders.len()];
                let result = run(contender);
                let stats = server.take_stats();
                report(i, contender, &result, stats);
                table.record(Cell { size, contender }, i, result, stats);
            }
        }
    }
    let load_after = table::load_average();
    print!("{}", table.summary());
    let probes = usize::from(!args.client_only) * (1 + usize::from(args.decoder));
    if args.table || table.cells() > 1 + probes {
        println!();
        print!(
            "{}",
            table.markdown(&args, load_before.as_deref(), load_after.as_deref())
        );
    }
}

fn report(i: usize, contender: Contender, run: &Run, server: server::ServerStats) {
    println!(
        "run {i} {:>20}: {:7.1} ms (CPU {:.1} ms; watches registered in {:.1} ms), {} responses, {:.2} MB received \
         (server: {} requests, {} responses, {:.2} MB)",
        contender.label(),
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

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
