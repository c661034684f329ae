//! Interop with a third-party control plane: the tokio adapter against a management
//! server built on go-control-plane's snapshot cache and SotW ADS server
//! (`interop/go-control-plane/server.go`).
//!
//! The server binary comes from `interop/go-control-plane/build.sh`, which this test
//! runs (a no-op when the binary is up to date; a cold run fetches Go and
//! go-control-plane from Debian's archive). `XDS_GO_SERVER=<path>` uses a prebuilt
//! binary instead. When the binary cannot be had the test is skipped with a message,
//! unless `XDS_INTEROP_REQUIRED` is set (CI sets it), in which case it fails.
//!
//! It runs twice, against the server's two snapshot-cache modes: ADS mode, where
//! go-control-plane answers a CDS or EDS request only once it names every resource of
//! the snapshot (so the client's CDS requests go unanswered until one names all 1,000
//! clusters, and likewise for EDS), and per-request mode, where every request is
//! answered at once (so the client gets, and ACKs, a response for each batch of new
//! names).
//!
//! What it checks, following the chain as a data plane would (LDS → RDS → CDS → EDS,
//! each watch started when the resource naming it arrives):
//! 1. the API listener, its route configuration, 1,000 clusters and their 1,000
//!    ClusterLoadAssignments arrive, with the endpoints the server's snapshot 1 has;
//! 2. the server saw every version of every type ACKed (snapshot version 1, then 2)
//!    and not one NACK, on a single ADS stream;
//! 3. after the server installs snapshot 2 (new endpoints for every cluster), all
//!    1,000 new endpoint sets arrive, and CSDS shows all 2,002 resources ACKED at
//!    version 2;
//! 4. no watch ever sees an error.
//!
//! `channel` sends RPCs through an `xds:///` channel whose configuration the go server
//! serves (an 80/20 split over two clusters of echo backends). `delta` runs the chain
//! over delta xDS against the same server.

#[path = "interop_go_control_plane/channel.rs"]
mod channel;
#[path = "interop_go_control_plane/delta.rs"]
mod delta;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::channel::mpsc::{UnboundedReceiver, unbounded};
use futures::stream::{SelectAll, Stream, StreamExt};
use xds_adapter_tokio::{Client, WatchUpdate};
use xds_proto_core::pb::envoy::admin::v3::ClientResourceStatus;
use xds_proto_core::resource::cluster::{ClusterResource, ClusterType};
use xds_proto_core::resource::endpoint::EndpointsResource;
use xds_proto_core::resource::listener::{ListenerKind, ListenerResource, RouteSource};
use xds_proto_core::resource::route::{ClusterSpecifier, RouteAction, RouteConfigResource};
use xds_proto_core::resource::{Cds, Eds, Lds, Rds};
use xds_test_server::interop_build::{interop_required, last_binary, run_build_script};

/// Must match the server's flags below.
const NODE_ID: &str = "xds-proto-interop";
const LISTENER: &str = "interop.example.com";
const ROUTE: &str = "interop-route";
const CLUSTERS: usize = 1000;

/// Per phase; generous, for a loaded 2-core CI machine.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

const LDS_URL: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const RDS_URL: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const CDS_URL: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS_URL: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// The port of cluster `i`'s endpoint in snapshot `version` (server.go's `EndpointPort`).
fn endpoint_port(version: u32, i: usize) -> u16 {
    (20000 + ((version - 1) % 20) as usize * 2000 + i) as u16
}

fn cluster_name(i: usize) -> String {
    format!("cluster-{i:04}")
}

// ---- getting the server binary ----

/// The server binary, or why it cannot be had.
fn go_server_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("XDS_GO_SERVER") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("XDS_GO_SERVER={} is not a file", path.display()))
        };
    }
    let stdout = run_build_script("interop/go-control-plane/build.sh", &[])?;
    last_binary(&stdout)
}

// ---- the server process ----

/// The go-control-plane server, killed on drop.
struct GoServer {
    child: Child,
    stdin: ChildStdin,
    lines: UnboundedReceiver<String>,
    stderr_path: PathBuf,
    port: u16,
    nacks: Vec<String>,
    /// Whether to keep the stderr log when dropped (cleared when the test passed).
    keep_log: bool,
}

/// The answer to `stats`.
#[derive(Debug, Default)]
struct Stats {
    totals: HashMap<String, String>,
    /// By type URL.
    types: BTreeMap<String, HashMap<String, String>>,
}

impl Stats {
    fn total(&self, key: &str) -> u64 {
        self.totals
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn of(&self, type_url: &str, key: &str) -> &str {
        self.types
            .get(type_url)
            .and_then(|t| t.get(key))
            .map_or("-", String::as_str)
    }

    /// Whether the server has sent `version` of every type and seen each one ACKed.
    fn all_acked(&self, version: &str) -> bool {
        [LDS_URL, RDS_URL, CDS_URL, EDS_URL]
            .iter()
            .all(|t| self.of(t, "sent") == version && self.of(t, "acked") == version)
    }
}

fn parse_pairs<'a>(words: impl Iterator<Item = &'a str>) -> HashMap<String, String> {
    words
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl GoServer {
    /// Starts the server; `label` names its stderr log (one per test).
    async fn start(binary: &Path, label: &str, ads: bool) -> GoServer {
        let stderr_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "interop-go-control-plane-{label}-{}.stderr",
            std::process::id()
        ));
        let stderr = std::fs::File::create(&stderr_path).expect("create the server's stderr log");
        let mut child = Command::new(binary)
            .args([
                "-port",
                "0",
                "-node-id",
                NODE_ID,
                "-clusters",
                &CLUSTERS.to_string(),
            ])
            .args([
                "-listener",
                LISTENER,
                "-route",
                ROUTE,
                &format!("-ads={ads}"),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.unbounded_send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = GoServer {
            child,
            stdin,
            lines,
            stderr_path,
            port: 0,
            nacks: Vec::new(),
            keep_log: true,
        };
        let ready = server.expect_line("READY ", Duration::from_secs(30)).await;
        server.port = ready["READY ".len()..]
            .trim()
            .parse()
            .expect("READY <port>");
        server
    }

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}")
            .and_then(|()| self.stdin.flush())
            .expect("write to the server's stdin");
    }

    /// The next stdout line starting with `prefix`; NACK lines met on the way are kept.
    async fn expect_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.next()).await {
                Ok(Some(line)) if line.starts_with(prefix) => return line,
                Ok(Some(line)) => {
                    if line.starts_with("NACK ") {
                        self.nacks.push(line);
                    }
                }
                Ok(None) => panic!(
                    "the server exited while waiting for {prefix:?}{}",
                    self.stderr_tail()
                ),
                Err(_) => panic!(
                    "no {prefix:?} line from the server in {timeout:?}{}",
                    self.stderr_tail()
                ),
            }
        }
    }

    async fn stats(&mut self) -> Stats {
        self.send("stats");
        let mut stats = Stats::default();
        loop {
            let line = self.expect_line("", Duration::from_secs(10)).await;
            let mut words = line.split_whitespace();
            match words.next() {
                Some("TYPE") => {
                    let url = words.next().unwrap_or_default().to_string();
                    stats.types.insert(url, parse_pairs(words));
                }
                Some("STATS") => {
                    stats.totals = parse_pairs(words);
                    return stats;
                }
                Some("NACK") => self.nacks.push(line),
                _ => {}
            }
        }
    }

    /// Polls `stats` until every type's `version` was sent and ACKed.
    async fn wait_all_acked(&mut self, version: &str) -> Stats {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let stats = self.stats().await;
            if stats.all_acked(version) || Instant::now() > deadline {
                return stats;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn stderr_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!(
            "\n--- last lines of {} ---\n{tail}",
            self.stderr_path.display()
        )
    }
}

impl Drop for GoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep_log {
            let _ = std::fs::remove_file(&self.stderr_path);
        }
    }
}

// ---- the client side ----

/// One update of any of the test's watches.
enum Update {
    Listener(WatchUpdate<ListenerResource>),
    Route(WatchUpdate<RouteConfigResource>),
    Cluster(usize, WatchUpdate<ClusterResource>),
    Endpoints(usize, WatchUpdate<EndpointsResource>),
}

type Updates = SelectAll<Pin<Box<dyn Stream<Item = Update> + Send>>>;

fn tagged<V, S>(
    stream: S,
    tag: impl Fn(WatchUpdate<V>) -> Update + Send + 'static,
) -> Pin<Box<dyn Stream<Item = Update> + Send>>
where
    S: Stream<Item = WatchUpdate<V>> + Send + 'static,
{
    Box::pin(stream.map(tag))
}

/// The start of every chain: the listener watched, nothing received yet. The other
/// watches follow from what arrives (`run_until`).
async fn watch_listener(client: &Client) -> (Updates, Received) {
    let mut updates: Updates = SelectAll::new();
    let got = Received {
        eds_watched: vec![false; CLUSTERS],
        ..Received::default()
    };
    updates.push(tagged(
        client
            .watch::<Lds>(LISTENER)
            .await
            .expect("watch the listener"),
        Update::Listener,
    ));
    (updates, got)
}

/// What the client has received so far.
#[derive(Default)]
struct Received {
    listener: Option<Arc<ListenerResource>>,
    route: Option<Arc<RouteConfigResource>>,
    clusters: HashMap<usize, Arc<ClusterResource>>,
    /// The endpoint addresses of each cluster's latest ClusterLoadAssignment.
    endpoints: HashMap<usize, Vec<SocketAddr>>,
    /// Cluster indices whose EDS watch was started.
    eds_watched: Vec<bool>,
    /// Every error any watch delivered.
    errors: Vec<String>,
    /// Endpoint updates received, in total.
    endpoint_updates: usize,
}

impl Received {
    /// Whether every cluster's endpoints are exactly those of snapshot `version`.
    fn endpoints_at(&self, version: u32) -> bool {
        self.endpoints.len() == CLUSTERS
            && self.endpoints.iter().all(|(&i, addrs)| {
                addrs.len() == 1
                    && addrs[0] == SocketAddr::from(([127, 0, 0, 1], endpoint_port(version, i)))
            })
    }
}

/// The cluster index of `name` ("cluster-NNNN").
fn cluster_index(name: &str) -> usize {
    name.strip_prefix("cluster-")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected cluster name {name:?}"))
}

/// Applies one update, starting the watches it leads to (RDS from the listener, CDS
/// from the routes, EDS from each cluster).
async fn apply(client: &Client, updates: &mut Updates, got: &mut Received, update: Update) {
    match update {
        Update::Listener(u) => match u {
            WatchUpdate::Changed(Ok(listener)) => {
                let ListenerKind::Client(hcm) = &listener.kind else {
                    panic!("not an API listener: {listener:?}")
                };
                let RouteSource::Rds(route) = &hcm.route_config else {
                    panic!("no RDS in {hcm:?}")
                };
                assert_eq!(route, ROUTE);
                assert!(
                    hcm.http_filters.last().is_some_and(
                        |f| f.config == xds_proto_core::filter::HttpFilterConfig::Router
                    ),
                    "the router filter ends the chain: {:?}",
                    hcm.http_filters
                );
                if got.listener.is_none() {
                    let watch = client
                        .watch::<Rds>(route)
                        .await
                        .expect("watch the route configuration");
                    updates.push(tagged(watch, Update::Route));
                }
                got.listener = Some(listener);
            }
            other => got.errors.push(format!("listener: {other:?}")),
        },
        Update::Route(u) => match u {
            WatchUpdate::Changed(Ok(route)) => {
                let mut names = Vec::new();
                for vhost in &route.virtual_hosts {
                    for r in &vhost.routes {
                        let RouteAction::Forward(action) = &r.action else {
                            panic!("unexpected route action {r:?}")
                        };
                        let ClusterSpecifier::Cluster(name) = &action.cluster else {
                            panic!("unexpected {action:?}")
                        };
                        names.push(name.clone());
                    }
                }
                assert_eq!(names.len(), CLUSTERS, "one route per cluster");
                if got.route.is_none() {
                    for name in names {
                        let i = cluster_index(&name);
                        let watch = client.watch::<Cds>(&name).await.expect("watch a cluster");
                        updates.push(tagged(watch, move |u| Update::Cluster(i, u)));
                    }
                }
                got.route = Some(route);
            }
            other => got.errors.push(format!("route configuration: {other:?}")),
        },
        Update::Cluster(i, u) => match u {
            WatchUpdate::Changed(Ok(cluster)) => {
                assert_eq!(cluster.name, cluster_name(i));
                let ClusterType::Eds { service_name } = &cluster.cluster_type else {
                    panic!("not an EDS cluster: {cluster:?}")
                };
                if !got.eds_watched[i] {
                    got.eds_watched[i] = true;
                    let eds_name = service_name.clone().unwrap_or_else(|| cluster.name.clone());
                    let watch = client
                        .watch::<Eds>(&eds_name)
                        .await
                        .expect("watch endpoints");
                    updates.push(tagged(watch, move |u| Update::Endpoints(i, u)));
                }
                got.clusters.insert(i, cluster);
            }
            other => got.errors.push(format!("{}: {other:?}", cluster_name(i))),
        },
        Update::Endpoints(i, u) => match u {
            WatchUpdate::Changed(Ok(cla)) => {
                assert_eq!(cla.cluster_name, cluster_name(i));
                let addrs = cla
                    .priorities
                    .iter()
                    .flat_map(|p| &p.localities)
                    .flat_map(|l| &l.endpoints)
                    .inspect(|e| assert!(e.health_status.is_usable(), "{e:?}"))
                    .map(|e| e.address)
                    .collect();
                got.endpoints.insert(i, addrs);
                got.endpoint_updates += 1;
            }
            other => got
                .errors
                .push(format!("endpoints of {}: {other:?}", cluster_name(i))),
        },
    }
}

/// Applies updates until `done` holds, failing on any watch error or after `timeout`.
async fn run_until(
    client: &Client,
    server: &GoServer,
    updates: &mut Updates,
    got: &mut Received,
    what: &str,
    done: impl Fn(&Received) -> bool,
) {
    let deadline = tokio::time::Instant::now() + PHASE_TIMEOUT;
    while !done(got) {
        match tokio::time::timeout_at(deadline, updates.next()).await {
            Ok(Some(update)) => apply(client, updates, got, update).await,
            Ok(None) => panic!("every watch stream ended while waiting for {what}"),
            Err(_) => panic!(
                "timed out waiting for {what}: listener {}, route {}, {} clusters, {} endpoint sets{}",
                got.listener.is_some(),
                got.route.is_some(),
                got.clusters.len(),
                got.endpoints.len(),
                server.stderr_tail()
            ),
        }
        assert!(
            got.errors.is_empty(),
            "watch errors while waiting for {what}: {:#?}",
            got.errors
        );
    }
}

fn bootstrap(port: u16) -> String {
    bootstrap_with(port, "")
}

/// A bootstrap whose server entry has `extra` fields (", \"api_type\": ...").
fn bootstrap_with(port: u16, extra: &str) -> String {
    format!(
        r#"{{
  "xds_servers": [{{"server_uri": "127.0.0.1:{port}", "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"]{extra}}}],
  "node": {{"id": "{NODE_ID}", "cluster": "interop"}}
}}"#
    )
}

/// The server binary, built once for both tests; `None`: skip.
fn binary_or_skip() -> Option<PathBuf> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BINARY.get_or_init(go_server_binary) {
        Ok(binary) => Some(binary.clone()),
        Err(why) if !interop_required() => {
            eprintln!(
                "SKIPPED interop_go_control_plane: the go-control-plane server is unavailable ({why}); \
                 set XDS_INTEROP_REQUIRED=1 to make this a failure"
            );
            None
        }
        Err(why) => panic!(
            "XDS_INTEROP_REQUIRED is set but the go-control-plane server is unavailable: {why}"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_adapter_follows_go_control_plane_ads_mode() {
    follow_go_control_plane(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_adapter_follows_go_control_plane_per_request_mode() {
    follow_go_control_plane(false).await;
}

async fn follow_go_control_plane(ads: bool) {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let mode = if ads { "ADS mode" } else { "per-request mode" };

    let started = Instant::now();
    let label = if ads { "ads" } else { "per-request" };
    let mut server = GoServer::start(&binary, label, ads).await;
    eprintln!(
        "{mode}: go-control-plane server on 127.0.0.1:{} (log: {})",
        server.port,
        server.stderr_path.display()
    );

    let client = Client::from_bootstrap_json(&bootstrap(server.port)).expect("client");
    let (mut updates, mut got) = watch_listener(&client).await;

    // 1. The whole chain at snapshot version 1.
    run_until(
        &client,
        &server,
        &mut updates,
        &mut got,
        "the chain at version 1",
        |g| {
            g.listener.is_some()
                && g.route.is_some()
                && g.clusters.len() == CLUSTERS
                && g.endpoints_at(1)
        },
    )
    .await;
    let phase1 = started.elapsed();
    eprintln!(
        "{mode}: version 1: listener, route, {} clusters and {} endpoint sets in {phase1:.2?}",
        got.clusters.len(),
        got.endpoints.len()
    );

    // 2. Every type of version 1 ACKed, nothing NACKed.
    let stats = server.wait_all_acked("1").await;
    assert!(
        stats.all_acked("1"),
        "version 1 not ACKed for every type: {stats:#?}{}",
        server.stderr_tail()
    );
    assert_eq!(
        stats.total("nacks"),
        0,
        "NACKs: {:#?}{}",
        server.nacks,
        server.stderr_tail()
    );

    // 3. Snapshot version 2: new endpoints for every cluster.
    let updates_before = got.endpoint_updates;
    server.send("update");
    let updated = server
        .expect_line("UPDATED ", Duration::from_secs(30))
        .await;
    assert_eq!(updated, "UPDATED 2");
    let t2 = Instant::now();
    run_until(
        &client,
        &server,
        &mut updates,
        &mut got,
        "the endpoints of version 2",
        |g| g.endpoints_at(2),
    )
    .await;
    let phase2 = t2.elapsed();
    assert!(
        got.endpoint_updates - updates_before >= CLUSTERS,
        "every cluster's endpoints were updated"
    );

    let stats = server.wait_all_acked("2").await;
    assert!(
        stats.all_acked("2"),
        "version 2 not ACKed for every type: {stats:#?}{}",
        server.stderr_tail()
    );
    assert_eq!(
        stats.total("nacks"),
        0,
        "NACKs: {:#?}{}",
        server.nacks,
        server.stderr_tail()
    );
    assert!(server.nacks.is_empty(), "NACKs: {:#?}", server.nacks);
    assert_eq!(
        stats.total("streams"),
        1,
        "one ADS stream throughout{}",
        server.stderr_tail()
    );
    for url in [LDS_URL, RDS_URL, CDS_URL, EDS_URL] {
        assert_eq!(stats.of(url, "nacks"), "0", "{url}");
    }
    eprintln!("{mode}: server stats: {:?}", stats.totals);
    for (url, t) in &stats.types {
        eprintln!("{mode}:   {url}: {t:?}");
    }

    // 4. The client's own view: CSDS has all 2,002 resources ACKED at version 2.
    let configs = client.csds_configs().await.expect("CSDS");
    assert_eq!(configs.len(), 2 + 2 * CLUSTERS, "resources in CSDS");
    let not_acked: Vec<_> = configs
        .iter()
        .filter(|c| c.client_status != ClientResourceStatus::Acked as i32 || c.version_info != "2")
        .map(|c| {
            (
                c.type_url.clone(),
                c.name.clone(),
                c.version_info.clone(),
                c.client_status,
            )
        })
        .collect();
    assert!(
        not_acked.is_empty(),
        "resources not ACKED at version 2: {not_acked:?}"
    );

    // Nothing arrived late with an error.
    while let Ok(Some(update)) =
        tokio::time::timeout(Duration::from_millis(200), updates.next()).await
    {
        apply(&client, &mut updates, &mut got, update).await;
    }
    assert!(got.errors.is_empty(), "watch errors: {:#?}", got.errors);

    eprintln!(
        "{mode}: version 1 in {phase1:.2?}, version 2's endpoints in {phase2:.2?}, {:.2?} in all",
        started.elapsed()
    );
    drop(updates);
    client.shutdown().await;
    server.keep_log = false;
    drop(server);
}
