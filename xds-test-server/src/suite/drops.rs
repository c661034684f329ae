//! Dropped watches: however early or late a watch stream (or the `watch()` future
//! itself) is dropped, its watch leaves the core, so the client unsubscribes from the
//! server and keeps no resource of it.

use std::time::Duration;

use futures::FutureExt;
use xds_adapter_common::{Client, Runtime, WatchStream};
use xds_proto_core::resource::Cds;

use super::{CDS, PROMPT, builder, next_value, server_saw};
use crate::resources::cluster_with;
use crate::{LoopbackServer, RecordedRequest};

/// The names of one phase of the scenario.
fn names(phase: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{phase}-{i}")).collect()
}

/// The cluster no phase drops: it keeps the stream busy with responses throughout.
const KEPT: &str = "kept";

/// Every cluster of the phases and [`KEPT`] at `version` (its `max_requests` changes
/// with it, so every version notifies every watcher).
fn serve(server: &LoopbackServer, phases: &[Vec<String>], version: u32) {
    let names = phases.iter().flatten().map(String::as_str);
    let resources = names
        .chain([KEPT])
        .map(|name| cluster_with(name, version))
        .collect();
    server.set_resources(CDS, &version.to_string(), resources);
}

/// Watches of several hundred clusters, each dropped at a different point of its life:
/// immediately after `watch()` returns, while the `watch()` future is still pending,
/// after the first value, and while the server pushes new versions to every watcher.
/// Afterwards the client holds no resource, and the server's last CDS request names
/// nothing (or the stream is gone).
pub async fn dropped_watches_are_cancelled<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    let phases = [
        names("immediate", 200),
        names("pending", 100),
        names("after-first", 100),
        names("during-updates", 100),
    ];
    serve(&server, &phases, 1);
    let client = builder::<R>(&server.bootstrap_json("drops-node", None))
        .build()
        .expect("client");
    let mut kept = client.watch::<Cds>(KEPT).await.expect("watch");
    next_value(&rt, &mut kept).await;

    for name in &phases[0] {
        drop(client.watch::<Cds>(name).await.expect("watch"));
    }
    for name in &phases[1] {
        // Polled once, then given up on: the driver may or may not have answered.
        let pending = client.watch::<Cds>(name);
        drop(pending.now_or_never());
        rt.sleep(Duration::from_micros(50)).await;
    }
    for name in &phases[2] {
        let mut watch = client.watch::<Cds>(name).await.expect("watch");
        next_value(&rt, &mut watch).await;
    }
    let mut during: Vec<WatchStream<Cds>> = Vec::new();
    for name in &phases[3] {
        during.push(client.watch::<Cds>(name).await.expect("watch"));
    }
    for version in 2..12 {
        serve(&server, &phases, version);
        // Drop a tenth of the watches while the new version is on its way.
        let keep = during.len().saturating_sub(10);
        during.truncate(keep);
        rt.sleep(Duration::from_millis(5)).await;
    }
    assert!(during.is_empty());
    drop(kept);

    let left = snapshot_once_empty(&rt, &client).await;
    assert!(
        left.is_empty(),
        "{} resources are still watched after every watch was dropped, e.g. {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
    server_saw(&rt, &server, "the unsubscription of CDS", |reqs, stats| {
        let last = reqs.iter().rev().find(|r| r.type_url == CDS);
        let unsubscribed = last.is_some_and(|r: &RecordedRequest| r.resource_names.is_empty());
        (unsubscribed || stats.open_streams == 0).then_some(())
    })
    .await;
    client.shutdown().await;
    server.stop().await;
}

/// The names the client still holds once it holds none, or after [`PROMPT`] passes.
async fn snapshot_once_empty<R: Runtime>(rt: &R, client: &Client<R>) -> Vec<String> {
    let deadline = rt.now() + PROMPT;
    loop {
        let snapshot = client.resource_snapshot().await.expect("snapshot");
        let names: Vec<String> = snapshot.iter().map(|s| s.name.to_string()).collect();
        if names.is_empty() || rt.now() >= deadline {
            return names;
        }
        rt.sleep(Duration::from_millis(50)).await;
    }
}
