//! Delta (incremental) xDS scenarios: the scripted peer plays a delta server and each
//! test asserts the exact `DeltaDiscoveryRequest`s and watcher notifications, one
//! rule of issue 13 item 2 at a time (subscribe/unsubscribe merging, node, ACK/NACK,
//! per-resource versions, initial_resource_versions, removed_resources under A88,
//! TP3 resource_errors, wildcard, the does-not-exist timer).

use std::time::Duration;

use xds_proto_core::client::{Action, ErrorKind, ResourceStatusKind, WatchEvent};
use xds_proto_core::{Cds, Code, Lds, Notification, StreamId, WatcherId};
use xds_proto_tests::fixtures::{self, cluster, cluster_v, listener};
use xds_proto_tests::{
    CDS, DELTA_BOOTSTRAP, DeltaReq, Harness, LDS, ambient_error, changed_error, delta_errors,
    delta_response, resource_error,
};

const SECOND: Duration = Duration::from_secs(1);

fn fail_on_data_errors() -> Harness {
    let json = DELTA_BOOTSTRAP.replace(
        r#""api_type""#,
        r#""server_features": ["fail_on_data_errors"], "api_type""#,
    );
    Harness::with_bootstrap(&json, |_| {})
}

fn changed_value(n: &Notification) -> u32 {
    match &n.event {
        WatchEvent::Changed(Ok(v)) => v.get::<Cds>().expect("a cluster").max_requests,
        other => panic!("expected a value for {:?}, got {other:?}", n.name),
    }
}

/// Watches CDS `names`, connects, and has the server send each at version "v1"
/// (`cluster_v(name, 1)`) with nonce "n1"; returns the stream and the watchers.
fn cached_clusters(h: &mut Harness, names: &[&str]) -> (StreamId, Vec<WatcherId>) {
    let watchers: Vec<WatcherId> = names.iter().map(|n| h.watch::<Cds>(n)).collect();
    let s = h.connect_first_delta(CDS, &names[..1]);
    if names.len() > 1 {
        let mut rest = names[1..].to_vec();
        rest.sort();
        assert_eq!(
            h.expect_delta_request(s),
            DeltaReq::new(CDS).subscribe(&rest)
        );
        h.sent(s);
    }
    let resources = names.iter().map(|n| (*n, "v1", cluster_v(n, 1))).collect();
    h.respond_delta(s, delta_response(CDS, "n1", resources, &[]));
    for w in &watchers {
        let n = h.expect_notify();
        assert_eq!(n.watcher, *w);
        assert_eq!(changed_value(&n), 1);
    }
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n1"));
    h.sent(s);
    h.expect_nothing();
    (s, watchers)
}

/// A `*` watch on a new delta stream, holding `resources` (name, version, value) from
/// the first response, which it hears of and which is ACKed.
fn wildcard_holding(h: &mut Harness, resources: &[(&str, &str, u32)]) -> (StreamId, WatcherId) {
    let all = h.watch::<Cds>("*");
    let s = h.connect_first_delta(CDS, &["*"]);
    let items = (resources.iter())
        .map(|(n, v, x)| (*n, *v, cluster_v(n, *x)))
        .collect();
    h.respond_delta(s, delta_response(CDS, "n1", items, &[]));
    for _ in resources {
        assert_eq!(h.expect_notify().watcher, all);
    }
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n1"));
    h.sent(s);
    (s, all)
}

/// A named watch of a resource the wildcard holds: told at once, and subscribed by name
/// so that it outlives the wildcard.
fn watch_beside_wildcard(h: &mut Harness, s: StreamId, name: &str) -> WatcherId {
    let one = h.watch::<Cds>(name);
    assert_eq!(h.expect_notify().watcher, one);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&[name])
    );
    h.sent(s);
    one
}

// ----- requests: subscribe, unsubscribe, node -----

#[test]
fn a_delta_server_gets_a_delta_stream_whose_first_request_carries_the_node() {
    let mut h = Harness::delta();
    h.watch::<Lds>("l1");
    match h.next_action() {
        Action::StartStream { config, .. } => assert!(config.is_delta()),
        other => panic!("expected StartStream, got {other:?}"),
    }
    let request = match h.next_action() {
        Action::SendDeltaRequest { request, .. } => xds_proto_tests::delta_on_the_wire(&request),
        other => panic!("expected SendDeltaRequest, got {other:?}"),
    };
    assert_eq!(request.type_url, LDS);
    assert_eq!(request.resource_names_subscribe, ["l1"]);
    assert!(request.resource_names_unsubscribe.is_empty());
    assert!(request.initial_resource_versions.is_empty());
    assert_eq!(request.response_nonce, "");
    assert_eq!(request.node.expect("the node").id, "test-node");
    h.expect_nothing();
}

#[test]
fn node_goes_on_the_first_request_of_each_stream_only() {
    let mut h = Harness::delta();
    h.watch::<Lds>("l1");
    let s = h.connect_first_delta(LDS, &["l1"]);
    h.watch::<Cds>("c1");
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["c1"])
    );
    h.sent(s);
    h.respond_delta(
        s,
        delta_response(LDS, "a", vec![("l1", "1", listener("l1", "r"))], &[]),
    );
    h.expect_notify();
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(LDS).ack("a"));
    h.sent(s);
    // The server closes the stream after a response: a new stream, the node again,
    // and the listener's version so that the server can skip it.
    h.close(s, Code::UNAVAILABLE, "max connection age");
    let s2 = h.expect_start();
    assert_eq!(
        h.expect_delta_request(s2),
        DeltaReq::new(LDS)
            .subscribe(&["l1"])
            .initial(&[("l1", "1")])
            .with_node()
    );
    h.sent(s2);
    assert_eq!(
        h.expect_delta_request(s2),
        DeltaReq::new(CDS).subscribe(&["c1"])
    );
    h.expect_nothing();
}

#[test]
fn changes_made_while_a_request_is_outstanding_merge_into_the_next_one() {
    let mut h = Harness::delta();
    h.watch::<Cds>("a");
    let s = h.expect_start();
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["a"]).with_node()
    );
    // While the first request is outstanding: b and c are watched, c is dropped again.
    h.watch::<Cds>("c");
    let wb = h.watch::<Cds>("b");
    let wc = h.client.watch::<Cds>("d").unwrap();
    h.cancel(wc);
    h.expect_nothing();
    h.started(s);
    h.sent(s);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["b", "c"])
    );
    // Cancelled and watched again before the change went out: only the subscribe is
    // sent (the server must send the resource again), no unsubscribe.
    let wa = h.client.watch::<Cds>("e").unwrap();
    h.cancel(wa);
    h.cancel(wb);
    h.watch::<Cds>("b");
    h.expect_nothing();
    h.sent(s);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["b"])
    );
    // The server tracks c: unwatched, watched and unwatched again before the change
    // goes out, it is still unsubscribed (found by the simulator, seed 19).
    let wc = h.watch::<Cds>("x");
    h.sent(s);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["x"])
    );
    let watchers_of_c: Vec<_> = h
        .client
        .resource_snapshot()
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert!(watchers_of_c.iter().any(|n| &**n == "c"));
    h.cancel(wc);
    let again = h.client.watch::<Cds>("x").unwrap();
    h.cancel(again);
    h.sent(s);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).unsubscribe(&["x"])
    );
    h.sent(s);
    h.expect_nothing();
}

#[test]
fn an_unwatched_name_is_unsubscribed_and_a_merged_ack_carries_the_nonce() {
    let mut h = Harness::delta();
    let (s, ws) = cached_clusters(&mut h, &["c1", "c2"]);
    h.cancel(ws[0]);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).unsubscribe(&["c1"])
    );
    // Outstanding: a response arrives and a name is dropped; one request says both.
    h.respond_delta(
        s,
        delta_response(CDS, "n2", vec![("c2", "v2", cluster_v("c2", 2))], &[]),
    );
    assert_eq!(changed_value(&h.expect_notify()), 2);
    h.watch::<Cds>("c3");
    h.sent(s);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["c3"]).ack("n2")
    );
    h.sent(s);
    h.expect_nothing();
}

#[test]
fn no_accidental_wildcard_a_type_whose_names_went_before_its_first_request_sends_nothing() {
    let mut h = Harness::delta();
    h.watch::<Lds>("l1");
    let s = h.expect_start();
    h.expect_delta_request(s);
    // A cluster is watched and unwatched while the listener request is outstanding:
    // its first request would be an empty subscribe, a wildcard. Nothing is sent.
    let w = h.client.watch::<Cds>("c1").unwrap();
    h.cancel(w);
    h.started(s);
    h.sent(s);
    h.expect_nothing();
    // An explicit wildcard is the name "*".
    h.watch::<Cds>("*");
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["*"])
    );
    h.sent(s);
    // A wildcard names no resource that could be missing: only the listener times out.
    h.advance(15 * SECOND);
    assert_eq!(&*h.expect_notify().name, "l1");
    h.expect_nothing();
}

// ----- responses: ACK, NACK, versions -----

#[test]
fn a_response_is_acked_by_its_nonce_and_each_resource_keeps_its_version() {
    let mut h = Harness::delta();
    let (s, ws) = cached_clusters(&mut h, &["c1", "c2"]);
    // One resource changes: one notification, one ACK with that nonce and no names.
    h.respond_delta(
        s,
        delta_response(CDS, "n2", vec![("c2", "v7", cluster_v("c2", 7))], &[]),
    );
    let n = h.expect_notify();
    assert_eq!((n.watcher, changed_value(&n)), (ws[1], 7));
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n2"));
    h.sent(s);
    h.expect_nothing();
    let versions: Vec<(String, String)> = h
        .client
        .resource_snapshot()
        .iter()
        .map(|r| (r.name.to_string(), r.version.to_string()))
        .collect();
    assert_eq!(
        versions,
        [("c1".into(), "v1".into()), ("c2".into(), "v7".into())]
    );
    // The same bytes at a new version: no notification, the version moves on.
    h.respond_delta(
        s,
        delta_response(CDS, "n3", vec![("c1", "v8", cluster_v("c1", 1))], &[]),
    );
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n3"));
    h.expect_nothing();
    assert_eq!(&*h.client.resource_snapshot()[0].version, "v8");
    // CSDS says the same.
    let csds = h.client.csds_configs();
    assert_eq!(csds[0].version_info, "v8");
}

/// Every delta response is answered by its own request, in order: a NACK is not
/// swallowed by a later response arriving before the NACK went out (in state of the
/// world the latest ACK stands for all; in delta each nonce names one change).
#[test]
fn responses_arriving_before_the_ack_goes_out_are_each_answered_in_order() {
    let mut h = Harness::delta();
    let (s, ws) = cached_clusters(&mut h, &["c1", "c2"]);
    h.watch::<Cds>("c3");
    // A subscribing request is in flight (not yet reported sent) while two responses
    // arrive: a rejected one, then a valid one.
    let req = h.expect_delta_request(s);
    assert_eq!(req, DeltaReq::new(CDS).subscribe(&["c3"]));
    h.respond_delta(
        s,
        delta_response(
            CDS,
            "n2",
            vec![("c1", "v2", fixtures::invalid_cluster("c1"))],
            &[],
        ),
    );
    let n = h.expect_notify();
    assert_eq!(
        (n.watcher, ambient_error(&n).kind),
        (ws[0], ErrorKind::Invalid)
    );
    h.respond_delta(
        s,
        delta_response(CDS, "n3", vec![("c2", "v3", cluster_v("c2", 3))], &[]),
    );
    let n = h.expect_notify();
    assert_eq!((n.watcher, changed_value(&n)), (ws[1], 3));
    h.sent(s);
    let nack = h.expect_delta_request(s);
    assert_eq!((nack.nonce.as_str(), nack.subscribe.len()), ("n2", 0));
    assert!(
        nack.error
            .expect("a NACK")
            .starts_with("resource index 0: c1: ")
    );
    h.sent(s);
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n3"));
    h.sent(s);
    h.expect_nothing();
}

#[test]
fn a_partly_invalid_response_applies_the_valid_resources_and_nacks_every_rejected_one() {
    let mut h = Harness::delta();
    let (s, ws) = cached_clusters(&mut h, &["c1", "c2", "c3"]);
    h.respond_delta(
        s,
        delta_response(
            CDS,
            "n2",
            vec![
                ("c1", "v2", fixtures::invalid_cluster("c1")),
                ("c2", "v2", cluster_v("c2", 2)),
                ("c3", "v2", fixtures::invalid_cluster("c3")),
            ],
            &[],
        ),
    );
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[0]);
    assert_eq!(ambient_error(&n).kind, ErrorKind::Invalid);
    let n = h.expect_notify();
    assert_eq!((n.watcher, changed_value(&n)), (ws[1], 2));
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[2]);
    assert_eq!(ambient_error(&n).kind, ErrorKind::Invalid);
    let req = h.expect_delta_request(s);
    assert_eq!((req.nonce.as_str(), req.subscribe.len()), ("n2", 0));
    let detail = req.error.expect("a NACK");
    assert!(detail.starts_with("resource index 0: c1: "), "{detail}");
    assert!(detail.contains("; resource index 2: c3: "), "{detail}");
    assert!(!detail.contains("index 1"), "{detail}");
    h.expect_nothing();
    // CSDS: NACKed resources keep the last good value and version.
    let snap = h.client.resource_snapshot();
    assert_eq!(snap[0].status, ResourceStatusKind::Nacked);
    assert_eq!(&*snap[0].version, "v1");
    assert_eq!(snap[1].status, ResourceStatusKind::Acked);
    assert_eq!(&*snap[1].version, "v2");
    // The next request is no NACK: it carries no nonce and no error.
    h.sent(s);
    h.watch::<Cds>("c4");
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["c4"])
    );
}

#[test]
fn a_resource_without_a_body_and_a_name_both_sent_and_removed_are_nacked() {
    let mut h = Harness::delta();
    let (s, _) = cached_clusters(&mut h, &["c1"]);
    let mut response = delta_response(CDS, "n2", vec![("c1", "v2", cluster_v("c1", 2))], &["c1"]);
    response
        .resources
        .push(xds_proto_tests::delta_resource("x", "v", cluster("x")));
    response.resources[1].resource = None;
    h.respond_delta(s, response);
    // c1's valid copy is applied; the contradiction and the empty resource are NACKed.
    assert_eq!(changed_value(&h.expect_notify()), 2);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).nack(
            "n2",
            "resource index 1: x: Resource has no resource; removed_resources[0]: c1: \
             resource is also present in resources"
        )
    );
}

/// Issue 24 item 3: a delta `Resource` named `foo5` around a valid cluster named
/// `foo5-inner` is `foo5`, as a SotW wrapper is (`scenarios.rs`): told to `foo5`'s
/// watch and ACKed, never NACKed, and no does-not-exist follows.
#[test]
fn a_delta_resource_is_named_by_its_name_not_by_its_payload() {
    let mut h = Harness::delta();
    let w = h.watch::<Cds>("foo5");
    let s = h.connect_first_delta(CDS, &["foo5"]);
    h.respond_delta(
        s,
        delta_response(
            CDS,
            "n1",
            vec![("foo5", "v1", cluster_v("foo5-inner", 7))],
            &[],
        ),
    );
    let n = h.expect_notify();
    assert_eq!((n.watcher, &*n.name), (w, "foo5"));
    assert_eq!(changed_value(&n), 7);
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n1"));
    h.sent(s);
    h.advance(60 * SECOND);
    h.expect_nothing();
    let snap = &h.client.resource_snapshot()[0];
    assert_eq!(
        (&*snap.name, snap.status),
        ("foo5", ResourceStatusKind::Acked)
    );
}

#[test]
fn an_undecodable_delta_response_fails_the_stream() {
    let mut h = Harness::delta();
    let (s, ws) = cached_clusters(&mut h, &["c1"]);
    h.event(xds_proto_core::Event::ResponseReceived {
        stream: s,
        bytes: vec![0x0a, 0xff].into(),
    });
    assert!(matches!(h.next_action(), Action::CloseStream { stream } if stream == s));
    // It had a response: reconnect at once, with the version of what it holds.
    let s2 = h.expect_start();
    assert_eq!(
        h.expect_delta_request(s2),
        DeltaReq::new(CDS)
            .subscribe(&["c1"])
            .initial(&[("c1", "v1")])
            .with_node()
    );
    h.expect_nothing();
    let _ = ws;
}

// ----- a new stream: initial_resource_versions -----

#[test]
fn a_new_stream_names_every_cached_resource_and_the_server_need_not_resend_them() {
    let mut h = Harness::delta();
    let (s, _) = cached_clusters(&mut h, &["c1", "c2"]);
    let w3 = h.watch::<Cds>("c3");
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["c3"])
    );
    h.sent(s);
    h.close(s, Code::UNAVAILABLE, "restart");
    let s2 = h.expect_start();
    // Every subscribed name, and the versions of those the client holds (c3 is not).
    assert_eq!(
        h.expect_delta_request(s2),
        DeltaReq::new(CDS)
            .subscribe(&["c1", "c2", "c3"])
            .initial(&[("c1", "v1"), ("c2", "v1")])
            .with_node()
    );
    h.started(s2);
    h.sent(s2);
    // The server sends only c3: the cached ones stay, nobody hears of them.
    h.respond_delta(
        s2,
        delta_response(CDS, "m1", vec![("c3", "v1", cluster_v("c3", 1))], &[]),
    );
    let n = h.expect_notify();
    assert_eq!(n.watcher, w3);
    assert_eq!(h.expect_delta_request(s2), DeltaReq::new(CDS).ack("m1"));
    h.sent(s2);
    h.expect_nothing();
    // No does-not-exist timer for the cached ones, and c3 arrived.
    assert_eq!(h.client.poll_timeout(), None);
    h.advance(60 * SECOND);
    h.expect_nothing();
}

// ----- removed_resources (A88) -----

#[test]
fn a_removed_cached_resource_keeps_its_value_with_an_ambient_not_found() {
    let mut h = Harness::delta();
    let (s, ws) = cached_clusters(&mut h, &["c1", "c2"]);
    h.respond_delta(s, delta_response(CDS, "n2", vec![], &["c1"]));
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[0]);
    let e = ambient_error(&n);
    assert_eq!(
        (e.kind, e.status.code),
        (ErrorKind::DeletionIgnored, Code::NOT_FOUND)
    );
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n2"));
    h.sent(s);
    h.expect_nothing();
    let snap = &h.client.resource_snapshot()[0];
    assert_eq!(snap.status, ResourceStatusKind::DoesNotExist);
    assert!(snap.value.is_some(), "the value is kept");
    // Removed again: reported once only.
    h.respond_delta(s, delta_response(CDS, "n3", vec![], &["c1"]));
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n3"));
    h.sent(s);
    h.expect_nothing();
    // A new stream does not claim the removed one: the server sends it if it has it.
    h.close(s, Code::UNAVAILABLE, "restart");
    let s2 = h.expect_start();
    assert_eq!(
        h.expect_delta_request(s2),
        DeltaReq::new(CDS)
            .subscribe(&["c1", "c2"])
            .initial(&[("c2", "v1")])
            .with_node()
    );
}

#[test]
fn under_fail_on_data_errors_a_removed_resource_is_dropped() {
    let mut h = fail_on_data_errors();
    let (s, ws) = cached_clusters(&mut h, &["c1"]);
    h.respond_delta(s, delta_response(CDS, "n2", vec![], &["c1"]));
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[0]);
    let e = changed_error(&n);
    assert_eq!(
        (e.kind, e.status.code),
        (ErrorKind::DoesNotExist, Code::NOT_FOUND)
    );
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n2"));
    let snap = &h.client.resource_snapshot()[0];
    assert_eq!(snap.status, ResourceStatusKind::DoesNotExist);
    assert!(snap.value.is_none(), "dropped");
}

#[test]
fn a_removed_uncached_resource_does_not_exist_at_once() {
    let mut h = Harness::delta();
    let w = h.watch::<Cds>("c1");
    let s = h.connect_first_delta(CDS, &["c1"]);
    assert_eq!(h.client.poll_timeout(), Some(h.now + 15 * SECOND));
    h.advance(2 * SECOND);
    h.respond_delta(s, delta_response(CDS, "n1", vec![], &["c1"]));
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    let e = changed_error(&n);
    assert_eq!(
        (e.kind, e.status.code),
        (ErrorKind::DoesNotExist, Code::NOT_FOUND)
    );
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n1"));
    h.sent(s);
    // The timer stopped: no second verdict.
    assert_eq!(h.client.poll_timeout(), None);
    h.advance(60 * SECOND);
    h.expect_nothing();
    // A removed name nobody watches is ignored.
    h.respond_delta(s, delta_response(CDS, "n2", vec![], &["other"]));
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n2"));
    h.expect_nothing();
}

// ----- TP3 resource_errors -----

#[test]
fn tp3_resource_errors_in_a_delta_response_follow_the_sotw_rules() {
    let mut h = Harness::delta();
    let (s, ws) = cached_clusters(&mut h, &["c1"]);
    let w2 = h.watch::<Cds>("c2");
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["c2"])
    );
    h.sent(s);
    h.respond_delta(
        s,
        delta_errors(
            CDS,
            "n2",
            vec![
                resource_error("c1", Code::UNAVAILABLE, "backend down"),
                resource_error("c2", Code::NOT_FOUND, "no such cluster"),
            ],
        ),
    );
    // Cached: ambient, value kept. Uncached NOT_FOUND: the resource does not exist.
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[0]);
    assert_eq!(ambient_error(&n).status.code, Code::UNAVAILABLE);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    assert_eq!(changed_error(&n).status.code, Code::NOT_FOUND);
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n2"));
    h.expect_nothing();
    let snap = h.client.resource_snapshot();
    assert_eq!(snap[0].status, ResourceStatusKind::ReceivedError);
    assert!(snap[0].value.is_some());
    // The timer of c2 stopped.
    assert_eq!(h.client.poll_timeout(), None);
}

// ----- the does-not-exist timer (A57) -----

#[test]
fn a_silent_delta_server_lets_the_does_not_exist_timer_decide() {
    let mut h = Harness::delta();
    let w = h.watch::<Cds>("c1");
    let s = h.expect_start();
    h.expect_delta_request(s);
    // Sent before the stream is connected: no timer yet (A57).
    h.sent(s);
    assert_eq!(h.client.poll_timeout(), None);
    h.started(s);
    assert_eq!(h.client.poll_timeout(), Some(h.now + 15 * SECOND));
    // The server answers another name only.
    h.watch::<Lds>("l1");
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(LDS).subscribe(&["l1"])
    );
    h.sent(s);
    h.respond_delta(
        s,
        delta_response(LDS, "a", vec![("l1", "1", listener("l1", "r"))], &[]),
    );
    h.expect_notify();
    h.expect_delta_request(s);
    h.advance(15 * SECOND);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    assert_eq!(changed_error(&n).kind, ErrorKind::DoesNotExist);
    h.expect_nothing();
}

// ----- A71 fallback between a delta primary and a SotW fallback -----

#[test]
fn a_delta_primary_falls_back_to_a_sotw_server_and_takes_its_authority_back() {
    let json = r#"{
      "xds_servers": [
        {"server_uri": "primary:443", "channel_creds": [{"type": "insecure"}],
         "api_type": "AGGREGATED_DELTA_GRPC"},
        {"server_uri": "fallback:443", "channel_creds": [{"type": "insecure"}]}
      ],
      "node": {"id": "n"}
    }"#;
    let mut h = Harness::with_bootstrap(json, |_| {});
    let w = h.watch::<Cds>("c1");
    let p = h.connect_first_delta(CDS, &["c1"]);
    // The primary fails before any response: the SotW fallback is put in use.
    h.close(p, Code::UNAVAILABLE, "connection refused");
    let f = h.expect_start();
    assert_eq!(
        h.expect_request(f),
        xds_proto_tests::Req::new(CDS, &["c1"], "", "").with_node()
    );
    h.started(f);
    h.sent(f);
    h.respond(f, CDS, "7", "f1", vec![cluster_v("c1", 2)]);
    let n = h.expect_notify();
    assert_eq!((n.watcher, changed_value(&n)), (w, 2));
    assert_eq!(
        h.expect_request(f),
        xds_proto_tests::Req::new(CDS, &["c1"], "7", "f1")
    );
    h.sent(f);
    h.expect_nothing();
    // The primary's next delta stream claims nothing: the value came from the fallback.
    h.advance(2 * SECOND);
    let p2 = h.expect_start();
    assert_eq!(
        h.expect_delta_request(p2),
        DeltaReq::new(CDS).subscribe(&["c1"]).with_node()
    );
    h.started(p2);
    h.sent(p2);
    // It answers: the authority switches back and the fallback is released.
    h.respond_delta(
        p2,
        delta_response(CDS, "p1", vec![("c1", "v1", cluster_v("c1", 1))], &[]),
    );
    let rest = h.take();
    assert!(
        rest.iter()
            .any(|a| matches!(a, Action::CloseStream { stream } if *stream == f)),
        "{rest:?}"
    );
    let note = rest.iter().find_map(|a| match a {
        Action::Notify(n) => Some(changed_value(n)),
        _ => None,
    });
    assert_eq!(note, Some(1));
    assert!(
        rest.iter()
            .any(|a| matches!(a, Action::SendDeltaRequest { .. }))
    );
    assert_eq!(&*h.client.resource_snapshot()[0].version, "v1");
}

// ----- the explicit wildcard -----

#[test]
fn a_wildcard_watch_hears_every_resource_beside_a_named_watch_until_it_goes() {
    let mut h = Harness::delta();
    let all = h.watch::<Cds>("*");
    let s = h.connect_first_delta(CDS, &["*"]);
    h.expect_nothing(); // no does-not-exist timer for the wildcard
    assert_eq!(h.client.poll_timeout(), None);
    let two = vec![
        ("c1", "v1", cluster_v("c1", 1)),
        ("c2", "v1", cluster_v("c2", 2)),
    ];
    h.respond_delta(s, delta_response(CDS, "n1", two, &[]));
    for (name, value) in [("c1", 1), ("c2", 2)] {
        let n = h.expect_notify();
        assert_eq!((n.watcher, &*n.name), (all, name));
        assert_eq!(changed_value(&n), value);
    }
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n1"));
    h.sent(s);
    h.expect_nothing();
    let names: Vec<String> = (h.client.resource_snapshot().iter())
        .map(|r| r.name.to_string())
        .collect();
    assert!(names.contains(&"c1".to_string()) && names.contains(&"c2".to_string()));

    // A named watch of c1 alongside: told the cached value, and c1 is subscribed by
    // name so that it outlives the wildcard.
    let one = h.watch::<Cds>("c1");
    let n = h.expect_notify();
    assert_eq!((n.watcher, &*n.name, changed_value(&n)), (one, "c1", 1));
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).subscribe(&["c1"])
    );
    h.sent(s);
    h.respond_delta(
        s,
        delta_response(CDS, "n2", vec![("c1", "v2", cluster_v("c1", 3))], &[]),
    );
    let watchers: Vec<_> = (0..2).map(|_| h.expect_notify()).collect();
    assert_eq!(
        watchers
            .iter()
            .map(|n| (n.watcher, changed_value(n)))
            .collect::<Vec<_>>(),
        [(one, 3), (all, 3)]
    );
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n2"));
    h.sent(s);

    // c2 removed: cached, so its value stays with an ambient NOT_FOUND (A88).
    h.respond_delta(s, delta_response(CDS, "n3", vec![], &["c2"]));
    let n = h.expect_notify();
    assert_eq!((n.watcher, &*n.name), (all, "c2"));
    assert_eq!(ambient_error(&n).kind, ErrorKind::DeletionIgnored);
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n3"));
    h.sent(s);
    h.expect_nothing();

    // The wildcard goes: "*" is unsubscribed, c2 (held only for it) is forgotten,
    // c1 stays for its named watch and hears nothing new.
    h.cancel(all);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).unsubscribe(&["*"])
    );
    h.sent(s);
    h.expect_nothing();
    let names: Vec<String> = (h.client.resource_snapshot().iter())
        .map(|r| r.name.to_string())
        .collect();
    assert_eq!(names, ["c1"]);
    h.respond_delta(
        s,
        delta_response(CDS, "n4", vec![("c1", "v3", cluster_v("c1", 4))], &[]),
    );
    let n = h.expect_notify();
    assert_eq!((n.watcher, changed_value(&n)), (one, 4));
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n4"));
    h.sent(s);
    h.expect_nothing();
}

#[test]
fn a_new_stream_offers_the_resources_held_for_the_wildcard_in_its_initial_versions() {
    let mut h = Harness::delta();
    let three = [("c2", "v1", 2), ("c1", "v1", 1), ("c3", "v7", 3)];
    let (s, _) = wildcard_holding(&mut h, &three);
    // c3 is also watched by name; c2 is removed (A88: kept, but no longer the server's).
    watch_beside_wildcard(&mut h, s, "c3");
    h.respond_delta(s, delta_response(CDS, "n2", vec![], &["c2"]));
    assert_eq!(
        ambient_error(&h.expect_notify()).kind,
        ErrorKind::DeletionIgnored
    );
    assert_eq!(h.expect_delta_request(s), DeltaReq::new(CDS).ack("n2"));
    h.sent(s);
    h.close(s, Code::UNAVAILABLE, "restart");
    let s2 = h.expect_start();
    // The named resource, then those held for the wildcard alone, by name: the server
    // need not send them again. The removed one is not offered.
    assert_eq!(
        h.expect_delta_request(s2),
        DeltaReq::new(CDS)
            .subscribe(&["*", "c3"])
            .initial(&[("c3", "v7"), ("c1", "v1")])
            .with_node()
    );
    h.started(s2);
    h.sent(s2);
    h.expect_nothing();
}

#[test]
fn a_named_watch_that_goes_leaves_the_resource_to_the_wildcard() {
    let mut h = Harness::delta();
    let (s, all) = wildcard_holding(&mut h, &[("c1", "v1", 1)]);
    let one = watch_beside_wildcard(&mut h, s, "c1");
    h.cancel(one);
    assert_eq!(
        h.expect_delta_request(s),
        DeltaReq::new(CDS).unsubscribe(&["c1"])
    );
    h.sent(s);
    h.expect_nothing();
    // Still cached for the wildcard, whose watcher hears of the next copy.
    assert_eq!(h.client.resource_snapshot().len(), 2);
    h.respond_delta(
        s,
        delta_response(CDS, "n2", vec![("c1", "v2", cluster_v("c1", 2))], &[]),
    );
    let n = h.expect_notify();
    assert_eq!((n.watcher, changed_value(&n)), (all, 2));
}
