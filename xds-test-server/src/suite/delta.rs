//! Delta (incremental) xDS sessions against the loopback server: what goes on the
//! wire (one changed resource is one resource, a removal names only what went, a new
//! stream names what the client holds and gets nothing unchanged), and how the client
//! copes with a server that behaves as istiod does on delta.

use std::time::Duration;

use xds_adapter_common::{ChannelEvent, Runtime};
use xds_proto_core::resource::{Cds, Eds};
use xds_proto_core::{Code, ErrorKind, Status};

use super::{
    CDS, EDS, PROMPT, assert_kind, builder, channel_event, next_update, next_value, ports_of,
    server_saw, updates_during,
};
use crate::resources::{cluster, cluster_with, endpoints};
use crate::{DeltaQuirks, LoopbackServer, RecordedRequest, RecordedResponse, RequestKind};

/// How long a scenario watches for something that must not happen.
const QUIET: Duration = Duration::from_millis(500);

/// The delta requests of one type, in order.
fn delta_requests<'a>(
    requests: &'a [RecordedRequest],
    type_url: &'a str,
) -> impl Iterator<Item = &'a RecordedRequest> {
    requests
        .iter()
        .filter(move |r| r.type_url == type_url && r.delta.is_some())
}

/// Whether the response with this nonce was ACKed.
fn acked_nonce(requests: &[RecordedRequest], nonce: &str) -> bool {
    requests
        .iter()
        .any(|r| r.kind == RequestKind::Ack && r.response_nonce == nonce)
}

/// Waits for the first response after the first `after` ones that `pick` accepts.
async fn server_sent<R: Runtime>(
    rt: &R,
    server: &LoopbackServer,
    after: usize,
    what: &str,
    pick: impl Fn(&RecordedResponse) -> bool,
) -> RecordedResponse {
    super::within(
        rt,
        PROMPT,
        what,
        server.wait_for_responses(|responses| {
            responses.iter().skip(after).find(|r| pick(r)).cloned()
        }),
    )
    .await
}

/// A delta session from its first request to a reconnect: the initial fetch (delta
/// requests only, the node on the first, every response ACKed by its nonce); an
/// update of one of two clusters sends that one alone and only its watcher hears of
/// it; a removal names only the removed cluster, whose watcher keeps its value with
/// an ambient error (gRFC A88); on a new stream the client names the versions it
/// holds in `initial_resource_versions` (not the removed one's), the server sends
/// nothing unchanged, and no watcher hears of anything but the lost stream.
pub async fn delta_session<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1"), cluster("cluster-2")]);
    server.set_resources(EDS, "1", vec![endpoints("cluster-1", &[8080])]);
    let client = builder::<R>(&server.delta_bootstrap_json("delta-node"))
        .build()
        .expect("client");
    let mut events = client.channel_events();
    let mut one = client.watch::<Cds>("cluster-1").await.expect("watch");
    let mut two = client.watch::<Cds>("cluster-2").await.expect("watch");
    let mut eds = client.watch::<Eds>("cluster-1").await.expect("watch");
    assert_eq!(next_value(&rt, &mut one).await.max_requests, 1024);
    assert_eq!(next_value(&rt, &mut two).await.max_requests, 1024);
    assert_eq!(ports_of(&*next_value(&rt, &mut eds).await), vec![8080]);
    let initial = server.responses();
    assert!(initial.iter().all(|r| r.delta), "{initial:#?}");
    let requests = server_saw(&rt, &server, "the ACK of every response", |reqs, _| {
        initial
            .iter()
            .all(|r| acked_nonce(reqs, &r.nonce))
            .then(|| reqs.to_vec())
    })
    .await;
    assert!(
        requests.iter().all(|r| r.delta.is_some() && r.stream == 1),
        "{requests:#?}"
    );
    assert_eq!(requests[0].node_id.as_deref(), Some("delta-node"));
    assert!(
        requests[1..].iter().all(|r| r.node_id.is_none()),
        "{requests:#?}"
    );
    let subscribed: Vec<String> = delta_requests(&requests, CDS)
        .flat_map(|r| r.delta.as_ref().unwrap().subscribe.clone())
        .collect();
    assert_eq!(
        subscribed,
        ["cluster-1", "cluster-2"],
        "each name subscribed once"
    );

    // One cluster changes: one resource on the wire, one watcher told.
    let before = server.responses().len();
    server.set_resources(
        CDS,
        "2",
        vec![cluster("cluster-1"), cluster_with("cluster-2", 7)],
    );
    assert_eq!(next_value(&rt, &mut two).await.max_requests, 7);
    let update = server_sent(&rt, &server, before, "the CDS update", |r| {
        r.type_url == CDS
    })
    .await;
    assert_eq!(
        (update.resources.as_slice(), update.removed.len()),
        (&["cluster-2".to_string()][..], 0)
    );
    assert!(
        updates_during(&rt, &mut one, QUIET).await.is_empty(),
        "cluster-1 did not change"
    );
    server_saw(&rt, &server, "the ACK of the update", |reqs, _| {
        acked_nonce(reqs, &update.nonce).then_some(())
    })
    .await;

    // A removal names cluster-2 only; its watcher keeps the value (gRFC A88).
    let before = server.responses().len();
    server.set_resources(CDS, "3", vec![cluster("cluster-1")]);
    let removal = server_sent(&rt, &server, before, "the removal", |r| r.type_url == CDS).await;
    assert_eq!(
        (removal.resources.len(), removal.removed.as_slice()),
        (0, &["cluster-2".to_string()][..])
    );
    assert_kind(
        &next_update(&rt, &mut two).await,
        true,
        ErrorKind::DeletionIgnored,
    );
    server_saw(&rt, &server, "the ACK of the removal", |reqs, _| {
        acked_nonce(reqs, &removal.nonce).then_some(())
    })
    .await;

    // A new stream: the client names what it holds, and hears nothing unchanged.
    let before = server.responses().len();
    server.close_streams(Status::new(Code::UNAVAILABLE, "delta test: reconnect"));
    channel_event(&rt, &mut events, PROMPT, "the second stream", |e| match e {
        ChannelEvent::StreamStarted { .. } => Some(()),
        _ => None,
    })
    .await;
    let resubscribed = server_saw(&rt, &server, "the resubscription", |reqs, _| {
        let second: Vec<&RecordedRequest> = reqs.iter().filter(|r| r.stream == 2).collect();
        (second.len() >= 2).then(|| second.into_iter().cloned().collect::<Vec<_>>())
    })
    .await;
    let cds = resubscribed
        .iter()
        .find(|r| r.type_url == CDS)
        .expect("a CDS request");
    let delta = cds.delta.as_ref().unwrap();
    // cluster-2, removed but still watched, is asked for again, with no version.
    assert_eq!(
        delta.subscribe,
        ["cluster-1", "cluster-2"],
        "{resubscribed:#?}"
    );
    let held: Vec<(&str, &str)> = delta
        .initial_resource_versions
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(held, [("cluster-1", "1")], "the version it holds");
    let eds_request = resubscribed
        .iter()
        .find(|r| r.type_url == EDS)
        .expect("an EDS request");
    assert_eq!(
        eds_request
            .delta
            .as_ref()
            .unwrap()
            .initial_resource_versions
            .len(),
        1
    );
    for update in updates_during(&rt, &mut one, QUIET).await {
        assert_kind(&update, true, ErrorKind::Connectivity);
    }
    for update in super::ready_updates(&mut two) {
        assert_kind(&update, true, ErrorKind::Connectivity);
    }
    assert!(
        server.responses()[before..].iter().all(|r| r.stream != 2),
        "nothing unchanged is sent again: {:#?}",
        &server.responses()[before..]
    );
    let told = ready_values(&mut eds);
    assert!(told.is_empty(), "the endpoints did not change: {told:?}");
    // The new stream carries the next change.
    server.set_resources(EDS, "4", vec![endpoints("cluster-1", &[9090])]);
    assert_eq!(ports_of(&*next_value(&rt, &mut eds).await), vec![9090]);

    client.shutdown().await;
    server.stop().await;
}

/// The values (not the errors) already waiting on a watch.
fn ready_values<T: xds_proto_core::XdsResourceType>(
    watch: &mut xds_adapter_common::WatchStream<T>,
) -> Vec<xds_adapter_common::WatchUpdate<T::Value>> {
    super::ready_updates(watch)
        .into_iter()
        .filter(|u| matches!(u, xds_adapter_common::WatchUpdate::Changed(Ok(_))))
        .collect()
}

/// A server that behaves as istiod does on delta ([`DeltaQuirks::istiod`]): a
/// requested name it does not have comes back in `removed_resources` (the watcher
/// hears does-not-exist at once, and no present resource ever does); every CDS
/// request makes it push the unchanged endpoints again (ACKed, no watcher told); a
/// request that only unsubscribes gets no response, and the client's next
/// subscription still goes out and is answered.
pub async fn istiod_delta_behaviour<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_delta_quirks(DeltaQuirks::istiod());
    server.set_resources(
        CDS,
        "1",
        vec![
            cluster("cluster-1"),
            cluster("cluster-2"),
            cluster("cluster-3"),
        ],
    );
    server.set_resources(EDS, "1", vec![endpoints("cluster-1", &[8080])]);
    let client = builder::<R>(&server.delta_bootstrap_json("istiod-node"))
        .build()
        .expect("client");
    let started = rt.now();
    let mut one = client.watch::<Cds>("cluster-1").await.expect("watch");
    let mut ghost = client.watch::<Cds>("ghost").await.expect("watch");
    next_value(&rt, &mut one).await;
    assert_kind(
        &next_update(&rt, &mut ghost).await,
        false,
        ErrorKind::DoesNotExist,
    );
    assert!(
        rt.now().saturating_duration_since(started) < Duration::from_secs(5),
        "does-not-exist came from the server, not the 15 s timer"
    );

    // A CDS request (this subscription) makes the server push EDS unchanged.
    let mut eds = client.watch::<Eds>("cluster-1").await.expect("watch");
    assert_eq!(ports_of(&*next_value(&rt, &mut eds).await), vec![8080]);
    let before = server.responses().len();
    let mut two = client.watch::<Cds>("cluster-2").await.expect("watch");
    next_value(&rt, &mut two).await;
    let push = server_sent(&rt, &server, before, "the EDS push", |r| r.type_url == EDS).await;
    assert_eq!(push.resources, ["cluster-1"]);
    server_saw(&rt, &server, "the ACK of the EDS push", |reqs, _| {
        acked_nonce(reqs, &push.nonce).then_some(())
    })
    .await;
    assert!(
        updates_during(&rt, &mut eds, QUIET).await.is_empty(),
        "the endpoints did not change"
    );

    // Unsubscribing only: no response, and the client is not stuck waiting for one.
    let before = server.responses().len();
    drop(two);
    let unsubscribe = server_saw(&rt, &server, "the unsubscription", |reqs, _| {
        reqs.iter()
            .find(|r| {
                r.delta
                    .as_ref()
                    .is_some_and(|d| d.unsubscribe == ["cluster-2"])
            })
            .cloned()
    })
    .await;
    assert!(unsubscribe.delta.unwrap().subscribe.is_empty());
    let mut three = client.watch::<Cds>("cluster-3").await.expect("watch");
    next_value(&rt, &mut three).await;
    let after: Vec<RecordedResponse> = server.responses()[before..].to_vec();
    assert!(
        after
            .iter()
            .filter(|r| r.type_url == CDS)
            .all(|r| r.resources == ["cluster-3"]),
        "only the new subscription was answered: {after:#?}"
    );
    let told = updates_during(&rt, &mut one, QUIET).await;
    assert!(
        told.is_empty(),
        "cluster-1 never changed nor stopped existing: {told:?}"
    );
    let requests = server.requests();
    assert!(
        requests.iter().all(|r| r.kind != RequestKind::Nack),
        "{requests:#?}"
    );
    client.shutdown().await;
    server.stop().await;
}

/// A plain delta server stays silent about a name it does not have (it names in
/// `removed_resources` only what the client has): the watcher hears does-not-exist
/// from the client's own timer (gRFC A57), not before it, while a name the server
/// has arrives at once.
pub async fn delta_silence_is_does_not_exist_after_the_timer<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
    let timeout = Duration::from_millis(700);
    let client = builder::<R>(&server.delta_bootstrap_json("silence-node"))
        .resource_timeout(timeout)
        .build()
        .expect("client");
    let started = rt.now();
    let mut one = client.watch::<Cds>("cluster-1").await.expect("watch");
    let mut ghost = client.watch::<Cds>("ghost").await.expect("watch");
    next_value(&rt, &mut one).await;
    assert_kind(
        &next_update(&rt, &mut ghost).await,
        false,
        ErrorKind::DoesNotExist,
    );
    let waited = rt.now().saturating_duration_since(started);
    assert!(
        waited >= timeout,
        "does-not-exist after {waited:?}, before the timer"
    );
    let responses = server.responses();
    assert!(
        responses
            .iter()
            .all(|r| r.removed.is_empty() && !r.resources.contains(&"ghost".to_string())),
        "the server said nothing about ghost: {responses:#?}"
    );
    client.shutdown().await;
    server.stop().await;
}

/// A message on a delta stream that is no `DeltaDiscoveryResponse`: the client closes
/// the stream (`INTERNAL`, by itself), opens a new one that names the version it holds,
/// and its watcher keeps its value and gets the next change.
pub async fn delta_undecodable_response_closes_the_stream<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
    let client = builder::<R>(&server.delta_bootstrap_json("undecodable-node"))
        .build()
        .expect("client");
    let mut events = client.channel_events();
    let mut one = client.watch::<Cds>("cluster-1").await.expect("watch");
    next_value(&rt, &mut one).await;
    server.send_undecodable_message();
    let status = channel_event(
        &rt,
        &mut events,
        PROMPT,
        "the client's close",
        |e| match e {
            ChannelEvent::StreamClosed {
                status,
                by_client: true,
                ..
            } => Some(status.clone()),
            _ => None,
        },
    )
    .await;
    assert_eq!(status.code, Code::INTERNAL, "{status}");
    let again = server_saw(&rt, &server, "the request of the new stream", |reqs, _| {
        reqs.iter().find(|r| r.stream == 2).cloned()
    })
    .await;
    let held = &again
        .delta
        .expect("a delta request")
        .initial_resource_versions;
    assert_eq!(held.get("cluster-1").map(String::as_str), Some("1"));
    server.set_resources(CDS, "2", vec![cluster_with("cluster-1", 5)]);
    assert_eq!(next_value(&rt, &mut one).await.max_requests, 5);
    client.shutdown().await;
    server.stop().await;
}
