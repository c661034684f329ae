//! A burst of watches (issue 11 item 22): watches registered one by one in a loop, as
//! an application registers them, reach the server as one subscribing request per
//! type, not as a subscription that grows request by request.

use futures::{StreamExt, future};
use xds_adapter_common::{Runtime, WatchUpdate};
use xds_proto_core::resource::{Cds, Eds, Lds};

use super::{CDS, EDS, LDS, PROMPT, builder, server_saw, within};
use crate::resources::{cluster, endpoints, listener};
use crate::{LoopbackServer, RecordedRequest};

/// A fresh client watches a listener, `N` clusters and `N` endpoint sets, awaiting each
/// `watch()` in turn. Every watcher gets its value, and the server sees exactly one
/// request per type that changes the subscription, naming everything at once: four
/// responses in all, as a client that knew every name up front would get.
///
/// Run it on a single-threaded runtime: `watch()` never waits for the driver, so the
/// whole burst is queued before the driver runs, and the outcome does not depend on how
/// the threads are scheduled.
pub async fn a_burst_of_watches_is_one_request_per_type<R: Runtime>() {
    const N: usize = 500;
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    let names: Vec<String> = (0..N).map(|i| format!("cluster-{i}")).collect();
    server.set_resources(LDS, "1", vec![listener("listener-1", "routes-1")]);
    server.set_resources(CDS, "1", names.iter().map(|n| cluster(n)).collect());
    let sets = names.iter().map(|n| endpoints(n, &[8080])).collect();
    server.set_resources(EDS, "1", sets);
    let client = builder::<R>(&server.bootstrap_json("burst-node", None))
        .build()
        .expect("a client");

    // Each stream yields whether an update was a value.
    let mut streams = Vec::new();
    let lds = client.watch::<Lds>("listener-1").await.expect("watch LDS");
    streams.push(
        lds.map(|u| matches!(u, WatchUpdate::Changed(Ok(_))))
            .boxed(),
    );
    for name in &names {
        let cds = client.watch::<Cds>(name).await.expect("watch CDS");
        streams.push(
            cds.map(|u| matches!(u, WatchUpdate::Changed(Ok(_))))
                .boxed(),
        );
    }
    for name in &names {
        let eds = client.watch::<Eds>(name).await.expect("watch EDS");
        streams.push(
            eds.map(|u| matches!(u, WatchUpdate::Changed(Ok(_))))
                .boxed(),
        );
    }
    let firsts = future::join_all(streams.iter_mut().map(|s| s.next()));
    let firsts = within(&rt, PROMPT, "every watcher's value", firsts).await;
    assert_eq!(firsts.len(), 1 + 2 * N);
    assert!(
        firsts.iter().all(|f| *f == Some(true)),
        "every watcher's first update is its value"
    );

    let requests = server_saw(&rt, &server, "the ACKs of every type", |reqs, stats| {
        (stats.acks >= 3).then(|| reqs.to_vec())
    })
    .await;
    for (type_url, expected) in [(LDS, 1), (CDS, N), (EDS, N)] {
        let subscribing = subscribing_requests(&requests, type_url);
        assert_eq!(
            subscribing,
            vec![expected],
            "{type_url}: the name counts of the requests that changed the subscription"
        );
    }
    assert_eq!(server.stats().responses, 3, "one response per type");
    client.shutdown().await;
    server.stop().await;
}

/// The name counts of the requests of `type_url` whose names differ from the previous
/// request of that type.
fn subscribing_requests(requests: &[RecordedRequest], type_url: &str) -> Vec<usize> {
    let mut last: Option<&Vec<String>> = None;
    let mut counts = Vec::new();
    for r in requests.iter().filter(|r| r.type_url == type_url) {
        if last != Some(&r.resource_names) {
            counts.push(r.resource_names.len());
        }
        last = Some(&r.resource_names);
    }
    counts
}
