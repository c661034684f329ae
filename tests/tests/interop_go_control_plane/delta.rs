//! The same chain over delta xDS (`DeltaAggregatedResources`), against
//! go-control-plane's delta server on its snapshot cache, which gives each resource a
//! version (a hash of its bytes) and sends a delta stream only what differs from what
//! the stream has:
//! 1. the listener, its route configuration, 1,000 clusters and their endpoints
//!    arrive and every response is ACKed, with no NACK, on one delta stream;
//! 2. a change of one cluster is one resource on the wire (one small response) and
//!    reaches that cluster's watcher alone;
//! 3. a removed cluster is named in `removed_resources` (with its endpoints): its
//!    watchers keep their values with an ambient error (gRFC A88);
//! 4. after the server drops every connection, the client reconnects naming every
//!    resource it holds in `initial_resource_versions`, and the server sends nothing:
//!    zero bytes arrive and no watcher gets a value.

use futures::FutureExt;
use xds_adapter_tokio::ChannelEvent;
use xds_proto_core::ErrorKind;

use super::*;

/// The cluster the test changes, and the one it removes.
const TOUCHED: usize = 7;
const REMOVED: usize = 9;

/// How long the test waits for something that must not happen.
const QUIET: Duration = Duration::from_secs(2);

/// Every update that arrives during `span`, unapplied.
async fn updates_during(updates: &mut Updates, span: Duration) -> Vec<Update> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + span;
    while let Ok(Some(update)) = tokio::time::timeout_at(deadline, updates.next()).await {
        out.push(update);
    }
    out
}

/// The bytes of every response received since the last call.
fn bytes_received(events: &mut xds_adapter_tokio::ChannelEventStream) -> Vec<usize> {
    let mut out = Vec::new();
    while let Some(Some(event)) = events.next().now_or_never() {
        if let ChannelEvent::ResponseReceived { bytes, .. } = event {
            out.push(bytes);
        }
    }
    out
}

fn describe(update: &Update) -> String {
    match update {
        Update::Listener(u) => format!("listener: {u:?}"),
        Update::Route(_) => "route configuration".to_string(),
        Update::Cluster(i, u) => format!("{}: {u:?}", cluster_name(*i)),
        Update::Endpoints(i, u) => format!("endpoints of {}: {u:?}", cluster_name(*i)),
    }
}

/// Whether every response of every type was ACKed or NACKed: the client answers
/// each delta response by its own request, in order, even when a newer response
/// arrives before the answer goes out.
fn settled(stats: &Stats) -> bool {
    [LDS_URL, RDS_URL, CDS_URL, EDS_URL]
        .iter()
        .all(|t| stats.of(t, "settled") == "true")
        && stats.total("unanswered") == 0
}

/// Polls `stats` until `done` holds (or 30 s pass), and returns the last answer.
async fn wait_stats(server: &mut GoServer, done: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = server.stats().await;
        if done(&stats) || Instant::now() > deadline {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_adapter_follows_go_control_plane_over_delta() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let started = Instant::now();
    let mut server = GoServer::start(&binary, "delta", true).await;
    eprintln!(
        "delta: go-control-plane server on 127.0.0.1:{} (log: {})",
        server.port,
        server.stderr_path.display()
    );
    let json = bootstrap_with(server.port, r#", "api_type": "AGGREGATED_DELTA_GRPC""#);
    let client = Client::from_bootstrap_json(&json).expect("client");
    let mut events = client.channel_events();
    let (mut updates, mut got) = watch_listener(&client).await;

    // 1. The whole chain, every response ACKed on one delta stream.
    run_until(
        &client,
        &server,
        &mut updates,
        &mut got,
        "the chain over delta",
        |g| {
            g.listener.is_some()
                && g.route.is_some()
                && g.clusters.len() == CLUSTERS
                && g.endpoints_at(1)
        },
    )
    .await;
    let phase1 = started.elapsed();
    let stats = wait_stats(&mut server, |s| s.all_acked("1") && settled(s)).await;
    assert!(
        stats.all_acked("1") && settled(&stats),
        "{stats:#?}{}",
        server.stderr_tail()
    );
    assert_eq!(stats.total("nacks"), 0, "{:#?}", server.nacks);
    assert_eq!(
        (stats.total("streams"), stats.total("delta_streams")),
        (1, 1),
        "{stats:#?}"
    );
    let initial_bytes: usize = bytes_received(&mut events).iter().sum();
    eprintln!(
        "delta: version 1 ({initial_bytes} bytes in {} responses, {} ACKs) in {phase1:.2?}",
        stats.total("responses"),
        stats.total("acks")
    );

    // 2. One cluster changes: one resource on the wire, one watcher told.
    server.send(&format!("touch-cluster {TOUCHED}"));
    assert_eq!(
        server
            .expect_line("UPDATED ", Duration::from_secs(30))
            .await,
        "UPDATED 2"
    );
    let stats = wait_stats(&mut server, |s| s.of(CDS_URL, "acked") == "2" && settled(s)).await;
    assert_eq!(
        stats.of(CDS_URL, "acked"),
        "2",
        "{stats:#?}{}",
        server.stderr_tail()
    );
    assert!(settled(&stats), "{stats:#?}");
    assert_eq!(
        (stats.of(CDS_URL, "resources"), stats.of(CDS_URL, "removed")),
        ("1", "0"),
        "one cluster on the wire"
    );
    let arrived = updates_during(&mut updates, QUIET).await;
    let told: Vec<String> = arrived.iter().map(describe).collect();
    assert!(
        matches!(&arrived[..], [Update::Cluster(TOUCHED, WatchUpdate::Changed(Ok(c)))] if c.max_requests == 100),
        "only cluster {TOUCHED} changed: {told:#?}"
    );
    let bytes = bytes_received(&mut events);
    assert!(
        bytes.len() == 1 && bytes[0] < 1000,
        "one small response for one cluster, not the {initial_bytes} bytes of the first fetch: {bytes:?}"
    );
    eprintln!(
        "delta: one cluster changed: one response of {} bytes",
        bytes[0]
    );

    // 3. A removed cluster (and its endpoints): ambient errors, values kept.
    server.send(&format!("remove-cluster {REMOVED}"));
    assert_eq!(
        server
            .expect_line("UPDATED ", Duration::from_secs(30))
            .await,
        "UPDATED 3"
    );
    let stats = wait_stats(&mut server, |s| {
        s.of(CDS_URL, "acked") == "3" && s.of(EDS_URL, "acked") == "3" && settled(s)
    })
    .await;
    assert!(settled(&stats), "{stats:#?}");
    for url in [CDS_URL, EDS_URL] {
        assert_eq!(
            stats.of(url, "acked"),
            "3",
            "{url}: {stats:#?}{}",
            server.stderr_tail()
        );
        assert_eq!(
            (stats.of(url, "resources"), stats.of(url, "removed")),
            ("0", "1"),
            "{url}"
        );
    }
    let arrived = updates_during(&mut updates, QUIET).await;
    let told: Vec<String> = arrived.iter().map(describe).collect();
    assert_eq!(arrived.len(), 2, "{told:#?}");
    for update in &arrived {
        let error = match update {
            Update::Cluster(REMOVED, WatchUpdate::AmbientError(e))
            | Update::Endpoints(REMOVED, WatchUpdate::AmbientError(e)) => e,
            _ => panic!("only cluster {REMOVED} and its endpoints were removed: {told:#?}"),
        };
        assert_eq!(error.kind, ErrorKind::DeletionIgnored, "{error}");
    }
    bytes_received(&mut events);

    // 4. A reconnect: the client names what it holds, and nothing comes back.
    let responses_before = server.stats().await.total("responses");
    server.send("restart");
    server
        .expect_line("RESTARTED ", Duration::from_secs(30))
        .await;
    let stats = wait_stats(&mut server, |s| {
        s.total("delta_streams") == 2
            && [LDS_URL, RDS_URL, CDS_URL, EDS_URL]
                .iter()
                .all(|t| s.of(t, "initial") != "0")
    })
    .await;
    assert_eq!(
        stats.total("delta_streams"),
        2,
        "{stats:#?}{}",
        server.stderr_tail()
    );
    assert_eq!(stats.of(LDS_URL, "initial"), "1", "{stats:#?}");
    assert_eq!(stats.of(RDS_URL, "initial"), "1", "{stats:#?}");
    // Every cluster and endpoint set it holds, the removed one's excepted.
    let held = (CLUSTERS - 1).to_string();
    assert_eq!(stats.of(CDS_URL, "initial"), held, "{stats:#?}");
    assert_eq!(stats.of(EDS_URL, "initial"), held, "{stats:#?}");
    let arrived = updates_during(&mut updates, QUIET).await;
    for update in &arrived {
        match update {
            Update::Listener(WatchUpdate::AmbientError(e))
            | Update::Cluster(_, WatchUpdate::AmbientError(e))
            | Update::Endpoints(_, WatchUpdate::AmbientError(e))
                if e.kind == ErrorKind::Connectivity => {}
            Update::Route(WatchUpdate::AmbientError(e)) if e.kind == ErrorKind::Connectivity => {}
            other => panic!("nothing changed, yet: {}", describe(other)),
        }
    }
    let stats = server.stats().await;
    assert_eq!(
        stats.total("responses"),
        responses_before,
        "the server sent nothing on the new stream{}",
        server.stderr_tail()
    );
    let bytes = bytes_received(&mut events);
    assert!(
        bytes.is_empty(),
        "bytes received after the reconnect: {bytes:?}"
    );
    assert_eq!(stats.total("nacks"), 0, "{:#?}", server.nacks);
    eprintln!(
        "delta: reconnect with {} initial_resource_versions: 0 bytes received; {:.2?} in all",
        2 + 2 * (CLUSTERS - 1),
        started.elapsed()
    );

    drop(updates);
    client.shutdown().await;
    server.keep_log = false;
    drop(server);
}
