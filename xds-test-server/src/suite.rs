//! The adapters' integration scenarios, written once and generic over the
//! [`Runtime`]: each adapter's test crate runs every scenario on its own runtime.
//!
//! Every scenario starts its own [`LoopbackServer`] on 127.0.0.1 (port 0), drives a
//! real client against it, asserts what the watchers and the server saw, and shuts
//! both down. Elapsed times are read from the runtime's clock, so the scenarios also
//! hold under tokio's paused clock.

mod a78;
mod burst;
mod client_closes;
mod delta;
mod drops;
mod faults;
mod load;
mod outages;

pub use a78::{metrics_exported_on_interval, xds_client_metrics};
pub use burst::{
    a_burst_from_many_tasks_is_one_request_per_type, a_burst_of_watches_is_one_request_per_type,
};
pub use client_closes::client_closed_streams_are_published;
pub use delta::{
    delta_session, delta_silence_is_does_not_exist_after_the_timer,
    delta_undecodable_response_closes_the_stream, istiod_delta_behaviour,
};
pub use drops::dropped_watches_are_cancelled;
pub use faults::{
    a_stream_after_goaway_goes_on_a_new_connection, default_keepalive_detects_a_silent_server,
    goaway_rotations_use_fresh_connections, no_settings_is_a_connect_failure_then_fallback,
    silent_server_mid_stream,
};
pub use load::{
    SlowDriver, slow_driver_slows_a_fast_server, stuck_watcher_holds_only_the_newest_state,
};
pub use outages::{
    does_not_exist_after_timeout, reconnects_after_server_restart,
    server_closes_stream_and_refuses_connections, server_down_at_startup,
};

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use futures::future::{self, Either};
use futures::{FutureExt, StreamExt};
use xds_adapter_common::{
    ChannelEvent, ChannelEventStream, Client, ClientBuilder, Runtime, WatchStream, WatchUpdate,
};
use xds_proto_core::backoff::BackoffConfig;
use xds_proto_core::resource::endpoint::EndpointsResource;
use xds_proto_core::resource::listener::{ListenerKind, RouteSource};
use xds_proto_core::resource::route::{ClusterSpecifier, RouteAction};
use xds_proto_core::resource::{Cds, ClusterType, Eds, Lds, Rds, type_url};
use xds_proto_core::{
    Bootstrap, Code, ErrorKind, ResourceStatusKind, Status, XdsError, XdsResourceType,
};

use crate::resources::{
    cluster, cluster_with, endpoints, invalid_cluster, listener, padded_cluster, route_config,
};
#[cfg(feature = "tls")]
use crate::tls::TestPki;
use crate::{LoopbackServer, RecordedRequest, RequestKind};

const LDS: &str = type_url::LISTENER;
const RDS: &str = type_url::ROUTE_CONFIGURATION;
const CDS: &str = type_url::CLUSTER;
const EDS: &str = type_url::CLUSTER_LOAD_ASSIGNMENT;

/// How long a scenario waits for something that should happen promptly.
pub const PROMPT: Duration = Duration::from_secs(10);

/// Awaits `fut` for at most `limit` on the runtime's clock.
///
/// # Panics
/// When the limit passes first, naming `what`.
pub async fn within<R: Runtime, F: Future>(
    rt: &R,
    limit: Duration,
    what: &str,
    fut: F,
) -> F::Output {
    match future::select(pin!(fut), rt.sleep(limit)).await {
        Either::Left((out, _)) => out,
        Either::Right(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// The next update of a watch, within [`PROMPT`].
///
/// # Panics
/// When none comes, or the stream ends.
pub async fn next_update<R: Runtime, T: XdsResourceType>(
    rt: &R,
    watch: &mut WatchStream<T>,
) -> WatchUpdate<T::Value> {
    let name = watch.name().to_string();
    within(rt, PROMPT, &format!("an update of {name:?}"), watch.next())
        .await
        .unwrap_or_else(|| panic!("the watch of {name:?} ended"))
}

/// The next update of a watch, which must be a value.
///
/// # Panics
/// When it is not.
pub async fn next_value<R: Runtime, T: XdsResourceType>(
    rt: &R,
    watch: &mut WatchStream<T>,
) -> std::sync::Arc<T::Value> {
    match next_update(rt, watch).await {
        WatchUpdate::Changed(Ok(v)) => v,
        other => panic!("expected a value of {:?}, got {other:?}", watch.name()),
    }
}

/// Whatever updates arrive on `watch` during `span`.
pub async fn updates_during<R: Runtime, T: XdsResourceType>(
    rt: &R,
    watch: &mut WatchStream<T>,
    span: Duration,
) -> Vec<WatchUpdate<T::Value>> {
    let mut out = Vec::new();
    let deadline = rt.now() + span;
    loop {
        let left = deadline.saturating_duration_since(rt.now());
        if left.is_zero() {
            return out;
        }
        match future::select(watch.next(), rt.sleep(left)).await {
            Either::Left((Some(u), _)) => out.push(u),
            Either::Left((None, _)) | Either::Right(_) => return out,
        }
    }
}

/// The updates already waiting on `watch`.
pub fn ready_updates<T: XdsResourceType>(watch: &mut WatchStream<T>) -> Vec<WatchUpdate<T::Value>> {
    let mut out = Vec::new();
    while let Some(Some(u)) = watch.next().now_or_never() {
        out.push(u);
    }
    out
}

/// Waits for a channel event matching `pick`, within `limit`.
pub async fn channel_event<R: Runtime, T>(
    rt: &R,
    events: &mut ChannelEventStream,
    limit: Duration,
    what: &str,
    mut pick: impl FnMut(&ChannelEvent) -> Option<T>,
) -> T {
    within(rt, limit, what, async {
        while let Some(e) = events.next().await {
            if let Some(t) = pick(&e) {
                return t;
            }
        }
        panic!("the client stopped while waiting for {what}")
    })
    .await
}

/// Waits until the server's record satisfies `done`, within [`PROMPT`].
pub async fn server_saw<R: Runtime, T>(
    rt: &R,
    server: &LoopbackServer,
    what: &str,
    done: impl FnMut(&[RecordedRequest], &crate::ServerStats) -> Option<T>,
) -> T {
    within(rt, PROMPT, what, server.wait_for(done)).await
}

/// Reconnection backoff short enough for several attempts within a test: 100 ms,
/// growing 1.6 times, up to 400 ms.
fn short_backoff() -> BackoffConfig {
    BackoffConfig {
        initial: Duration::from_millis(100),
        multiplier: 1.6,
        jitter: 0.2,
        max: Duration::from_millis(400),
    }
}

fn builder<R: Runtime>(json: &str) -> ClientBuilder<R> {
    Client::<R>::builder(Bootstrap::from_json_str(json).expect("the test bootstrap parses")).seed(7)
}

fn acked(requests: &[RecordedRequest], type_url: &str, version: &str) -> bool {
    requests
        .iter()
        .any(|r| r.kind == RequestKind::Ack && r.type_url == type_url && r.version_info == version)
}

fn serve_chain(server: &LoopbackServer, version: &str, ports: &[u32]) {
    server.set_resources(LDS, version, vec![listener("listener-1", "routes-1")]);
    server.set_resources(RDS, version, vec![route_config("routes-1", "cluster-1")]);
    server.set_resources(CDS, version, vec![cluster("cluster-1")]);
    server.set_resources(EDS, version, vec![endpoints("cluster-1", ports)]);
}

fn ports_of(e: &EndpointsResource) -> Vec<u16> {
    e.priorities
        .iter()
        .flat_map(|p| &p.localities)
        .flat_map(|l| &l.endpoints)
        .map(|e| e.address.port())
        .collect()
}

fn assert_kind(update: &WatchUpdate<impl Sized>, ambient: bool, kind: ErrorKind) -> XdsError {
    let (is_ambient, e) = match update {
        WatchUpdate::AmbientError(e) => (true, e),
        WatchUpdate::Changed(Err(e)) => (false, e),
        WatchUpdate::Changed(Ok(_)) => panic!("expected a {kind:?} error, got a value"),
    };
    assert_eq!(
        (is_ambient, e.kind),
        (ambient, kind),
        "unexpected update: {e}"
    );
    e.clone()
}

/// The whole chain: a listener names its route configuration, whose route names a
/// cluster, whose endpoints arrive over EDS; every type is ACKed with its version, the
/// node goes only on the stream's first request, a later update reaches the watcher,
/// and shutdown ends every watch stream.
pub async fn full_chain<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    serve_chain(&server, "1", &[8080, 8081]);
    let client = builder::<R>(&server.bootstrap_json("chain-node", None))
        .build()
        .expect("client");

    let mut lds = client.watch::<Lds>("listener-1").await.expect("watch LDS");
    let l = next_value(&rt, &mut lds).await;
    let ListenerKind::Client(hcm) = &l.kind else {
        panic!("not a client listener: {l:?}")
    };
    let RouteSource::Rds(rds_name) = &hcm.route_config else {
        panic!("routes not from RDS: {hcm:?}")
    };
    assert_eq!(rds_name, "routes-1");

    let mut rds = client.watch::<Rds>(rds_name).await.expect("watch RDS");
    let r = next_value(&rt, &mut rds).await;
    let route = &r.virtual_hosts[0].routes[0];
    let RouteAction::Forward(action) = &route.action else {
        panic!("not a forwarding route: {route:?}")
    };
    let ClusterSpecifier::Cluster(cluster_name) = &action.cluster else {
        panic!("not one cluster: {action:?}")
    };
    assert_eq!(cluster_name, "cluster-1");

    let mut cds = client.watch::<Cds>(cluster_name).await.expect("watch CDS");
    let c = next_value(&rt, &mut cds).await;
    let ClusterType::Eds { service_name } = &c.cluster_type else {
        panic!("not an EDS cluster: {c:?}")
    };
    let eds_name = service_name.clone().unwrap_or_else(|| c.name.clone());

    let mut eds = client.watch::<Eds>(&eds_name).await.expect("watch EDS");
    let e = next_value(&rt, &mut eds).await;
    assert_eq!(ports_of(&e), vec![8080, 8081]);

    let requests = server_saw(
        &rt,
        &server,
        "ACKs of every type at version 1",
        |reqs, _| {
            [LDS, RDS, CDS, EDS]
                .iter()
                .all(|t| acked(reqs, t, "1"))
                .then(|| reqs.to_vec())
        },
    )
    .await;
    assert_eq!(
        requests[0].node_id.as_deref(),
        Some("chain-node"),
        "the first request carries the node"
    );
    assert!(
        requests[1..].iter().all(|r| r.node_id.is_none()),
        "only the first request carries the node"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.stream == 1 && r.kind != RequestKind::Nack),
        "{requests:#?}"
    );

    // An update reaches the watcher and is ACKed.
    server.set_resources(EDS, "2", vec![endpoints("cluster-1", &[9090])]);
    let e = next_value(&rt, &mut eds).await;
    assert_eq!(ports_of(&e), vec![9090]);
    server_saw(&rt, &server, "the ACK of EDS version 2", |reqs, _| {
        acked(reqs, EDS, "2").then_some(())
    })
    .await;

    let csds = client.csds_configs().await.expect("CSDS");
    assert_eq!(csds.len(), 4);
    assert!(
        csds.iter().all(|c| c.client_status == 3 /* ACKED */),
        "{csds:#?}"
    );

    client.shutdown().await;
    assert!(
        lds.next().await.is_none(),
        "shutdown ends the watch streams"
    );
    assert!(eds.next().await.is_none());
    assert!(!client.is_running());
    assert!(
        client.watch::<Cds>("x").await.is_err(),
        "a stopped client refuses watches"
    );
    server.stop().await;
}

/// A response with one valid and one invalid cluster: the valid one is used, the
/// invalid one is reported to its watcher, and the response is NACKed with the last
/// ACKed version, its nonce and the reason.
pub async fn invalid_resource_is_nacked<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("good")]);
    let client = builder::<R>(&server.bootstrap_json("nack-node", None))
        .build()
        .expect("client");
    let mut good = client.watch::<Cds>("good").await.expect("watch");
    assert_eq!(next_value(&rt, &mut good).await.max_requests, 1024);
    let mut bad = client.watch::<Cds>("bad").await.expect("watch");
    server_saw(
        &rt,
        &server,
        "the ACK of version 1 for both names",
        |reqs, _| {
            reqs.iter()
                .any(|r| {
                    r.kind == RequestKind::Ack
                        && r.version_info == "1"
                        && r.resource_names.len() == 2
                })
                .then_some(())
        },
    )
    .await;

    server.set_resources(
        CDS,
        "2",
        vec![cluster_with("good", 7), invalid_cluster("bad")],
    );
    assert_eq!(
        next_value(&rt, &mut good).await.max_requests,
        7,
        "the valid resource is applied"
    );
    let e = assert_kind(&next_update(&rt, &mut bad).await, false, ErrorKind::Invalid);
    assert!(e.status.message.contains("\"bad\""), "{e}");

    let nack = server_saw(&rt, &server, "a NACK", |reqs, _| {
        reqs.iter().find(|r| r.kind == RequestKind::Nack).cloned()
    })
    .await;
    assert_eq!(nack.type_url, CDS);
    assert_eq!(
        nack.version_info, "1",
        "a NACK carries the last ACKed version"
    );
    let detail = nack.error_detail.expect("error detail");
    // The server sends resources in name order: "bad" is at index 0.
    assert!(detail.starts_with("resource index 0: bad: "), "{detail}");

    let snapshot = client.resource_snapshot().await.expect("snapshot");
    let status = |name: &str| snapshot.iter().find(|s| &*s.name == name).map(|s| s.status);
    assert_eq!(status("good"), Some(ResourceStatusKind::Acked));
    assert_eq!(status("bad"), Some(ResourceStatusKind::Nacked));

    // Fixing it is ACKed again.
    server.set_resources(CDS, "3", vec![cluster_with("good", 7), cluster("bad")]);
    assert_eq!(next_value(&rt, &mut bad).await.name, "bad");
    server_saw(&rt, &server, "the ACK of version 3", |reqs, _| {
        acked(reqs, CDS, "3").then_some(())
    })
    .await;
    client.shutdown().await;
    server.stop().await;
}

/// mTLS against a test CA: a client with the CA and its certificate gets the
/// resource; one without a client certificate, and one trusting another CA, get a
/// connectivity error naming the TLS failure.
#[cfg(feature = "tls")]
pub async fn tls_with_test_ca<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let pki = TestPki::generate();
    let server = LoopbackServer::start_tls(pki.server_config(true));
    server.set_resources(LDS, "1", vec![listener("secure-listener", "routes")]);
    let (ca, cert, key) = (
        pki.path("ca.pem"),
        pki.path("client.pem"),
        pki.path("client.key"),
    );

    let client = builder::<R>(&server.bootstrap_json("tls-node", Some((&ca, Some((&cert, &key))))))
        .build()
        .expect("client");
    let mut lds = client.watch::<Lds>("secure-listener").await.expect("watch");
    assert_eq!(next_value(&rt, &mut lds).await.name, "secure-listener");
    server_saw(&rt, &server, "the ACK over TLS", |reqs, _| {
        acked(reqs, LDS, "1").then_some(())
    })
    .await;
    client.shutdown().await;

    // No client certificate: the server refuses the handshake.
    let no_cert = builder::<R>(&server.bootstrap_json("tls-node", Some((&ca, None))))
        .build()
        .expect("client");
    let mut lds = no_cert
        .watch::<Lds>("secure-listener")
        .await
        .expect("watch");
    let e = assert_kind(
        &next_update(&rt, &mut lds).await,
        false,
        ErrorKind::Connectivity,
    );
    assert!(e.status.message.contains("127.0.0.1"), "{e}");
    no_cert.shutdown().await;

    // Another CA: the client rejects the server's certificate.
    let other = TestPki::generate();
    let other_ca = other.path("ca.pem");
    let wrong_ca =
        builder::<R>(&server.bootstrap_json("tls-node", Some((&other_ca, Some((&cert, &key))))))
            .build()
            .expect("client");
    let mut lds = wrong_ca
        .watch::<Lds>("secure-listener")
        .await
        .expect("watch");
    let e = assert_kind(
        &next_update(&rt, &mut lds).await,
        false,
        ErrorKind::Connectivity,
    );
    assert!(e.status.message.contains("TLS handshake"), "{e}");
    assert!(e.status.message.contains("invalid peer certificate"), "{e}");
    wrong_ca.shutdown().await;
    server.stop().await;
}

/// A65: `tls` channel credentials are read as a `file_watcher` reads its files, so a
/// client certificate file gone bad keeps the last good certificate in use: after the
/// refresh interval (1 s) the key file holds garbage, the server restarts, and the
/// client reconnects over mTLS all the same and gets the new resource version. (Read
/// at each connection attempt, as before A65's watcher, the reconnect failed.)
#[cfg(feature = "tls")]
pub async fn tls_credentials_keep_the_last_good_certificates<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let pki = TestPki::generate();
    let server = LoopbackServer::start_tls(pki.server_config(true));
    server.set_resources(LDS, "1", vec![listener("secure-listener", "routes-1")]);
    let (ca, cert, key) = (
        pki.path("ca.pem"),
        pki.path("client.pem"),
        pki.path("client.key"),
    );
    let json = server
        .bootstrap_json("tls-node", Some((&ca, Some((&cert, &key)))))
        .replacen(
            r#""config": {"#,
            r#""config": {"refresh_interval": "1s", "#,
            1,
        );
    let client = builder::<R>(&json)
        .backoff(short_backoff())
        .build()
        .expect("client");
    let mut lds = client.watch::<Lds>("secure-listener").await.expect("watch");
    assert_eq!(next_value(&rt, &mut lds).await.name, "secure-listener");

    std::fs::write(&key, "not a key").expect("spoil the key file");
    rt.sleep(Duration::from_millis(1_100)).await;
    server.stop().await;
    server.set_resources(LDS, "2", vec![listener("secure-listener", "routes-2")]);
    server.restart();
    // The outage's connectivity errors first (ambient: the value stays), then the value.
    let reconnected = async {
        loop {
            match next_update(&rt, &mut lds).await {
                WatchUpdate::Changed(Ok(listener)) => break listener,
                WatchUpdate::AmbientError(e) => tracing::debug!(%e, "during the restart"),
                other => panic!("expected the new value, got {other:?}"),
            }
        }
    };
    let listener = within(&rt, PROMPT, "the new value after the restart", reconnected).await;
    let ListenerKind::Client(hcm) = &listener.kind else {
        panic!("not a client listener: {listener:?}")
    };
    assert_eq!(
        hcm.route_config,
        RouteSource::Rds("routes-2".into()),
        "reconnected with the last good certificate"
    );
    client.shutdown().await;
    server.stop().await;
}

/// A 21 MB response arrives with the default receive limit; with a 1 MiB limit the
/// stream fails (tonic's OUT_OF_RANGE, "message length too large"), reported as a
/// connectivity error.
pub async fn large_responses<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![padded_cluster("big", 21 * 1000 * 1000)]);
    let client = builder::<R>(&server.bootstrap_json("big-node", None))
        .build()
        .expect("client");
    let mut cds = client.watch::<Cds>("big").await.expect("watch");
    assert_eq!(next_value(&rt, &mut cds).await.name, "big");
    client.shutdown().await;

    let small = builder::<R>(&server.bootstrap_json("big-node", None))
        .max_receive_message_size(1024 * 1024)
        .build()
        .expect("client");
    let mut events = small.channel_events();
    let mut cds = small.watch::<Cds>("big").await.expect("watch");
    let status: Status = channel_event(
        &rt,
        &mut events,
        PROMPT,
        "the stream's failure",
        |e| match e {
            ChannelEvent::StreamClosed { status, .. } => Some(status.clone()),
            _ => None,
        },
    )
    .await;
    // tonic reports an oversized message as OUT_OF_RANGE.
    assert_eq!(status.code, Code::OUT_OF_RANGE, "{status}");
    assert!(status.message.contains("too large"), "{status}");
    assert_kind(
        &next_update(&rt, &mut cds).await,
        false,
        ErrorKind::Connectivity,
    );
    small.shutdown().await;
    server.stop().await;
}
