//! Outages: the server stopped while the client holds values, absent at startup,
//! silent about a name, closing streams and refusing connections. The watchers keep
//! their values with ambient errors, does-not-exist comes only from a server that
//! answered, and the client resubscribes once the server is back.

use std::time::Duration;

use futures::StreamExt;
use futures::future::{self, Either};
use xds_adapter_common::{ChannelEvent, Runtime, WatchUpdate};
use xds_proto_core::backoff::BackoffConfig;
use xds_proto_core::resource::{Cds, Eds};
use xds_proto_core::{Code, ErrorKind, Instant, ResourceStatusKind, Status};

use super::{
    CDS, EDS, PROMPT, acked, assert_kind, builder, channel_event, next_update, next_value,
    ports_of, ready_updates, server_saw, short_backoff, updates_during, within,
};
use crate::resources::{cluster, cluster_with, endpoints};
use crate::{LoopbackServer, RecordedRequest, RequestKind};

/// The server goes away while the client holds cached values: the watchers get
/// ambient connectivity errors (never does-not-exist, even past the resource timeout),
/// reconnection attempts back off with growing gaps, and when the server is back on
/// the same port the client resubscribes with its cached versions and keeps working.
pub async fn reconnects_after_server_restart<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
    server.set_resources(EDS, "1", vec![endpoints("cluster-1", &[8080])]);
    let backoff = BackoffConfig {
        initial: Duration::from_millis(100),
        multiplier: 2.0,
        jitter: 0.2,
        max: Duration::from_secs(5),
    };
    let client = builder::<R>(&server.bootstrap_json("restart-node", None))
        .backoff(backoff)
        .resource_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let mut events = client.channel_events();
    let mut cds = client.watch::<Cds>("cluster-1").await.expect("watch");
    let mut eds = client.watch::<Eds>("cluster-1").await.expect("watch");
    next_value(&rt, &mut cds).await;
    next_value(&rt, &mut eds).await;
    server_saw(&rt, &server, "the EDS ACK", |reqs, _| {
        acked(reqs, EDS, "1").then_some(())
    })
    .await;

    let stopping_at = rt.now();
    server.stop().await;
    let down_at = rt.now();
    // Cached values stay: the errors are ambient, and none is does-not-exist.
    let e = assert_kind(
        &next_update(&rt, &mut cds).await,
        true,
        ErrorKind::Connectivity,
    );
    assert_eq!(e.status.code, Code::UNAVAILABLE);
    // Stay down well past the resource timeout.
    let mut failures: Vec<Instant> = Vec::new();
    while rt.now().saturating_duration_since(down_at) < Duration::from_millis(1600) {
        let left =
            Duration::from_millis(1600).saturating_sub(rt.now().saturating_duration_since(down_at));
        match future::select(events.next(), rt.sleep(left)).await {
            Either::Left((Some(ChannelEvent::ConnectFailed { .. }), _)) => failures.push(rt.now()),
            Either::Left((Some(_), _)) => {}
            _ => break,
        }
    }
    for update in ready_updates(&mut cds) {
        assert_kind(&update, true, ErrorKind::Connectivity);
    }
    for update in ready_updates(&mut eds) {
        assert_kind(&update, true, ErrorKind::Connectivity);
    }
    assert!(
        failures.len() >= 3,
        "expected several refused attempts, got {failures:?}"
    );
    // The first attempt is at once (the stream had a response), and each retry waits
    // for a backoff that doubles from 100 ms, less at most 20% jitter: attempt k comes
    // at least 80 ms × (2^k - 1) after the stream broke. The times are when this task
    // read the events, never before the attempts, so a loaded machine cannot fail
    // this; a backoff that did not grow would (its third attempt would come before
    // 240 ms). Gaps between read times could shrink when one read was late.
    let offsets: Vec<Duration> = (failures.iter())
        .map(|at| at.saturating_duration_since(stopping_at))
        .collect();
    for (k, after) in offsets.iter().enumerate() {
        let floor = Duration::from_millis(80) * ((1u32 << k) - 1);
        assert!(
            *after >= floor,
            "attempt {k} came {after:?} after the stop, before its backoff floor {floor:?} \
             (attempts at {offsets:?})"
        );
    }

    server.restart();
    let streams_before = server.stats().streams;
    let resubscribed = server_saw(
        &rt,
        &server,
        "the resubscription on a new stream",
        |reqs, _| {
            let new: Vec<RecordedRequest> = reqs
                .iter()
                .filter(|r| r.stream > streams_before && r.kind == RequestKind::Subscribe)
                .cloned()
                .collect();
            [CDS, EDS]
                .iter()
                .all(|t| new.iter().any(|r| r.type_url == *t))
                .then_some(new)
        },
    )
    .await;
    // The new stream resubscribes with the cached versions, the node on its first request.
    let first = resubscribed
        .first()
        .expect("a subscription on the new stream");
    assert!(first.node_id.is_some());
    assert!(
        resubscribed.iter().all(|r| r.version_info == "1"),
        "{resubscribed:#?}"
    );
    // Unchanged resources cause no notification; a new version does.
    server.set_resources(EDS, "2", vec![endpoints("cluster-1", &[8081])]);
    let updates = updates_during(&rt, &mut eds, Duration::from_millis(800)).await;
    let last = updates
        .iter()
        .rev()
        .find_map(|u| u.value().cloned())
        .expect("the new endpoints");
    assert_eq!(ports_of(&last), vec![8081]);
    for update in &updates {
        assert!(
            update.value().is_some()
                || update
                    .error()
                    .is_some_and(|e| e.kind == ErrorKind::Connectivity)
        );
    }
    for update in ready_updates(&mut cds) {
        assert!(
            update
                .error()
                .is_none_or(|e| e.kind != ErrorKind::DoesNotExist),
            "{update:?}"
        );
    }
    let snapshot = client.resource_snapshot().await.expect("snapshot");
    assert!(
        snapshot
            .iter()
            .all(|s| s.status == ResourceStatusKind::Acked),
        "{snapshot:#?}"
    );
    client.shutdown().await;
    server.stop().await;
}

/// No server at startup: the watcher gets a connectivity error naming the failure,
/// no does-not-exist while the server is down (even past the resource timeout), and
/// the resource once the server comes up.
pub async fn server_down_at_startup<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
    server.stop().await;
    let client = builder::<R>(&server.bootstrap_json("down-node", None))
        .backoff(short_backoff())
        .resource_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let mut cds = client.watch::<Cds>("cluster-1").await.expect("watch");
    let e = assert_kind(
        &next_update(&rt, &mut cds).await,
        false,
        ErrorKind::Connectivity,
    );
    assert!(
        e.status.message.contains("TCP connect to 127.0.0.1:"),
        "the reason is reported: {e}"
    );
    let while_down = updates_during(&rt, &mut cds, Duration::from_millis(1500)).await;
    for update in &while_down {
        assert_kind(update, false, ErrorKind::Connectivity);
    }
    let status = client.server_status().await.expect("status");
    assert!(
        status[0].1.is_some(),
        "the server has a standing error: {status:?}"
    );

    server.restart();
    let value = within(&rt, PROMPT, "the cluster after the server started", async {
        loop {
            match cds.next().await.expect("watch open") {
                WatchUpdate::Changed(Ok(v)) => return v,
                other => assert_kind(&other, false, ErrorKind::Connectivity),
            };
        }
    })
    .await;
    assert_eq!(value.name, "cluster-1");
    assert!(client.server_status().await.expect("status")[0].1.is_none());
    client.shutdown().await;
    server.stop().await;
}

/// A subscribed resource the server never sends is reported as does-not-exist once
/// the resource timeout has passed since the subscription was sent, and not before;
/// the resource the server does send is unaffected.
pub async fn does_not_exist_after_timeout<R: Runtime>(timeout: Option<Duration>) {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("present")]);
    let mut b = builder::<R>(&server.bootstrap_json("dne-node", None));
    if let Some(t) = timeout {
        b = b.resource_timeout(t);
    }
    let expected = timeout.unwrap_or(xds_proto_core::client::DEFAULT_RESOURCE_TIMEOUT);
    let client = b.build().expect("client");
    let mut present = client.watch::<Cds>("present").await.expect("watch");
    next_value(&rt, &mut present).await;
    let mut events = client.channel_events();
    // The timer cannot start before the watch exists: a lower bound that does not depend
    // on how late this task sees the driver's events on a loaded machine.
    let watched_at = rt.now();
    let mut missing = client.watch::<Cds>("missing").await.expect("watch");
    let sent_at = channel_event(
        &rt,
        &mut events,
        PROMPT,
        "the subscription to \"missing\"",
        |e| match e {
            ChannelEvent::RequestSent { resource_names, .. }
                if resource_names.iter().any(|n| &**n == "missing") =>
            {
                Some(rt.now())
            }
            _ => None,
        },
    )
    .await;
    let update = within(&rt, expected + PROMPT, "does-not-exist", missing.next())
        .await
        .expect("watch open");
    let fired_at = rt.now();
    let elapsed = fired_at.saturating_duration_since(sent_at);
    let e = assert_kind(&update, false, ErrorKind::DoesNotExist);
    assert_eq!(e.status.code, Code::NOT_FOUND);
    let since_watch = fired_at.saturating_duration_since(watched_at);
    assert!(
        since_watch >= expected,
        "does-not-exist {since_watch:?} after the watch, before the {expected:?} timeout"
    );
    assert!(
        elapsed < expected + Duration::from_secs(2),
        "does-not-exist late: {elapsed:?}"
    );
    assert!(ready_updates(&mut present).is_empty());
    let snapshot = client.resource_snapshot().await.expect("snapshot");
    let status = |name: &str| snapshot.iter().find(|s| &*s.name == name).map(|s| s.status);
    assert_eq!(status("missing"), Some(ResourceStatusKind::DoesNotExist));
    assert_eq!(status("present"), Some(ResourceStatusKind::Acked));
    client.shutdown().await;
    server.stop().await;
}

/// The server ends the stream with a status after responses (as on a max connection
/// age): the client opens a new stream at once on the same connection, resubscribes
/// with its versions, and its watchers hear nothing. Then the server accepts and drops
/// connections: the watchers keep their values with an ambient error, and recover
/// when connections are served again.
pub async fn server_closes_stream_and_refuses_connections<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
    let backoff = BackoffConfig {
        max: Duration::from_millis(300),
        ..short_backoff()
    };
    let client = builder::<R>(&server.bootstrap_json("close-node", None))
        .backoff(backoff)
        .resource_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let mut events = client.channel_events();
    let mut cds = client.watch::<Cds>("cluster-1").await.expect("watch");
    next_value(&rt, &mut cds).await;
    server_saw(&rt, &server, "the ACK", |reqs, _| {
        acked(reqs, CDS, "1").then_some(())
    })
    .await;

    server.close_streams(Status::new(Code::UNAVAILABLE, "max connection age"));
    let status = channel_event(&rt, &mut events, PROMPT, "the stream's end", |e| match e {
        ChannelEvent::StreamClosed { status, .. } => Some(status.clone()),
        _ => None,
    })
    .await;
    assert_eq!(status, Status::new(Code::UNAVAILABLE, "max connection age"));
    let resubscribed = server_saw(&rt, &server, "the resubscription", |reqs, _| {
        reqs.iter().find(|r| r.stream == 2).cloned()
    })
    .await;
    assert_eq!(
        resubscribed.version_info, "1",
        "the new stream resubscribes with the cached version"
    );
    assert_eq!(
        resubscribed.response_nonce, "",
        "nonces do not carry over to a new stream"
    );
    assert!(
        resubscribed.node_id.is_some(),
        "the node goes on the new stream's first request"
    );
    assert_eq!(
        server.stats().connections,
        1,
        "the open connection is reused"
    );
    assert!(
        ready_updates(&mut cds).is_empty(),
        "a stream that saw responses ends silently"
    );

    // From now on connections are accepted and dropped; a restart drops the open one.
    server.refuse_connections(true);
    server.stop().await;
    server.restart();
    let e = assert_kind(
        &next_update(&rt, &mut cds).await,
        true,
        ErrorKind::Connectivity,
    );
    assert!(e.status.message.contains("127.0.0.1"), "{e}");
    let refused_before = server.stats().connections;
    let while_refused = updates_during(&rt, &mut cds, Duration::from_millis(900)).await;
    for update in &while_refused {
        assert_kind(update, true, ErrorKind::Connectivity);
    }
    assert!(
        server.stats().connections > refused_before,
        "the client kept retrying"
    );
    server.refuse_connections(false);
    server_saw(
        &rt,
        &server,
        "a new stream after the refusals",
        |reqs, _| {
            reqs.iter()
                .any(|r| r.stream > 2 && r.kind == RequestKind::Subscribe)
                .then_some(())
        },
    )
    .await;
    server.set_resources(CDS, "2", vec![cluster_with("cluster-1", 5)]);
    let updates = updates_during(&rt, &mut cds, Duration::from_millis(800)).await;
    let last = updates
        .iter()
        .rev()
        .find_map(|u| u.value().cloned())
        .expect("the new version");
    assert_eq!(last.max_requests, 5);
    client.shutdown().await;
    server.stop().await;
}
