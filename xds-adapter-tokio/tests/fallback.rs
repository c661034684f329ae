//! gRFC A71 fallback end to end: a [`ClientPool`] on tokio against two real loopback
//! management servers on 127.0.0.1, a primary and a fallback, listed in that order in
//! the bootstrap's `xds_servers`.
//!
//! Both servers serve the same cluster names: `c-same` with identical bytes (under
//! different versions), `c-diff` and `c-new` with values that tell them apart
//! (`max_requests`). The primary is stopped, a new resource is watched, the fallback
//! serves it, the primary is restarted and takes over again. Every watcher's whole
//! history is recorded and compared at the end, under a 1 s does-not-exist timeout that
//! would turn any wrongly started timer into a visible error.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use xds_adapter_tokio::xds_proto_core::backoff::BackoffConfig;
use xds_adapter_tokio::xds_proto_core::pb::envoy::admin::v3::ClientResourceStatus;
use xds_adapter_tokio::xds_proto_core::pb::envoy::service::status::v3::ClientStatusResponse;
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_adapter_tokio::{Bootstrap, Cds, Client, ClientPool, WatchStream, WatchUpdate};
use xds_test_server::resources::{cluster, cluster_with};
use xds_test_server::{LoopbackServer, RequestKind};

const CDS: &str = type_url::CLUSTER;
/// How long the test waits for something that should happen promptly.
const PROMPT: Duration = Duration::from_secs(10);

/// What a watcher saw, simplified: a value (its `max_requests`), an ambient error, or
/// an error replacing the value (does-not-exist and friends: never expected here).
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Value(u32),
    Ambient(String),
    Replaced(String),
}

/// A watch whose every update is recorded by a background task.
struct Recorded {
    label: String,
    log: watch::Receiver<Vec<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorded {
    fn new(label: &str, mut stream: WatchStream<Cds>) -> Recorded {
        let (tx, log) = watch::channel(Vec::new());
        let task = tokio::spawn(async move {
            while let Some(update) = stream.next().await {
                let seen = match update {
                    WatchUpdate::Changed(Ok(c)) => Seen::Value(c.max_requests),
                    WatchUpdate::Changed(Err(e)) => Seen::Replaced(e.to_string()),
                    WatchUpdate::AmbientError(e) => Seen::Ambient(e.to_string()),
                };
                tx.send_modify(|log| log.push(seen));
            }
        });
        Recorded {
            label: label.to_string(),
            log,
            task,
        }
    }

    async fn watch(label: &str, client: &Client, name: &str) -> Recorded {
        Recorded::new(label, client.watch::<Cds>(name).await.expect("watch"))
    }

    /// The values seen so far, in order (errors left out).
    fn values(&self) -> Vec<u32> {
        self.log
            .borrow()
            .iter()
            .filter_map(|s| match s {
                Seen::Value(v) => Some(*v),
                _ => None,
            })
            .collect()
    }

    fn ambient_errors(&self) -> usize {
        self.log
            .borrow()
            .iter()
            .filter(|s| matches!(s, Seen::Ambient(_)))
            .count()
    }

    /// Waits until the log satisfies `done`.
    async fn until(&self, what: &str, done: impl Fn(&[Seen]) -> bool) {
        let mut log = self.log.clone();
        let waited = tokio::time::timeout(PROMPT, log.wait_for(|l| done(l))).await;
        assert!(
            matches!(waited, Ok(Ok(_))),
            "{}: timed out waiting for {what}; saw {:?}",
            self.label,
            self.log.borrow()
        );
    }

    /// Waits for the next value to be `expected` (ambient errors may come first).
    async fn until_values(&self, expected: &[u32]) {
        self.until(&format!("the values {expected:?}"), |log| {
            let values: Vec<u32> = log
                .iter()
                .filter_map(|s| match s {
                    Seen::Value(v) => Some(*v),
                    _ => None,
                })
                .collect();
            values.len() >= expected.len()
        })
        .await;
        assert_eq!(self.values(), expected, "{}: values", self.label);
    }

    fn assert_no_replacing_error(&self) {
        let log = self.log.borrow();
        let replaced: Vec<&Seen> = log
            .iter()
            .filter(|s| matches!(s, Seen::Replaced(_)))
            .collect();
        assert!(
            replaced.is_empty(),
            "{}: an error replaced the value (a spurious does-not-exist?): {replaced:?}",
            self.label
        );
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The primary's snapshot: `max_requests` 1024 (`c-same`, the builder's default),
/// 100 and 300.
fn serve_primary(server: &LoopbackServer) {
    server.set_resources(
        CDS,
        "p1",
        vec![
            cluster("c-same"),
            cluster_with("c-diff", 100),
            cluster_with("c-new", 300),
        ],
    );
}

/// The fallback's snapshot: `c-same` byte for byte as the primary's, under another
/// version; `c-diff` and `c-new` different.
fn serve_fallback(server: &LoopbackServer) {
    server.set_resources(
        CDS,
        "f1",
        vec![
            cluster("c-same"),
            cluster_with("c-diff", 2),
            cluster_with("c-new", 3),
        ],
    );
}

fn bootstrap(primary: &LoopbackServer, fallback: &LoopbackServer) -> Bootstrap {
    let server = |s: &LoopbackServer| {
        format!(
            r#"{{"server_uri": "{}", "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"]}}"#,
            s.uri()
        )
    };
    let json = format!(
        r#"{{"xds_servers": [{}, {}], "node": {{"id": "fallback-node", "cluster": "loopback-test"}}}}"#,
        server(primary),
        server(fallback)
    );
    Bootstrap::from_json_str(&json).expect("the bootstrap parses")
}

/// The `version_info` CSDS reports for `name` in the client of `scope`.
fn csds_version(csds: &ClientStatusResponse, scope: &str, name: &str) -> String {
    let config = csds
        .config
        .iter()
        .find(|c| c.client_scope == scope)
        .unwrap_or_else(|| panic!("no CSDS config for {scope}"));
    let resource = config
        .generic_xds_configs
        .iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("no {name} in {scope}'s CSDS config"));
    assert_eq!(resource.client_status, ClientResourceStatus::Acked as i32);
    resource.version_info.clone()
}

/// Two targets share one pool (and one bootstrap). Target A has everything cached when
/// the primary goes down, so it never falls back; target B watches a new cluster
/// while the primary is down, so it falls back to the fallback server for all its
/// names, and switches back when the primary returns.
///
/// Checked along the way: no fallback while everything is cached; the fallback gets
/// one stream subscribing every name of B; identical bytes from the fallback notify
/// nobody, different ones are used; A never sees the fallback's data; the first
/// response of the restarted primary replaces the fallback's data and the fallback's
/// stream ends with no request after it; later primary updates reach everyone; no
/// watcher ever gets a does-not-exist (or any error replacing its value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_to_the_secondary_and_back_to_the_restarted_primary() {
    let primary = LoopbackServer::start();
    let fallback = LoopbackServer::start();
    serve_primary(&primary);
    serve_fallback(&fallback);

    let pool = ClientPool::builder(bootstrap(&primary, &fallback))
        .resource_timeout(Duration::from_secs(1))
        .backoff(BackoffConfig {
            initial: Duration::from_millis(200),
            multiplier: 1.6,
            jitter: 0.2,
            max: Duration::from_millis(800),
        })
        .seed(71)
        .build_pool()
        .expect("pool");
    let a = pool.get_or_create("xds:///target-a");
    let b = pool.get_or_create("xds:///target-b");
    assert!(Arc::ptr_eq(a.bootstrap(), b.bootstrap()));

    // 1. Both targets get the primary's data.
    let a_same = Recorded::watch("A/c-same", &a, "c-same").await;
    let a_diff = Recorded::watch("A/c-diff", &a, "c-diff").await;
    let b_same = Recorded::watch("B/c-same", &b, "c-same").await;
    let b_diff = Recorded::watch("B/c-diff", &b, "c-diff").await;
    for (w, v) in [
        (&a_same, 1024),
        (&a_diff, 100),
        (&b_same, 1024),
        (&b_diff, 100),
    ] {
        w.until_values(&[v]).await;
    }
    tokio::time::timeout(
        PROMPT,
        primary.wait_for(|reqs, _| {
            (reqs
                .iter()
                .filter(|r| r.kind == RequestKind::Ack && r.version_info == "p1")
                .count()
                >= 2)
                .then_some(())
        }),
    )
    .await
    .expect("both clients ACK the primary's version");
    assert_eq!(primary.stats().streams, 2, "one ADS stream per target");

    // 2. The primary goes down. Everything is cached: ambient errors, no fallback.
    primary.stop().await;
    for w in [&a_same, &a_diff, &b_same, &b_diff] {
        w.until("an ambient connectivity error", |log| {
            log.iter().any(|s| matches!(s, Seen::Ambient(_)))
        })
        .await;
    }
    // Past the resource timeout and a few reconnection attempts: still no fallback.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        fallback.stats().connections,
        0,
        "no fallback while everything is cached"
    );

    // 3. B watches a cluster it has never had: B falls back, for all of its names.
    let b_new = Recorded::watch("B/c-new", &b, "c-new").await;
    b_new.until_values(&[3]).await;
    b_diff.until_values(&[100, 2]).await;
    let subscription = tokio::time::timeout(
        PROMPT,
        fallback.wait_for(|reqs, _| {
            reqs.iter()
                .find(|r| r.kind == RequestKind::Subscribe && r.type_url == CDS)
                .cloned()
        }),
    )
    .await
    .expect("the fallback gets a subscription");
    assert_eq!(
        subscription
            .resource_names
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from(["c-diff".into(), "c-new".into(), "c-same".into()]),
        "every watched name of B is subscribed on the fallback"
    );
    assert_eq!(subscription.node_id.as_deref(), Some("fallback-node"));
    tokio::time::timeout(
        PROMPT,
        fallback.wait_for(|reqs, _| {
            reqs.iter()
                .any(|r| r.kind == RequestKind::Ack && r.version_info == "f1")
                .then_some(())
        }),
    )
    .await
    .expect("B ACKs the fallback's version");
    // CSDS shows where each target's data comes from.
    let csds = pool.csds_response().await;
    assert_eq!(csds_version(&csds, "xds:///target-b", "c-diff"), "f1");
    assert_eq!(csds_version(&csds, "xds:///target-a", "c-diff"), "p1");
    // Identical bytes from the fallback: B's watcher, which holds the primary's
    // connectivity error, is told the same value again, as the error cleared (A88);
    // A never falls back.
    assert_eq!(b_same.values(), [1024, 1024]);
    assert_eq!(a_same.values(), [1024]);
    assert_eq!(a_diff.values(), [100], "A does not see the fallback's data");
    let fallback_stats = fallback.stats();
    assert_eq!(
        (fallback_stats.streams, fallback_stats.open_streams),
        (1, 1),
        "only B uses the fallback"
    );

    // 4. The primary comes back: its first response switches B back.
    primary.restart();
    b_diff.until_values(&[100, 2, 100]).await;
    b_new.until_values(&[3, 300]).await;
    // A held the primary's connectivity error: the restarted primary re-sends the same
    // c-same and c-diff, told again as the error cleared (A88). Read before step 5's
    // change: a watch stream keeps only the newest unread value, so a reader still
    // behind when 777 arrives would see it in place of the re-sent 1024.
    a_same.until_values(&[1024, 1024]).await;
    a_diff.until_values(&[100, 100]).await;
    tokio::time::timeout(
        PROMPT,
        fallback.wait_for(|_, stats| (stats.open_streams == 0).then_some(())),
    )
    .await
    .expect("the fallback's stream is closed after the switch back");
    let csds = pool.csds_response().await;
    assert_eq!(csds_version(&csds, "xds:///target-b", "c-diff"), "p1");
    assert_eq!(csds_version(&csds, "xds:///target-b", "c-new"), "p1");
    let requests_to_fallback = fallback.requests().len();
    let fallback_stats = fallback.stats();

    // 5. The primary keeps serving both targets; the fallback hears nothing more.
    primary.set_resources(
        CDS,
        "p2",
        vec![
            cluster_with("c-same", 777),
            cluster_with("c-diff", 100),
            cluster_with("c-new", 300),
        ],
    );
    a_same.until_values(&[1024, 1024, 777]).await;
    b_same.until_values(&[1024, 1024, 777]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        fallback.requests().len(),
        requests_to_fallback,
        "no request reaches the fallback after the switch back"
    );
    assert_eq!(fallback.stats().streams, fallback_stats.streams);
    assert_eq!(fallback.stats().open_streams, 0);

    // Nothing lost, nothing spurious: each watcher's whole history.
    assert_eq!(a_same.values(), [1024, 1024, 777]);
    assert_eq!(a_diff.values(), [100, 100]); // the same again: the error cleared
    assert_eq!(b_same.values(), [1024, 1024, 777]);
    assert_eq!(b_diff.values(), [100, 2, 100]);
    assert_eq!(b_new.values(), [3, 300]);
    for w in [&a_same, &a_diff, &b_same, &b_diff, &b_new] {
        w.assert_no_replacing_error();
    }
    assert_eq!(
        b_new.ambient_errors(),
        0,
        "c-new was served by the fallback before any failure was reported to it"
    );
    let csds = pool.csds_response().await;
    for (scope, name) in [
        ("xds:///target-a", "c-same"),
        ("xds:///target-a", "c-diff"),
        ("xds:///target-b", "c-same"),
        ("xds:///target-b", "c-diff"),
        ("xds:///target-b", "c-new"),
    ] {
        assert_eq!(csds_version(&csds, scope, name), "p2", "{scope} {name}");
    }

    drop((a_same, a_diff, b_same, b_diff, b_new));
    pool.shutdown().await;
    assert!(!a.is_running() && !b.is_running());
    primary.stop().await;
    fallback.stop().await;
}
