#![warn(missing_docs)]

//! `xds`: watch xDS resources from a management server and print what arrives.
//!
//! ```text
//! cargo run -p xds-cli                                     # the built-in demo
//! cargo run -p xds-cli -- --server 127.0.0.1:18000 \
//!     --node-id my-node --listener my-service              # follow a listener
//! cargo run -p xds-cli -- --bootstrap bootstrap.json --cds my-cluster
//! ```
//!
//! With no server given (no `--bootstrap`, no `--server`, no `GRPC_XDS_BOOTSTRAP` or
//! `GRPC_XDS_BOOTSTRAP_CONFIG`) it starts an embedded demo management server on
//! 127.0.0.1 serving a small mesh, follows its listener's configuration while the demo
//! server pushes updates, sends an invalid cluster, reports a resource error, leaves a
//! cluster missing, and restarts; then it dumps CSDS and exits.
//!
//! `--listener` follows the client's config stream (`Client::watch_config`: gRFC A74's
//! dependency manager in the client's driver, with gRFC A31's config selector): each
//! configuration is printed as what changed (routes, clusters, endpoints with health
//! and weight) and where sample RPCs go. Without `--listener`, `--target xds:///NAME`
//! (or `xds://AUTHORITY/NAME`) follows the listener the bootstrap's listener name
//! templates give the target (`Client::watch_config_for_target`, gRFC A47). `--lds/--rds/--cds/--eds` watch single
//! resources and print each update. `--json` prints JSON documents instead. NACKs with
//! their reasons, connectivity loss and recovery, and the server in use come from the
//! client's channel events. `--delta` speaks delta (incremental) xDS to `--server` or
//! to the demo server. `--csds` dumps the client's CSDS view on exit (the response
//! the CSDS service gives), and `--csds-listen HOST:PORT` serves
//! `ClientStatusDiscoveryService` while it runs. Logs: `RUST_LOG=xds_adapter_common=debug`.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use serde_json::json;
use xds_adapter_tokio::xds_proto_core::ApiType;
use xds_adapter_tokio::{
    Bootstrap, Client, ConfigResult, ConfigStream, CsdsServer, load_bootstrap_from_env,
};

/// With `--json`, stdout carries only JSON documents; status lines go to stderr.
static JSON_MODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Prints a line to stdout (see [`write_line`]); the CLI's `println!`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_line(format_args!($($arg)*))
    };
}

/// Prints a status line: to stdout, or to stderr in `--json` mode.
macro_rules! say {
    ($($arg:tt)*) => {
        if $crate::JSON_MODE.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!($($arg)*);
        } else {
            out!($($arg)*);
        }
    };
}

/// Writes a line to stdout. When the reader has gone (`xds ... | head -2`), the CLI
/// ends quietly with status 0, as `println!` would not: it panics on the broken pipe.
fn write_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = (stdout.write_fmt(line)).and_then(|()| stdout.write_all(b"\n"));
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("xds: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

mod demo;
mod describe;
mod print;
mod story;

use describe::{Kind, Update, tag};
use print::{Printer, print_csds};

/// When the CLI started: the origin of the time stamps and of the demo's timeline.
static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();

/// The time stamp that starts every status line.
fn stamp() -> String {
    let start = START.get_or_init(tokio::time::Instant::now);
    format!("[{:6.2}s]", start.elapsed().as_secs_f64())
}

/// Watch xDS resources and print every update.
#[derive(Parser, Debug)]
#[command(name = "xds", version, about)]
struct Args {
    /// Bootstrap file (default: GRPC_XDS_BOOTSTRAP or GRPC_XDS_BOOTSTRAP_CONFIG).
    #[arg(long, value_name = "FILE")]
    bootstrap: Option<String>,
    /// An xDS server to use with insecure credentials, instead of a bootstrap.
    #[arg(long, value_name = "HOST:PORT")]
    server: Option<String>,
    /// The node id to send with --server.
    #[arg(long, value_name = "ID", default_value = "xds-cli")]
    node_id: String,
    /// Speak delta (incremental) xDS to the --server, or to the demo server
    /// (DeltaAggregatedResources). A bootstrap says it per server instead, with
    /// "api_type": "AGGREGATED_DELTA_GRPC".
    #[arg(long)]
    delta: bool,
    /// Follow this listener's resolved configuration (gRFC A74): LDS → RDS → CDS → EDS.
    #[arg(long, value_name = "NAME")]
    listener: Option<String>,
    /// Watch a listener (repeatable).
    #[arg(long, value_name = "NAME")]
    lds: Vec<String>,
    /// Watch a route configuration (repeatable).
    #[arg(long, value_name = "NAME")]
    rds: Vec<String>,
    /// Watch a cluster (repeatable).
    #[arg(long, value_name = "NAME")]
    cds: Vec<String>,
    /// Watch a cluster's endpoints (repeatable).
    #[arg(long, value_name = "NAME")]
    eds: Vec<String>,
    /// Print each decoded resource as JSON instead of a summary.
    #[arg(long)]
    json: bool,
    /// Dump the client's CSDS view on exit.
    #[arg(long)]
    csds: bool,
    /// Serve CSDS (envoy.service.status.v3.ClientStatusDiscoveryService) on this
    /// address while running, e.g. 127.0.0.1:18001 (port 0 picks a free one).
    #[arg(long, value_name = "HOST:PORT")]
    csds_listen: Option<String>,
    /// The data-plane target the client is for (its CSDS client_scope); default
    /// xds:///LISTENER with --listener, else xds-cli. Without --listener, an xds:
    /// target (xds:///NAME, xds://AUTHORITY/NAME) is followed: its listener name comes
    /// from the bootstrap's listener name templates (gRFC A47).
    #[arg(long, value_name = "TARGET")]
    target: Option<String>,
    /// Exit after this many seconds (default: 12 for the demo, otherwise run until Ctrl-C).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// The does-not-exist timeout in seconds (default 15; 3 for the demo).
    #[arg(long, value_name = "SECS")]
    resource_timeout: Option<f64>,
    /// How long one connection attempt may take, until the server's HTTP/2 SETTINGS
    /// have arrived, in seconds (default 20).
    #[arg(long, value_name = "SECS")]
    connect_timeout: Option<f64>,
    /// Also print every ACK.
    #[arg(long, short)]
    verbose: bool,
}

enum Source {
    Bootstrap(Box<Bootstrap>),
    Demo,
}

fn choose_source(args: &Args) -> Result<Source, String> {
    let source = bootstrap_source(args)?;
    if args.delta && args.server.is_none() && matches!(source, Source::Bootstrap(_)) {
        return Err(
            "--delta applies to --server and the demo; in a bootstrap, set \"api_type\": \"AGGREGATED_DELTA_GRPC\" on the server".into(),
        );
    }
    Ok(source)
}

fn bootstrap_source(args: &Args) -> Result<Source, String> {
    if let Some(path) = &args.bootstrap {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        return Bootstrap::from_json_str(&text)
            .map(|b| Source::Bootstrap(Box::new(b)))
            .map_err(|e| format!("{path}: {e}"));
    }
    if let Some(server) = &args.server {
        let api_type = if args.delta {
            ApiType::Delta
        } else {
            ApiType::Sotw
        };
        let json = json!({
            "xds_servers": [{
                "server_uri": server,
                "channel_creds": [{"type": "insecure"}],
                "server_features": ["xds_v3"],
                "api_type": api_type.as_str(),
            }],
            "node": {"id": args.node_id, "cluster": "xds-cli"},
        });
        return Bootstrap::from_json_value(&json)
            .map(|b| Source::Bootstrap(Box::new(b)))
            .map_err(|e| e.to_string());
    }
    match load_bootstrap_from_env() {
        Ok(b) => Ok(Source::Bootstrap(Box::new(b))),
        Err(e) if e.kind == xds_adapter_tokio::xds_proto_core::bootstrap::BootstrapErrorKind::NotConfigured => {
            Ok(Source::Demo)
        }
        Err(e) => Err(format!("bootstrap from the environment: {e}")),
    }
}

/// Exits with status 2 after printing why.
fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("xds: {message}");
    std::process::exit(2);
}

/// The bootstrap to use, and the demo server when nothing names a server.
fn bootstrap(args: &Args) -> (Bootstrap, Option<Arc<demo::Demo>>) {
    match choose_source(args).unwrap_or_else(|e| fail(e)) {
        Source::Bootstrap(b) => (*b, None),
        Source::Demo => {
            let demo = demo::start_server();
            say!(
                "{} no xDS server given: started the demo management server on {}",
                stamp(),
                demo.server.uri()
            );
            let json = if args.delta {
                demo.server.delta_bootstrap_json("xds-cli-demo")
            } else {
                demo.server.bootstrap_json("xds-cli-demo", None)
            };
            let bootstrap = Bootstrap::from_json_str(&json).expect("demo bootstrap");
            (bootstrap, Some(demo))
        }
    }
}

/// Starts the single watches of `--lds/--rds/--cds/--eds`, all at once: the client
/// registers them in one burst (one subscription request per type, not one per name
/// with every name so far, which made 10,000 names quadratic).
async fn single_watches(client: &Client, args: &Args) -> SelectAll<BoxStream<'static, Update>> {
    let kinds = [
        (Kind::Lds, &args.lds),
        (Kind::Rds, &args.rds),
        (Kind::Cds, &args.cds),
        (Kind::Eds, &args.eds),
    ];
    let watches = kinds.into_iter().flat_map(|(kind, names)| {
        names.iter().map(move |name| async move {
            let stream = client.watch_type(&kind.type_info(), name).await;
            stream.map(|s| tag(s, kind)).map_err(|e| (kind, name, e))
        })
    });
    let mut streams = SelectAll::new();
    for started in futures::future::join_all(watches).await {
        match started {
            Ok(stream) => streams.push(stream),
            Err((kind, name, e)) => {
                say!("{} cannot watch {} {name:?}: {e}", stamp(), kind.label())
            }
        }
    }
    streams
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    JSON_MODE.store(args.json, std::sync::atomic::Ordering::Relaxed);
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    START.get_or_init(tokio::time::Instant::now);
    let (bootstrap, demo_server) = bootstrap(&args);
    let demo = demo_server.is_some();
    let follow = follow(&args, &bootstrap, demo);
    let listener = follow.as_ref().map(|f| f.listener().to_string());
    let singles = [&args.lds, &args.rds, &args.cds, &args.eds];
    if listener.is_none() && singles.iter().all(|names| names.is_empty()) {
        fail(
            "nothing to watch: give --listener NAME, --target xds:///NAME, \
             or --lds/--rds/--cds/--eds NAME",
        );
    }
    let mut builder = Client::builder(bootstrap).user_agent("xds-cli", env!("CARGO_PKG_VERSION"));
    if let Some(t) = args.resource_timeout.or(demo.then_some(3.0)) {
        builder = builder.resource_timeout(Duration::from_secs_f64(t));
    }
    if let Some(t) = args.connect_timeout {
        builder = builder.connect_timeout(Duration::from_secs_f64(t));
    }
    let pool = builder.build_pool().unwrap_or_else(|e| fail(e));
    let target = args.target.clone().unwrap_or_else(|| match &listener {
        Some(name) => format!("xds:///{name}"),
        None => "xds-cli".to_string(),
    });
    let client = pool.get_or_create(&target);
    let csds_server = match &args.csds_listen {
        Some(addr) => {
            let server = (CsdsServer::serve(pool.clone(), addr.as_str()).await)
                .unwrap_or_else(|e| fail(format!("cannot serve CSDS on {addr}: {e}")));
            let at = server.local_addr();
            say!("{} serving CSDS on {at} (client_scope {target:?})", stamp());
            Some(server)
        }
        None => None,
    };
    let servers: Vec<String> = (client.bootstrap().xds_servers.iter())
        .map(|s| match s.is_delta() {
            true => format!("{} (delta)", s.server_uri),
            false => s.server_uri.clone(),
        })
        .collect();
    say!(
        "{} xDS servers from the bootstrap: {}",
        stamp(),
        servers.join(", ")
    );

    let script = (demo_server.clone()).map(|s| tokio::spawn(demo::run_script(s)));
    let mut printer = Printer::new(args.json, args.verbose);
    let duration = args.duration.or(demo.then_some(12.0));
    // The watches stay until CSDS has been dumped.
    let watches = run(&client, &args, follow.as_ref(), duration, &mut printer).await;
    if let Some(demo) = &demo_server {
        demo::send_rpcs(demo, &pool).await;
    }
    if args.csds || demo {
        print_csds(&pool, args.json).await;
    }
    if let Some(server) = csds_server {
        server.shutdown().await;
    }
    if let Some(s) = script {
        s.abort();
    }
    drop(watches);
    client.shutdown().await;
    if let Some(demo) = demo_server {
        demo.server.stop().await;
    }
}

/// Whose configuration to follow: `--listener` names the listener; else an `xds:`
/// `--target` names it through the bootstrap's listener name templates (gRFC A47).
enum Follow {
    Listener(String),
    Target { target: String, listener: String },
}

impl Follow {
    fn listener(&self) -> &str {
        match self {
            Follow::Listener(name) | Follow::Target { listener: name, .. } => name,
        }
    }
}

/// What to follow, if anything; exits when an `xds:` `--target` names no listener.
fn follow(args: &Args, bootstrap: &Bootstrap, demo: bool) -> Option<Follow> {
    if let Some(name) = &args.listener {
        return Some(Follow::Listener(name.clone()));
    }
    if let Some(target) = args.target.as_ref().filter(|t| t.starts_with("xds:")) {
        let listener = (bootstrap.listener_name_for_target(target))
            .unwrap_or_else(|e| fail(format!("--target {target}: {e}")));
        let target = target.clone();
        return Some(Follow::Target { target, listener });
    }
    demo.then(|| Follow::Listener(xds_test_server::demo::LISTENER.to_string()))
}

/// The config stream and the single watches.
type Watches = (Option<ConfigStream>, SelectAll<BoxStream<'static, Update>>);

/// Watches and prints until the duration passes or Ctrl-C; returns the watches.
async fn run(
    client: &Client,
    args: &Args,
    follow: Option<&Follow>,
    duration: Option<f64>,
    printer: &mut Printer,
) -> Watches {
    let mut channel_events = client.channel_events();
    let listener = follow.map(Follow::listener);
    if let Some(name) = listener {
        say!(
            "{} following listener {name:?}: LDS → RDS → CDS → EDS, one consistent configuration at a time",
            stamp()
        );
    }
    let mut configs = match follow {
        Some(Follow::Listener(name)) => Some(client.watch_config(name).await),
        Some(Follow::Target { target, .. }) => Some(client.watch_config_for_target(target).await),
        None => None,
    }
    .map(|started| started.unwrap_or_else(|e| fail(e)));
    let mut watches = single_watches(client, args).await;
    let deadline = async {
        match duration {
            Some(secs) => tokio::time::sleep(Duration::from_secs_f64(secs)).await,
            None => futures::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut deadline => {
                say!("{} --duration reached", stamp());
                return (configs, watches);
            }
            _ = &mut ctrl_c => {
                say!("{} interrupted", stamp());
                return (configs, watches);
            }
            Some(e) = channel_events.next() => printer.channel_event(&e),
            Some(u) = next_update(&mut watches) => printer.update(&u),
            Some(c) = next_config(&mut configs) => {
                printer.config(listener.unwrap_or_default(), &c)
            }
        }
    }
}

/// The next update of any single watch; pending (instead of ending) while none is open.
async fn next_update(streams: &mut SelectAll<BoxStream<'static, Update>>) -> Option<Update> {
    if streams.is_empty() {
        return futures::future::pending().await;
    }
    streams.next().await
}

/// The next configuration; pending without `--listener`.
async fn next_config(configs: &mut Option<ConfigStream>) -> Option<ConfigResult> {
    match configs {
        Some(stream) => stream.next().await,
        None => futures::future::pending().await,
    }
}
