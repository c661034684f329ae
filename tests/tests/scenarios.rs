//! Scenario tests: a scripted fake ADS peer drives one client over virtual time, and
//! each test asserts the exact requests sent (names, version, nonce, node, error
//! detail) and the exact watcher notifications, rule by rule (ADS SotW, A57, A88, TP3).

use std::time::Duration;
use xds_proto_core::{Cds, Eds, Lds, Rds};

use xds_proto_core::client::{Action, ErrorKind, ResourceStatusKind, WatchError, WatchEvent};
use xds_proto_core::pb::envoy::service::discovery::v3::Resource;
use xds_proto_core::{Code, Event, Notification, StreamId, WatcherId};
use xds_proto_tests::fixtures::{self, any, cluster, cluster_v, endpoints, listener, route_config};
use xds_proto_tests::{
    CDS, EDS, Harness, LDS, ONE_SERVER_BOOTSTRAP, RDS, Req, ambient_error, changed_error,
    resource_error, response, value_of,
};

const SECOND: Duration = Duration::from_secs(1);

fn fail_on_data_errors_bootstrap() -> String {
    ONE_SERVER_BOOTSTRAP.replace(
        r#""channel_creds": [{"type": "insecure"}]"#,
        r#""channel_creds": [{"type": "insecure"}], "server_features": ["fail_on_data_errors"]"#,
    )
}

/// Watches CDS `names` (one watcher each), connects, and has the server deliver them
/// all as version "1" with nonce "n1"; returns the stream and the watchers.
fn with_cached_clusters(h: &mut Harness, names: &[&str]) -> (StreamId, Vec<WatcherId>) {
    let watchers: Vec<WatcherId> = names.iter().map(|n| h.watch::<Cds>(n)).collect();
    let stream = h.expect_start();
    // The first watch emitted the first request; later watches wait for it to be sent.
    assert_eq!(
        h.expect_request(stream),
        Req::new(CDS, &names[..1], "", "").with_node()
    );
    h.started(stream);
    h.sent(stream);
    if names.len() > 1 {
        let mut sorted = names.to_vec();
        sorted.sort();
        assert_eq!(h.expect_request(stream), Req::new(CDS, &sorted, "", ""));
        h.sent(stream);
    }
    h.respond(
        stream,
        CDS,
        "1",
        "n1",
        names.iter().map(|n| cluster(n)).collect(),
    );
    for w in &watchers {
        let n = h.expect_notify();
        assert_eq!(n.watcher, *w);
        value_of(&n);
    }
    let mut sorted = names.to_vec();
    sorted.sort();
    assert_eq!(h.expect_request(stream), Req::new(CDS, &sorted, "1", "n1"));
    h.sent(stream);
    h.expect_nothing();
    (stream, watchers)
}

// ----- ADS SotW basics -----

#[test]
fn first_watch_opens_a_stream_and_subscribes_with_the_node() {
    let mut h = Harness::new();
    let w = h.watch::<Lds>("listener-a");
    match h.next_action() {
        Action::StartStream { config, .. } => assert_eq!(config.server_uri, "xds.example:443"),
        other => panic!("expected StartStream, got {other:?}"),
    }
    let request = match h.next_action() {
        Action::SendRequest { request, .. } => xds_proto_tests::on_the_wire(&request),
        other => panic!("expected SendRequest, got {other:?}"),
    };
    assert_eq!(request.type_url, LDS);
    assert_eq!(request.resource_names, vec!["listener-a"]);
    assert_eq!(request.version_info, "");
    assert_eq!(request.response_nonce, "");
    let node = request.node.expect("node on the first request");
    assert_eq!(node.id, "test-node");
    assert_eq!(node.cluster, "test-cluster");
    assert_eq!(node.user_agent_name, "xds-proto");
    h.expect_nothing();
    assert_eq!(w.into_raw(), 1);
}

#[test]
fn valid_response_is_delivered_and_acked_with_its_version_and_nonce() {
    let mut h = Harness::new();
    let w = h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    h.respond(s, LDS, "v1", "nonce-1", vec![listener("l1", "r1")]);
    let n = h.expect_notify();
    assert_eq!((n.watcher, &*n.name, n.type_url), (w, "l1", LDS));
    let value = value_of(&n).get::<Lds>().expect("a ListenerResource");
    assert_eq!(value.name, "l1");
    assert_eq!(h.expect_request(s), Req::new(LDS, &["l1"], "v1", "nonce-1"));
    h.expect_nothing();
}

#[test]
fn node_is_sent_only_on_the_first_request_of_each_stream() {
    let mut h = Harness::new();
    h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    h.watch::<Cds>("c1");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "", ""));
    h.sent(s);
    h.respond(s, LDS, "1", "a", vec![listener("l1", "r1")]);
    h.expect_notify();
    assert_eq!(h.expect_request(s), Req::new(LDS, &["l1"], "1", "a"));
    h.sent(s);
    // The server closes the stream after a response: reconnect at once, node again,
    // versions kept, nonces reset.
    h.close(s, Code::UNAVAILABLE, "max connection age");
    let s2 = h.expect_start();
    assert_ne!(s, s2);
    assert_eq!(
        h.expect_request(s2),
        Req::new(LDS, &["l1"], "1", "").with_node()
    );
    h.sent(s2);
    assert_eq!(h.expect_request(s2), Req::new(CDS, &["c1"], "", ""));
    h.expect_nothing();
}

#[test]
fn subscription_change_resends_the_type_with_every_name() {
    let mut h = Harness::new();
    h.watch::<Cds>("c2");
    let s = h.connect_first(CDS, &["c2"]);
    h.watch::<Cds>("c1");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "", ""));
    h.expect_nothing();
}

/// Held requests: a fresh client's burst starts its stream at once, and leaves as one
/// request per type, with every name, when released; the does-not-exist timers start
/// only then.
#[test]
fn held_requests_leave_as_one_request_per_type_when_released() {
    let mut h = Harness::new();
    h.client.hold_requests();
    h.watch::<Lds>("l1");
    for name in ["c3", "c1", "c2"] {
        h.watch::<Cds>(name);
    }
    let s = h.expect_start();
    h.started(s);
    h.expect_nothing();
    // Nothing was sent: no timer runs, however long the hold.
    h.advance(60 * SECOND);
    h.expect_nothing();
    h.client.release_requests();
    h.collect_actions();
    assert_eq!(
        h.expect_request(s),
        Req::new(LDS, &["l1"], "", "").with_node()
    );
    h.sent(s);
    assert_eq!(
        h.expect_request(s),
        Req::new(CDS, &["c1", "c2", "c3"], "", "")
    );
    h.sent(s);
    h.expect_nothing();
    h.advance(16 * SECOND);
    for _ in 0..4 {
        assert_eq!(
            changed_error(&h.expect_notify()).kind,
            ErrorKind::DoesNotExist
        );
    }
}

/// One type held: the others' requests go on (a burst of clusters does not delay the
/// listener's request), and the held type's leaves, with every name, on its release.
#[test]
fn a_type_held_alone_lets_the_others_go() {
    let mut h = Harness::new();
    assert!(h.client.hold_requests_of(CDS));
    assert!(!h.client.hold_requests_of("type.googleapis.com/no.Such"));
    h.watch::<Cds>("c2");
    h.watch::<Lds>("l1");
    h.watch::<Cds>("c1");
    let s = h.expect_start();
    assert_eq!(
        h.expect_request(s),
        Req::new(LDS, &["l1"], "", "").with_node()
    );
    h.started(s);
    h.sent(s);
    h.expect_nothing();
    h.client.release_requests_of(EDS);
    h.collect_actions();
    h.expect_nothing();
    h.client.release_requests_of(CDS);
    h.collect_actions();
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "", ""));
    assert!(!h.client.requests_held());
}

/// On a stream in use, held requests cover ACKs too: a response's ACK and a grown
/// subscription of its type leave as one request when released.
#[test]
fn an_ack_and_new_names_held_together_leave_as_one_request() {
    let mut h = Harness::new();
    h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    h.client.hold_requests();
    h.respond(s, CDS, "1", "n1", vec![cluster("c1")]);
    value_of(&h.expect_notify());
    h.watch::<Cds>("c2");
    h.expect_nothing();
    assert!(h.client.requests_held());
    h.client.release_requests();
    h.collect_actions();
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "1", "n1"));
    h.sent(s);
    h.expect_nothing();
    // A second release changes nothing.
    h.client.release_requests();
    h.collect_actions();
    h.expect_nothing();
}

#[test]
fn second_watcher_of_a_cached_resource_gets_it_at_once_and_no_request_is_sent() {
    let mut h = Harness::new();
    let (_, ws) = with_cached_clusters(&mut h, &["c1"]);
    let w2 = h.watch::<Cds>("c1");
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    assert_ne!(w2, ws[0]);
    assert_eq!(
        value_of(&n).get::<Cds>().map(|c| c.name.as_str()),
        Some("c1")
    );
    h.expect_nothing();
}

#[test]
fn duplicate_response_with_identical_bytes_is_acked_without_notification() {
    let mut h = Harness::new();
    let (s, _) = with_cached_clusters(&mut h, &["c1", "c2"]);
    h.respond(s, CDS, "2", "n2", vec![cluster("c1"), cluster("c2")]);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "2", "n2"));
    h.expect_nothing();
    let snapshot = h.client.resource_snapshot();
    assert!(snapshot.iter().all(|r| &*r.version == "2"), "{snapshot:?}");
}

#[test]
fn only_the_changed_resource_notifies_its_watchers() {
    let mut h = Harness::new();
    let (s, ws) = with_cached_clusters(&mut h, &["c1", "c2", "c3"]);
    h.respond(
        s,
        CDS,
        "2",
        "n2",
        vec![cluster("c1"), cluster_v("c2", 7), cluster("c3")],
    );
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[1]);
    let c2 = value_of(&n).get::<Cds>().unwrap();
    assert_eq!(c2.max_requests, 7);
    assert_eq!(
        h.expect_request(s),
        Req::new(CDS, &["c1", "c2", "c3"], "2", "n2")
    );
    h.expect_nothing();
}

#[test]
fn resources_not_subscribed_are_ignored() {
    let mut h = Harness::new();
    let w = h.watch::<Eds>("e1");
    let s = h.connect_first(EDS, &["e1"]);
    h.respond(
        s,
        EDS,
        "1",
        "n1",
        vec![endpoints("other", &[80]), endpoints("e1", &[81])],
    );
    assert_eq!(h.expect_notify().watcher, w);
    assert_eq!(h.expect_request(s), Req::new(EDS, &["e1"], "1", "n1"));
    h.expect_nothing();
    assert_eq!(h.client.resource_snapshot().len(), 1);
}

/// Issue 24 item 5: a watch by run-time type info is the typed watch: the same
/// subscription and value; a type the client did not register is refused, even one
/// that claims a registered type's URL.
#[test]
fn a_watch_by_type_info_is_the_typed_watch() {
    use xds_proto_core::resource::{DecodeError, ResourceTypeInfo, builtin_types};
    struct FakeClusters;
    impl xds_proto_core::XdsResourceType for FakeClusters {
        type Value = ();
        const TYPE_URL: &'static str = CDS;
        const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = true;
        fn decode(_: &[u8]) -> Result<(String, ()), DecodeError> {
            Err(DecodeError::unnamed("never"))
        }
    }
    let mut h = Harness::new();
    let cds = builtin_types().into_iter().find(|t| t.type_url() == CDS);
    let w = (h.client.watch_type(&cds.expect("built in"), "c1")).expect("a known type");
    h.collect_actions();
    let s = h.connect_first(CDS, &["c1"]);
    h.respond(s, CDS, "1", "n1", vec![cluster("c1")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    assert_eq!(value_of(&n).get::<Cds>().expect("a cluster").name, "c1");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "1", "n1"));
    let fake = ResourceTypeInfo::of::<FakeClusters>();
    assert!(matches!(
        h.client.watch_type(&fake, "c1"),
        Err(WatchError::UnknownType(url)) if url == CDS
    ));
}

#[test]
fn resources_in_the_resource_wrapper_are_unwrapped() {
    let mut h = Harness::new();
    let w = h.watch::<Rds>("r1");
    let s = h.connect_first(RDS, &["r1"]);
    let wrapped = Resource {
        name: "r1".to_string(),
        version: "7".to_string(),
        resource: Some(route_config("r1", "c1")),
        ..Default::default()
    };
    h.respond(
        s,
        RDS,
        "1",
        "n1",
        vec![any(
            xds_proto_core::resource::type_url::RESOURCE_WRAPPER,
            &wrapped,
        )],
    );
    assert_eq!(h.expect_notify().watcher, w);
    assert_eq!(h.expect_request(s), Req::new(RDS, &["r1"], "1", "n1"));
}

// ----- ACK / NACK -----

#[test]
fn invalid_update_of_a_cached_resource_is_nacked_with_the_last_acked_version() {
    let mut h = Harness::new();
    let (s, ws) = with_cached_clusters(&mut h, &["c1"]);
    h.respond(s, CDS, "2", "n2", vec![fixtures::invalid_cluster("c1")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[0]);
    let e = ambient_error(&n);
    assert_eq!(e.kind, ErrorKind::Invalid);
    let req = h.expect_request(s);
    assert_eq!((req.version.as_str(), req.nonce.as_str()), ("1", "n2"));
    let detail = req.error.expect("a NACK");
    assert!(detail.starts_with("resource index 0: c1: "), "{detail}");
    let reason = detail
        .strip_prefix("resource index 0: c1: ")
        .unwrap_or_default();
    assert_eq!(
        e.status.message,
        format!(
            "xDS server \"xds.example:443\" sent an invalid Cluster \"c1\" (version \"2\"): \
             {reason} (node ID:test-node)"
        )
    );
    h.expect_nothing();
    // The cached value stays and CSDS shows the NACK with its version.
    let snap = &h.client.resource_snapshot()[0];
    assert_eq!(snap.status, ResourceStatusKind::Nacked);
    assert_eq!(&*snap.version, "1");
    assert!(snap.value.is_some());
    let failure = snap.error_state.as_ref().unwrap();
    assert_eq!(failure.version, "2");
    assert_eq!(failure.at, h.now);
}

#[test]
fn invalid_uncached_resource_replaces_the_state_with_an_error() {
    let mut h = Harness::new();
    let w = h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    h.respond(s, LDS, "1", "n1", vec![fixtures::invalid_listener("l1")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    assert_eq!(changed_error(&n).kind, ErrorKind::Invalid);
    let req = h.expect_request(s);
    assert_eq!((req.version.as_str(), req.nonce.as_str()), ("", "n1"));
    assert!(req.error.unwrap().starts_with("resource index 0: l1: "));
    // The server did send it: no does-not-exist later.
    h.advance(60 * SECOND);
    h.expect_nothing();
}

#[test]
fn partially_valid_response_applies_the_valid_resources_and_nacks_the_rest() {
    let mut h = Harness::new();
    let w1 = h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    let w2 = h.watch::<Cds>("c2");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "", ""));
    h.sent(s);
    h.respond(
        s,
        CDS,
        "1",
        "n1",
        vec![cluster("c1"), fixtures::invalid_cluster("c2")],
    );
    let n1 = h.expect_notify();
    assert_eq!(n1.watcher, w1);
    value_of(&n1);
    let n2 = h.expect_notify();
    assert_eq!(n2.watcher, w2);
    assert_eq!(changed_error(&n2).kind, ErrorKind::Invalid);
    let req = h.expect_request(s);
    assert_eq!((req.version.as_str(), req.nonce.as_str()), ("", "n1"));
    let detail = req.error.unwrap();
    assert!(detail.starts_with("resource index 1: c2: "), "{detail}");
    assert!(!detail.contains("index 0"), "{detail}");
    // A later valid response ACKs and clears the NACK.
    h.sent(s);
    h.respond(s, CDS, "2", "n2", vec![cluster("c1"), cluster("c2")]);
    assert_eq!(h.expect_notify().watcher, w2);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "2", "n2"));
    assert!(
        h.client
            .resource_snapshot()
            .iter()
            .all(|r| r.status == ResourceStatusKind::Acked)
    );
}

#[test]
fn resource_whose_type_url_does_not_match_the_response_is_nacked_without_a_name() {
    let mut h = Harness::new();
    h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    h.respond(s, CDS, "1", "n1", vec![listener("c1", "r")]);
    let req = h.expect_request(s);
    assert_eq!(
        req.error.as_deref(),
        Some(format!("resource index 0: <unknown name>: type URL \"{LDS}\" does not match the response's \"{CDS}\"").as_str())
    );
    h.expect_nothing();
}

#[test]
fn duplicate_names_in_one_response_are_nacked() {
    let mut h = Harness::new();
    let w = h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    h.respond(s, CDS, "1", "n1", vec![cluster("c1"), cluster_v("c1", 5)]);
    assert_eq!(changed_error(&h.expect_notify()).kind, ErrorKind::Invalid);
    let req = h.expect_request(s);
    assert_eq!(
        req.error.as_deref(),
        Some("resource index 1: c1: duplicate resource name in response")
    );
    let _ = w;
}

#[test]
fn nack_detail_is_kept_under_8_kib_for_many_invalid_resources() {
    let mut h = Harness::new();
    h.watch::<Cds>("c0");
    let s = h.connect_first(CDS, &["c0"]);
    let bad: Vec<_> = (0..2000)
        .map(|i| fixtures::invalid_cluster(&format!("cluster-{i}")))
        .collect();
    h.respond(s, CDS, "1", "n1", bad);
    let detail = h.expect_request(s).error.unwrap();
    assert!(detail.len() <= 8192, "{}", detail.len());
    assert!(detail.contains("more errors"), "{detail}");
}

#[test]
fn response_that_is_not_a_discovery_response_fails_the_stream() {
    let mut h = Harness::new();
    let w = h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    h.event(Event::ResponseReceived {
        stream: s,
        bytes: bytes::Bytes::from_static(&[0xff, 0xff, 0xff]),
    });
    assert_eq!(h.next_action(), Action::CloseStream { stream: s });
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    let e = changed_error(&n);
    assert_eq!(e.kind, ErrorKind::Connectivity);
    assert!(
        e.status
            .message
            .contains("failed to decode DiscoveryResponse"),
        "{}",
        e.status.message
    );
    h.expect_nothing();
}

#[test]
fn response_for_an_unknown_or_unrequested_type_is_ignored() {
    let mut h = Harness::new();
    h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    h.respond(s, "type.googleapis.com/some.Unknown", "1", "x", vec![]);
    h.respond(s, CDS, "1", "y", vec![cluster("c1")]);
    h.expect_nothing();
}

// ----- coalescing -----

#[test]
fn at_most_one_request_is_outstanding_and_queued_changes_merge() {
    let mut h = Harness::new();
    let w1 = h.watch::<Cds>("c1");
    let s = h.expect_start();
    assert_eq!(
        h.expect_request(s),
        Req::new(CDS, &["c1"], "", "").with_node()
    );
    // Not yet sent: these changes must wait and merge.
    let _w2 = h.watch::<Cds>("c2");
    let _w3 = h.watch::<Cds>("c3");
    h.cancel(w1);
    h.watch::<Eds>("e1");
    h.expect_nothing();
    h.started(s);
    h.sent(s);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c2", "c3"], "", ""));
    h.expect_nothing();
    h.sent(s);
    assert_eq!(h.expect_request(s), Req::new(EDS, &["e1"], "", ""));
    h.sent(s);
    h.expect_nothing();
}

#[test]
fn unsubscribe_and_resubscribe_during_an_in_flight_send_gives_one_request() {
    let mut h = Harness::new();
    h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    let w2 = h.watch::<Cds>("c2");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "", ""));
    // In flight: drop c2 and take it again before the transport sends.
    h.cancel(w2);
    h.watch::<Cds>("c2");
    h.expect_nothing();
    h.sent(s);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "", ""));
}

#[test]
fn acks_for_several_types_queue_behind_the_outstanding_send() {
    let mut h = Harness::new();
    h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    h.watch::<Cds>("c1");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "", ""));
    // Still outstanding: two responses arrive.
    h.respond(s, LDS, "1", "a", vec![listener("l1", "r1")]);
    h.expect_notify();
    h.respond(s, CDS, "1", "b", vec![cluster("c1")]);
    h.expect_notify();
    h.expect_nothing();
    h.sent(s);
    assert_eq!(h.expect_request(s), Req::new(LDS, &["l1"], "1", "a"));
    h.sent(s);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "1", "b"));
}

#[test]
fn last_watch_of_a_type_sends_an_empty_list_when_other_types_remain() {
    let mut h = Harness::new();
    h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    let wc = h.watch::<Cds>("c1");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "", ""));
    h.sent(s);
    h.cancel(wc);
    assert_eq!(h.expect_request(s), Req::new(CDS, &[], "", ""));
    h.expect_nothing();
}

#[test]
fn cancelling_the_last_watch_closes_the_stream_without_an_unsubscribe() {
    let mut h = Harness::new();
    let (s, ws) = with_cached_clusters(&mut h, &["c1"]);
    h.cancel(ws[0]);
    assert_eq!(
        h.take(),
        vec![
            Action::CloseStream { stream: s },
            Action::DropChannel {
                server: xds_proto_core::ServerId::from_raw(0)
            }
        ]
    );
    assert!(h.client.resource_snapshot().is_empty());
    // Events for the closed stream are ignored; a new watch opens a new stream from scratch.
    h.respond(s, CDS, "2", "n2", vec![cluster("c1")]);
    h.expect_nothing();
    h.watch::<Cds>("c1");
    let s2 = h.expect_start();
    assert_eq!(
        h.expect_request(s2),
        Req::new(CDS, &["c1"], "", "").with_node()
    );
}

#[test]
fn nothing_reaches_a_cancelled_watcher() {
    let mut h = Harness::new();
    let w1 = h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    let w2 = h.watch::<Cds>("c1");
    h.cancel(w1);
    h.respond(s, CDS, "1", "n1", vec![cluster("c1")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    assert!(
        h.take()
            .iter()
            .all(|a| !matches!(a, Action::Notify(n) if n.watcher == w1))
    );
}

// ----- A57: stream termination, backoff, connectivity -----

#[test]
fn stream_closed_before_any_response_is_a_connectivity_error_for_every_watcher() {
    let mut h = Harness::new();
    let wl = h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    let wc = h.watch::<Cds>("c1");
    h.expect_request(s);
    h.close(s, Code::UNAVAILABLE, "connection refused");
    let mut seen = Vec::new();
    for _ in 0..2 {
        let n = h.expect_notify();
        let e = changed_error(&n);
        assert_eq!(e.kind, ErrorKind::Connectivity);
        assert_eq!(e.status.code, Code::UNAVAILABLE);
        assert_eq!(
            e.status.message,
            "xDS channel for server \"xds.example:443\": ADS stream closed before any response: UNAVAILABLE: connection refused (node ID:test-node)"
        );
        seen.push(n.watcher);
    }
    seen.sort();
    assert_eq!(seen, vec![wl, wc]);
    // No reconnect before the backoff delay.
    h.expect_nothing();
    let retry_at = h.client.poll_timeout().expect("a reconnect timer");
    let delay = retry_at.saturating_duration_since(h.now);
    assert!(
        delay >= Duration::from_millis(800) && delay <= Duration::from_millis(1200),
        "{delay:?}"
    );
}

#[test]
fn stream_closed_after_a_response_reconnects_at_once_without_an_error() {
    let mut h = Harness::new();
    let (s, _) = with_cached_clusters(&mut h, &["c1"]);
    h.close(s, Code::UNAVAILABLE, "goaway");
    let s2 = h.expect_start();
    assert_eq!(
        h.expect_request(s2),
        Req::new(CDS, &["c1"], "1", "").with_node()
    );
    h.expect_nothing();
}

#[test]
fn backoff_grows_between_failing_attempts_and_resets_after_a_response() {
    let mut h = Harness::new();
    h.watch::<Cds>("c1");
    let mut s = h.expect_start();
    h.take();
    let mut base = 1.0f64;
    for _ in 0..5 {
        h.close(s, Code::UNAVAILABLE, "refused");
        h.take();
        let delay = h
            .client
            .poll_timeout()
            .unwrap()
            .saturating_duration_since(h.now)
            .as_secs_f64();
        assert!(
            delay >= base * 0.8 - 1e-6 && delay <= base * 1.2 + 1e-6,
            "{delay} for base {base}"
        );
        h.advance(Duration::from_secs_f64(delay));
        s = h.expect_start();
        h.take();
        base *= 1.6;
    }
    // A response resets the backoff: the next failure waits about a second again.
    h.started(s);
    h.sent(s);
    h.respond(s, CDS, "1", "n1", vec![cluster("c1")]);
    h.take();
    h.sent(s);
    h.close(s, Code::UNAVAILABLE, "goaway");
    let s2 = h.expect_start();
    h.take();
    h.close(s2, Code::UNAVAILABLE, "refused");
    h.take();
    let delay = h
        .client
        .poll_timeout()
        .unwrap()
        .saturating_duration_since(h.now)
        .as_secs_f64();
    assert!((0.8..=1.2).contains(&delay), "{delay}");
}

#[test]
fn connectivity_failure_with_cached_data_is_an_ambient_error() {
    let mut h = Harness::new();
    let (_, ws) = with_cached_clusters(&mut h, &["c1"]);
    h.connectivity_failure(0, "connection reset by peer");
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[0]);
    let e = ambient_error(&n);
    assert_eq!(e.kind, ErrorKind::Connectivity);
    assert_eq!(
        e.status.message,
        "xDS channel for server \"xds.example:443\": connection reset by peer (node ID:test-node)"
    );
    h.expect_nothing();
    // A new watcher gets the value, then the standing error.
    let w2 = h.watch::<Cds>("c1");
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    value_of(&n);
    assert_eq!(
        ambient_error(&h.expect_notify()).kind,
        ErrorKind::Connectivity
    );
}

#[test]
fn connectivity_failure_without_cached_data_replaces_the_state() {
    let mut h = Harness::new();
    let w = h.watch::<Lds>("l1");
    h.connect_first(LDS, &["l1"]);
    h.connectivity_failure(0, "tls handshake failed");
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    assert_eq!(changed_error(&n).kind, ErrorKind::Connectivity);
    // A new watcher of another resource on the failing server hears of it at once.
    let w2 = h.watch::<Lds>("l2");
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    assert!(
        changed_error(&n)
            .status
            .message
            .contains("tls handshake failed")
    );
}

#[test]
fn watch_while_in_backoff_waits_for_the_timer_and_gets_the_error_at_once() {
    let mut h = Harness::new();
    h.watch::<Cds>("c1");
    let s = h.expect_start();
    h.take();
    h.close(s, Code::UNAVAILABLE, "refused");
    h.take();
    let w2 = h.watch::<Cds>("c2");
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    assert_eq!(changed_error(&n).kind, ErrorKind::Connectivity);
    h.expect_nothing();
    h.advance(2 * SECOND);
    let s2 = h.expect_start();
    assert_eq!(
        h.expect_request(s2),
        Req::new(CDS, &["c1", "c2"], "", "").with_node()
    );
}

#[test]
fn a_response_clears_the_standing_connectivity_error() {
    let mut h = Harness::new();
    let (s, _) = with_cached_clusters(&mut h, &["c1"]);
    h.connectivity_failure(0, "blip");
    h.take();
    h.respond(s, CDS, "2", "n2", vec![cluster("c1")]);
    h.take();
    assert!(
        h.client
            .server_error(xds_proto_core::ServerId::from_raw(0))
            .is_none()
    );
    h.watch::<Cds>("c1");
    value_of(&h.expect_notify());
    h.expect_nothing();
}

// ----- A57: the does-not-exist timer -----

#[test]
fn does_not_exist_fires_15_seconds_after_the_subscription_was_sent() {
    let mut h = Harness::new();
    let w = h.watch::<Cds>("missing");
    h.connect_first(CDS, &["missing"]);
    h.advance(Duration::from_millis(14_999));
    h.expect_nothing();
    h.advance(Duration::from_millis(1));
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    let e = changed_error(&n);
    assert_eq!(
        (e.kind, e.status.code),
        (ErrorKind::DoesNotExist, Code::NOT_FOUND)
    );
    assert_eq!(
        e.status.message,
        "Cluster \"missing\" does not exist: xDS server \"xds.example:443\" did not send it within 15s (node ID:test-node)"
    );
    assert_eq!(
        h.client.resource_snapshot()[0].status,
        ResourceStatusKind::DoesNotExist
    );
    // A later watcher gets the does-not-exist state at once.
    let w2 = h.watch::<Cds>("missing");
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    assert_eq!(changed_error(&n).kind, ErrorKind::DoesNotExist);
}

#[test]
fn the_timer_does_not_start_while_the_request_is_not_yet_sent() {
    let mut h = Harness::new();
    let w = h.watch::<Cds>("c1");
    let s = h.expect_start();
    h.expect_request(s);
    h.started(s);
    // The transport holds the request for a minute (still connecting).
    h.advance(60 * SECOND);
    h.expect_nothing();
    h.sent(s);
    h.advance(Duration::from_millis(14_999));
    h.expect_nothing();
    h.advance(Duration::from_millis(1));
    assert_eq!(h.expect_notify().watcher, w);
}

#[test]
fn the_timer_does_not_start_before_the_stream_is_established() {
    let mut h = Harness::new();
    let w = h.watch::<Cds>("c1");
    let s = h.expect_start();
    h.expect_request(s);
    h.sent(s); // taken by the transport, but not yet on an established connection
    h.advance(60 * SECOND);
    h.expect_nothing();
    h.started(s);
    h.advance(15 * SECOND);
    assert_eq!(
        changed_error(&h.expect_notify()).kind,
        ErrorKind::DoesNotExist
    );
    let _ = w;
}

#[test]
fn the_timer_is_cancelled_by_a_stream_failure_and_restarted_on_the_next_stream() {
    let mut h = Harness::new();
    let w = h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    h.advance(10 * SECOND);
    h.close(s, Code::UNAVAILABLE, "reset");
    assert_eq!(
        changed_error(&h.expect_notify()).kind,
        ErrorKind::Connectivity
    );
    // Backoff ~1 s; the old timer would have fired at 15 s: it must not.
    h.advance(2 * SECOND);
    let s2 = h.expect_start();
    h.expect_request(s2);
    h.advance(10 * SECOND);
    h.expect_nothing();
    h.started(s2);
    h.sent(s2);
    h.advance(Duration::from_millis(14_999));
    h.expect_nothing();
    h.advance(Duration::from_millis(1));
    let n = h.expect_notify();
    assert_eq!(
        (n.watcher, changed_error(&n).kind),
        (w, ErrorKind::DoesNotExist)
    );
}

#[test]
fn the_timer_never_fires_while_the_channel_reports_a_failure() {
    let mut h = Harness::new();
    h.watch::<Cds>("c1");
    h.connect_first(CDS, &["c1"]);
    h.advance(5 * SECOND);
    h.connectivity_failure(0, "unreachable");
    h.take();
    h.advance(120 * SECOND);
    h.expect_nothing();
}

#[test]
fn the_timer_never_starts_for_a_cached_resource_on_a_new_stream() {
    let mut h = Harness::new();
    let (s, _) = with_cached_clusters(&mut h, &["c1"]);
    h.close(s, Code::UNAVAILABLE, "goaway");
    let s2 = h.expect_start();
    h.expect_request(s2);
    h.started(s2);
    h.sent(s2);
    h.advance(120 * SECOND);
    h.expect_nothing();
    assert_eq!(h.client.poll_timeout(), None);
}

#[test]
fn only_uncached_resources_are_timed_on_a_new_stream() {
    let mut h = Harness::new();
    let (s, _) = with_cached_clusters(&mut h, &["c1"]);
    let w2 = h.watch::<Cds>("c2");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "1", "n1"));
    h.close(s, Code::UNAVAILABLE, "goaway");
    let s2 = h.expect_start();
    assert_eq!(
        h.expect_request(s2),
        Req::new(CDS, &["c1", "c2"], "1", "").with_node()
    );
    h.started(s2);
    h.sent(s2);
    h.advance(15 * SECOND);
    let n = h.expect_notify();
    assert_eq!((n.watcher, &*n.name), (w2, "c2"));
    h.expect_nothing();
}

#[test]
fn a_resource_arriving_before_the_timer_cancels_it_and_one_arriving_after_replaces_the_error() {
    let mut h = Harness::new();
    let w1 = h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    let w2 = h.watch::<Cds>("c2");
    h.expect_request(s);
    h.sent(s);
    h.advance(5 * SECOND);
    h.respond(s, CDS, "1", "n1", vec![cluster("c1")]);
    assert_eq!(h.expect_notify().watcher, w1);
    h.expect_request(s);
    h.sent(s);
    h.advance(10 * SECOND);
    let n = h.expect_notify();
    assert_eq!(
        (n.watcher, changed_error(&n).kind),
        (w2, ErrorKind::DoesNotExist)
    );
    h.advance(60 * SECOND);
    h.expect_nothing();
    h.respond(s, CDS, "2", "n2", vec![cluster("c1"), cluster("c2")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    value_of(&n);
}

#[test]
fn a_resubscription_after_cancel_starts_a_fresh_timer() {
    let mut h = Harness::new();
    let (s, _) = with_cached_clusters(&mut h, &["c1"]);
    let w2 = h.watch::<Cds>("c2");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "1", "n1"));
    h.sent(s);
    h.advance(5 * SECOND);
    // Dropped and taken again while the unsubscribe is still outstanding.
    h.cancel(w2);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "1", "n1"));
    let w3 = h.watch::<Cds>("c2");
    h.expect_nothing();
    h.sent(s);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "1", "n1"));
    h.sent(s);
    // The first subscription's timer died with it; the new one runs 15 s from its send.
    h.advance(Duration::from_millis(14_999));
    h.expect_nothing();
    h.advance(Duration::from_millis(1));
    let n = h.expect_notify();
    assert_eq!(
        (n.watcher, changed_error(&n).kind),
        (w3, ErrorKind::DoesNotExist)
    );
}

#[test]
fn a_transient_resource_timer_reports_unavailable_instead_of_does_not_exist() {
    let json = ONE_SERVER_BOOTSTRAP.replace(
        r#""channel_creds": [{"type": "insecure"}]"#,
        r#""channel_creds": [{"type": "insecure"}], "server_features": ["resource_timer_is_transient_error"]"#,
    );
    let mut h = Harness::with_bootstrap(&json, |c| {
        c.transient_resource_timeout = Duration::from_secs(3)
    });
    h.watch::<Cds>("c1");
    h.connect_first(CDS, &["c1"]);
    h.advance(3 * SECOND);
    let n = h.expect_notify();
    let e = changed_error(&n);
    assert_eq!(
        (e.kind, e.status.code),
        (ErrorKind::Timeout, Code::UNAVAILABLE)
    );
    assert_eq!(
        h.client.resource_snapshot()[0].status,
        ResourceStatusKind::Timeout
    );
}

/// A timed-out resource is not cached (A57): a new stream's subscribing request times it
/// again, and the server's copy replaces the timeout when it comes.
#[test]
fn a_transient_timeout_is_timed_again_on_a_new_stream() {
    let json = ONE_SERVER_BOOTSTRAP.replace(
        r#""channel_creds": [{"type": "insecure"}]"#,
        r#""channel_creds": [{"type": "insecure"}], "server_features": ["resource_timer_is_transient_error"]"#,
    );
    let mut h = Harness::with_bootstrap(&json, |c| {
        c.transient_resource_timeout = Duration::from_secs(3)
    });
    let w = h.watch::<Cds>("c1");
    let s1 = h.connect_first(CDS, &["c1"]);
    h.respond(s1, CDS, "1", "n1", vec![]);
    assert_eq!(h.expect_request(s1), Req::new(CDS, &["c1"], "1", "n1"));
    h.sent(s1);
    h.advance(3 * SECOND);
    assert_eq!(changed_error(&h.expect_notify()).kind, ErrorKind::Timeout);
    // The stream ends after a response: a new one at once, no backoff.
    h.close(s1, Code::UNAVAILABLE, "server restarting");
    let s2 = h.expect_start();
    assert_eq!(
        h.expect_request(s2),
        Req::new(CDS, &["c1"], "1", "").with_node()
    );
    h.expect_nothing();
    h.started(s2);
    h.sent(s2);
    h.respond(s2, CDS, "1", "n2", vec![]);
    assert_eq!(h.expect_request(s2), Req::new(CDS, &["c1"], "1", "n2"));
    h.sent(s2);
    h.advance(3 * SECOND - Duration::from_millis(1));
    h.expect_nothing();
    h.advance(Duration::from_millis(1));
    let n = h.expect_notify();
    assert_eq!((n.watcher, changed_error(&n).kind), (w, ErrorKind::Timeout));
    // A third stream: this time the server has it.
    h.close(s2, Code::UNAVAILABLE, "server restarting");
    let s3 = h.expect_start();
    h.expect_request(s3);
    h.started(s3);
    h.sent(s3);
    h.respond(s3, CDS, "2", "n2", vec![cluster("c1")]);
    let n = h.expect_notify();
    assert!(matches!(n.event, WatchEvent::Changed(Ok(_))), "{n:?}");
    assert_eq!(
        h.client.resource_snapshot()[0].status,
        ResourceStatusKind::Acked
    );
}

/// A type whose only name is unwatched before its first request leaves sends nothing:
/// an empty first LDS/CDS request would subscribe to every resource (legacy wildcard).
#[test]
fn a_type_unwatched_before_its_first_request_sends_no_empty_request() {
    let mut h = Harness::new();
    h.watch::<Lds>("l");
    let s = h.expect_start();
    assert_eq!(
        h.expect_request(s),
        Req::new(LDS, &["l"], "", "").with_node()
    );
    let w = h.watch::<Cds>("c"); // waits: the LDS request is outstanding
    h.cancel(w);
    h.started(s);
    h.sent(s);
    h.expect_nothing();
    h.watch::<Cds>("d");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["d"], "", ""));
}

// ----- A88: deletion of LDS/CDS resources -----

#[test]
fn missing_cds_resource_is_an_ambient_not_found_by_default_and_the_cache_is_kept() {
    let mut h = Harness::new();
    let (s, ws) = with_cached_clusters(&mut h, &["c1", "c2"]);
    h.respond(s, CDS, "2", "n2", vec![cluster("c1")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[1]);
    let e = ambient_error(&n);
    assert_eq!(
        (e.kind, e.status.code),
        (ErrorKind::DeletionIgnored, Code::NOT_FOUND)
    );
    assert_eq!(
        e.status.message,
        "xDS server \"xds.example:443\" no longer sends Cluster \"c2\"; keeping the cached \
         value (node ID:test-node)"
    );
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "2", "n2"));
    h.sent(s);
    // Reported once, not on every response that still omits it.
    h.respond(s, CDS, "3", "n3", vec![cluster("c1")]);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "3", "n3"));
    h.expect_nothing();
    let c2 = h
        .client
        .resource_snapshot()
        .into_iter()
        .find(|r| &*r.name == "c2")
        .unwrap();
    assert_eq!(c2.status, ResourceStatusKind::DoesNotExist);
    assert!(c2.value.is_some());
}

#[test]
fn missing_lds_resource_is_dropped_under_fail_on_data_errors() {
    let mut h = Harness::with_bootstrap(&fail_on_data_errors_bootstrap(), |_| {});
    let w1 = h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    let w2 = h.watch::<Lds>("l2");
    h.expect_request(s);
    h.sent(s);
    h.respond(
        s,
        LDS,
        "1",
        "n1",
        vec![listener("l1", "r"), listener("l2", "r")],
    );
    h.take();
    h.sent(s);
    h.respond(s, LDS, "2", "n2", vec![listener("l1", "r")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    assert_eq!(changed_error(&n).kind, ErrorKind::DoesNotExist);
    assert_eq!(h.expect_request(s), Req::new(LDS, &["l1", "l2"], "2", "n2"));
    let l2 = h
        .client
        .resource_snapshot()
        .into_iter()
        .find(|r| &*r.name == "l2")
        .unwrap();
    assert_eq!(
        (l2.status, l2.value.is_none()),
        (ResourceStatusKind::DoesNotExist, true)
    );
    let _ = w1;
}

#[test]
fn a_user_defined_resource_type_is_watched_like_a_built_in_one() {
    use xds_proto_core::{DecodeError, XdsResourceType};
    /// `google.protobuf.StringValue` resources named by their own value's prefix.
    struct Greeting;
    impl XdsResourceType for Greeting {
        type Value = String;
        const TYPE_URL: &'static str = "type.googleapis.com/google.protobuf.StringValue";
        const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
        fn decode(bytes: &[u8]) -> Result<(String, String), DecodeError> {
            use prost::Message;
            let v = xds_proto_core::pb::google::protobuf::StringValue::decode(bytes)
                .map_err(|e| DecodeError::unnamed(e.to_string()))?;
            let (name, text) = v
                .value
                .split_once('=')
                .ok_or_else(|| DecodeError::unnamed("no '='"))?;
            if text.is_empty() {
                return Err(DecodeError::named(name, "empty greeting"));
            }
            Ok((name.to_string(), text.to_string()))
        }
    }
    const URL: &str = "type.googleapis.com/google.protobuf.StringValue";
    /// Another Rust type claiming the same type URL.
    struct Impostor;
    impl XdsResourceType for Impostor {
        type Value = u32;
        const TYPE_URL: &'static str = URL;
        const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
        fn decode(_: &[u8]) -> Result<(String, u32), DecodeError> {
            Err(DecodeError::unnamed("never registered"))
        }
    }
    let mut h = Harness::new();
    assert_eq!(
        h.client.watch::<Greeting>("hello"),
        Err(WatchError::UnknownType(URL.to_string())),
        "an unregistered type is refused"
    );
    h.client.register_type::<Greeting>().unwrap();
    assert!(h.client.register_type::<Greeting>().is_err());
    assert!(h.client.register_type::<Impostor>().is_err());
    assert_eq!(
        h.client.watch::<Impostor>("hello"),
        Err(WatchError::UnknownType(URL.to_string())),
        "a type URL registered by another Rust type is refused, so values always read back typed"
    );
    assert!(h.take().is_empty());
    let w = h.watch::<Greeting>("hello");
    let s = h.connect_first(URL, &["hello"]);
    let greeting = |v: &str| {
        any(
            URL,
            &xds_proto_core::pb::google::protobuf::StringValue {
                value: v.to_string(),
            },
        )
    };
    h.respond(s, URL, "1", "a", vec![greeting("hello=world")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    assert_eq!(n.value::<Greeting>().map(String::as_str), Some("world"));
    assert_eq!(h.expect_request(s), Req::new(URL, &["hello"], "1", "a"));
    h.sent(s);
    h.respond(s, URL, "2", "b", vec![greeting("hello=")]);
    assert_eq!(ambient_error(&h.expect_notify()).kind, ErrorKind::Invalid);
    assert_eq!(
        h.expect_request(s).error.as_deref(),
        Some("resource index 0: hello: empty greeting")
    );
}

#[test]
fn missing_rds_and_eds_resources_are_not_deletions() {
    let mut h = Harness::with_bootstrap(&fail_on_data_errors_bootstrap(), |_| {});
    h.watch::<Rds>("r1");
    let s = h.connect_first(RDS, &["r1"]);
    h.watch::<Rds>("r2");
    h.expect_request(s);
    h.sent(s);
    h.respond(
        s,
        RDS,
        "1",
        "n1",
        vec![route_config("r1", "c"), route_config("r2", "c")],
    );
    h.take();
    h.sent(s);
    h.respond(s, RDS, "2", "n2", vec![route_config("r1", "c")]);
    assert_eq!(h.expect_request(s), Req::new(RDS, &["r1", "r2"], "2", "n2"));
    h.expect_nothing();
}

#[test]
fn deletion_is_not_inferred_when_an_unnamed_resource_failed_to_decode() {
    let mut h = Harness::with_bootstrap(&fail_on_data_errors_bootstrap(), |_| {});
    let (s, _) = with_cached_clusters(&mut h, &["c1", "c2"]);
    let garbage = xds_proto_core::pb::google::protobuf::Any {
        type_url: CDS.to_string(),
        value: bytes::Bytes::from_static(&[0x0a, 0xff]),
    };
    h.respond(s, CDS, "2", "n2", vec![cluster("c1"), garbage]);
    let req = h.expect_request(s);
    assert!(
        req.error
            .unwrap()
            .starts_with("resource index 1: <unknown name>: ")
    );
    h.expect_nothing();
}

// ----- TP3: resource_errors -----

fn respond_errors(
    h: &mut Harness,
    s: StreamId,
    type_url: &str,
    resources: Vec<xds_proto_core::pb::google::protobuf::Any>,
    errors: Vec<xds_proto_core::pb::envoy::service::discovery::v3::ResourceError>,
) {
    let mut r = response(type_url, "2", "e1", resources);
    r.resource_errors = errors;
    h.respond_with(s, r);
}

#[test]
fn transient_server_error_for_an_uncached_resource_cancels_the_timer() {
    for code in [
        Code::UNAVAILABLE,
        Code::INTERNAL,
        Code::UNKNOWN,
        Code::ABORTED,
        Code(99),
    ] {
        let mut h = Harness::new();
        let w = h.watch::<Cds>("c1");
        let s = h.connect_first(CDS, &["c1"]);
        respond_errors(
            &mut h,
            s,
            CDS,
            vec![],
            vec![resource_error("c1", code, "backend down")],
        );
        let n = h.expect_notify();
        assert_eq!(n.watcher, w);
        let e = changed_error(&n);
        assert_eq!((e.kind, e.status.code), (ErrorKind::ServerReported, code));
        assert!(
            e.status
                .message
                .ends_with("backend down (node ID:test-node)"),
            "{}",
            e.status.message
        );
        assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "2", "e1"));
        h.advance(60 * SECOND);
        h.expect_nothing();
        assert_eq!(
            h.client.resource_snapshot()[0].status,
            ResourceStatusKind::ReceivedError
        );
    }
}

#[test]
fn transient_server_error_for_a_cached_resource_is_ambient_and_keeps_the_value() {
    for code in [
        Code::UNAVAILABLE,
        Code::INTERNAL,
        Code::UNKNOWN,
        Code::RESOURCE_EXHAUSTED,
    ] {
        let mut h = Harness::with_bootstrap(&fail_on_data_errors_bootstrap(), |_| {});
        let (s, ws) = with_cached_clusters(&mut h, &["c1"]);
        respond_errors(
            &mut h,
            s,
            CDS,
            vec![],
            vec![resource_error("c1", code, "flaky")],
        );
        let n = h.expect_notify();
        assert_eq!(n.watcher, ws[0]);
        assert_eq!(ambient_error(&n).kind, ErrorKind::ServerReported);
        // Under fail_on_data_errors too: transient errors never drop the cache, and the
        // LDS/CDS name counts as present (no deletion).
        assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "2", "e1"));
        h.expect_nothing();
        let snap = &h.client.resource_snapshot()[0];
        assert_eq!(snap.status, ResourceStatusKind::ReceivedError);
        assert!(snap.value.is_some());
        assert!(snap.error_state.as_ref().unwrap().details.contains("flaky"));
    }
}

#[test]
fn not_found_for_an_uncached_resource_is_does_not_exist_at_once() {
    let mut h = Harness::new();
    let w = h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    respond_errors(
        &mut h,
        s,
        LDS,
        vec![],
        vec![resource_error("l1", Code::NOT_FOUND, "no such listener")],
    );
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    let e = changed_error(&n);
    assert_eq!(
        (e.kind, e.status.code),
        (ErrorKind::DoesNotExist, Code::NOT_FOUND)
    );
    assert_eq!(
        e.status.message,
        "xDS server \"xds.example:443\" reported an error for Listener \"l1\": NOT_FOUND: no \
         such listener (node ID:test-node)"
    );
    h.expect_request(s);
    h.advance(60 * SECOND);
    h.expect_nothing();
}

#[test]
fn data_errors_on_cached_resources_keep_the_cache_by_default() {
    for code in [Code::NOT_FOUND, Code::PERMISSION_DENIED] {
        let mut h = Harness::new();
        let (s, ws) = with_cached_clusters(&mut h, &["c1"]);
        respond_errors(
            &mut h,
            s,
            CDS,
            vec![],
            vec![resource_error("c1", code, "denied")],
        );
        let n = h.expect_notify();
        assert_eq!(n.watcher, ws[0]);
        assert_eq!(ambient_error(&n).status.code, code);
        h.expect_request(s);
        assert!(h.client.resource_snapshot()[0].value.is_some());
    }
}

#[test]
fn data_errors_on_cached_resources_drop_the_cache_under_fail_on_data_errors() {
    for code in [Code::NOT_FOUND, Code::PERMISSION_DENIED] {
        let mut h = Harness::with_bootstrap(&fail_on_data_errors_bootstrap(), |_| {});
        let (s, ws) = with_cached_clusters(&mut h, &["c1"]);
        respond_errors(
            &mut h,
            s,
            CDS,
            vec![],
            vec![resource_error("c1", code, "gone")],
        );
        let n = h.expect_notify();
        assert_eq!(n.watcher, ws[0]);
        assert_eq!(changed_error(&n).status.code, code);
        h.expect_request(s);
        let snap = &h.client.resource_snapshot()[0];
        assert!(snap.value.is_none());
        assert_eq!(snap.status, ResourceStatusKind::ReceivedError);
    }
}

#[test]
fn a_server_error_is_remembered_until_the_resource_arrives() {
    let mut h = Harness::new();
    h.watch::<Lds>("l1");
    let s = h.connect_first(LDS, &["l1"]);
    respond_errors(
        &mut h,
        s,
        LDS,
        vec![],
        vec![resource_error("l1", Code::PERMISSION_DENIED, "not yours")],
    );
    h.take();
    h.sent(s);
    // A later LDS response without l1 and without an error: the error still stands.
    h.respond(s, LDS, "3", "n3", vec![]);
    assert_eq!(h.expect_request(s), Req::new(LDS, &["l1"], "3", "n3"));
    h.sent(s);
    let w2 = h.watch::<Lds>("l1");
    let n = h.expect_notify();
    assert_eq!(n.watcher, w2);
    assert_eq!(changed_error(&n).status.code, Code::PERMISSION_DENIED);
    // Then the resource arrives and replaces the error.
    h.respond(s, LDS, "4", "n4", vec![listener("l1", "r1")]);
    assert_eq!(
        value_of(&h.expect_notify()).get::<Lds>().unwrap().name,
        "l1"
    );
    h.expect_notify();
    assert_eq!(
        h.client.resource_snapshot()[0].status,
        ResourceStatusKind::Acked
    );
}

#[test]
fn resource_errors_with_an_empty_name_or_an_ok_status_make_the_response_a_nack() {
    let mut h = Harness::new();
    let w = h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    respond_errors(
        &mut h,
        s,
        CDS,
        vec![cluster("c1")],
        vec![
            resource_error("", Code::UNAVAILABLE, "x"),
            resource_error("c9", Code::OK, "fine"),
        ],
    );
    assert_eq!(h.expect_notify().watcher, w); // the valid resource is still applied
    let req = h.expect_request(s);
    assert_eq!(req.version, "");
    assert_eq!(
        req.error.as_deref(),
        Some(
            "resource_errors[0]: empty resource name; resource_errors[1]: c9: error_detail has status OK"
        )
    );
}

// ----- A88 data errors (issue 11) -----

fn bootstrap_with_features(features: &str) -> String {
    ONE_SERVER_BOOTSTRAP.replace(
        r#""channel_creds": [{"type": "insecure"}]"#,
        &format!(r#""channel_creds": [{{"type": "insecure"}}], "server_features": [{features}]"#),
    )
}

fn csds_of(
    h: &Harness,
    name: &str,
) -> xds_proto_core::pb::envoy::service::status::v3::client_config::GenericXdsConfig {
    h.client
        .csds_configs()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no CSDS entry for {name}"))
}

/// Item 1: a NACK is a data error; under `fail_on_data_errors` it drops the cached
/// value (A88), so the watchers stop using it and CSDS shows no config.
#[test]
fn a_nack_under_fail_on_data_errors_drops_the_cached_value() {
    use xds_proto_core::pb::envoy::admin::v3::ClientResourceStatus;
    let mut h = Harness::with_bootstrap(&fail_on_data_errors_bootstrap(), |_| {});
    let (s, ws) = with_cached_clusters(&mut h, &["c1"]);
    h.respond(s, CDS, "2", "n2", vec![fixtures::invalid_cluster("c1")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[0]);
    let e = changed_error(&n);
    assert_eq!(
        (e.kind, e.status.code),
        (ErrorKind::Invalid, Code::UNAVAILABLE)
    );
    let req = h.expect_request(s);
    assert_eq!((req.version.as_str(), req.nonce.as_str()), ("1", "n2"));
    assert!(req.error.unwrap().starts_with("resource index 0: c1: "));
    h.sent(s);
    h.expect_nothing();
    let c1 = csds_of(&h, "c1");
    assert_eq!(c1.client_status, ClientResourceStatus::Nacked as i32);
    assert!(c1.xds_config.is_none());
    assert_eq!(c1.error_state.as_ref().unwrap().version_info, "2");
    // A new watcher gets the error, not the dropped value.
    let w2 = h.watch::<Cds>("c1");
    let n = h.expect_notify();
    assert_eq!(
        (n.watcher, changed_error(&n).kind),
        (w2, ErrorKind::Invalid)
    );
    // The same value as before is new again: it is cached and told.
    h.respond(s, CDS, "3", "n3", vec![cluster("c1")]);
    assert_eq!(h.expect_notify().watcher, ws[0]);
    value_of(&h.expect_notify());
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "3", "n3"));
    assert_eq!(
        csds_of(&h, "c1").client_status,
        ClientResourceStatus::Acked as i32
    );
}

/// Item 2: with `resource_timer_is_transient_error` the resource timer runs 30 s, not
/// 15 s (A88), and reports UNAVAILABLE.
#[test]
fn the_transient_resource_timer_runs_30_seconds() {
    let json = bootstrap_with_features(r#""resource_timer_is_transient_error""#);
    let mut h = Harness::with_bootstrap(&json, |_| {});
    let w = h.watch::<Cds>("c1");
    h.connect_first(CDS, &["c1"]);
    h.advance(15 * SECOND);
    h.expect_nothing();
    h.advance(15 * SECOND - Duration::from_millis(1));
    h.expect_nothing();
    h.advance(Duration::from_millis(1));
    let n = h.expect_notify();
    let e = changed_error(&n);
    assert_eq!(
        (n.watcher, e.kind, e.status.code),
        (w, ErrorKind::Timeout, Code::UNAVAILABLE)
    );
    assert_eq!(
        e.status.message,
        "timed out after 30s waiting for Cluster \"c1\" from xDS server \"xds.example:443\" (node ID:test-node)"
    );
}

/// Item 3: a resource in a `Resource` wrapper is named by the wrapper: a payload that
/// does not decode, or is of another type, reaches the wrapper name's watchers and the
/// NACK names it; no false does-not-exist follows.
#[test]
fn an_invalid_payload_in_a_resource_wrapper_is_reported_under_the_wrappers_name() {
    use xds_proto_core::pb::google::protobuf::Any;
    let mut h = Harness::new();
    let w1 = h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    let w2 = h.watch::<Cds>("c2");
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1", "c2"], "", ""));
    h.sent(s);
    let wrap = |name: &str, inner: Any| {
        let wrapper = Resource {
            name: name.to_string(),
            resource: Some(inner),
            ..Default::default()
        };
        any(
            xds_proto_core::resource::type_url::RESOURCE_WRAPPER,
            &wrapper,
        )
    };
    let garbage = Any {
        type_url: CDS.to_string(),
        value: vec![0xff, 0xff, 0xff].into(),
    };
    let wrong_type = listener("c2", "r");
    h.respond(
        s,
        CDS,
        "1",
        "n1",
        vec![wrap("c1", garbage), wrap("c2", wrong_type)],
    );
    for w in [w1, w2] {
        let n = h.expect_notify();
        assert_eq!((n.watcher, changed_error(&n).kind), (w, ErrorKind::Invalid));
    }
    let detail = h.expect_request(s).error.expect("a NACK");
    assert!(detail.starts_with("resource index 0: c1: "), "{detail}");
    assert!(
        detail.contains("; resource index 1: c2: type URL"),
        "{detail}"
    );
    h.sent(s);
    h.advance(60 * SECOND);
    h.expect_nothing();
}

/// Issue 24 item 3: the wrapper's name is the resource's name, whatever its payload
/// calls itself (as C-core files it): a wrapper `foo5` around a valid cluster named
/// `foo5-inner` fills `foo5`'s watch, is ACKed, and stays: no does-not-exist, and the
/// next response that carries it again deletes nothing. Delta follows the same rule
/// (`delta.rs`).
#[test]
fn a_wrapped_resource_is_named_by_its_wrapper_not_by_its_payload() {
    let mut h = Harness::new();
    let w = h.watch::<Cds>("foo5");
    let s = h.connect_first(CDS, &["foo5"]);
    let wrapped = || {
        let wrapper = Resource {
            name: "foo5".to_string(),
            resource: Some(cluster("foo5-inner")),
            ..Default::default()
        };
        any(
            xds_proto_core::resource::type_url::RESOURCE_WRAPPER,
            &wrapper,
        )
    };
    h.respond(s, CDS, "1", "n1", vec![wrapped()]);
    let n = h.expect_notify();
    assert_eq!((n.watcher, &*n.name), (w, "foo5"));
    assert_eq!(
        value_of(&n).get::<Cds>().expect("a cluster").name,
        "foo5-inner"
    );
    assert_eq!(h.expect_request(s), Req::new(CDS, &["foo5"], "1", "n1"));
    h.sent(s);
    h.respond(s, CDS, "2", "n2", vec![wrapped()]);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["foo5"], "2", "n2"));
    h.sent(s);
    h.advance(60 * SECOND);
    h.expect_nothing();
    let snap = &h.client.resource_snapshot()[0];
    assert_eq!(
        (&*snap.name, snap.status),
        ("foo5", ResourceStatusKind::Acked)
    );
}

/// Item 4: an ambient error that clears while the value stays the same is announced
/// by telling the value again (`Changed(Ok)`): after a NACK, a TP3 error, an ignored
/// deletion, and a connectivity error.
#[test]
fn a_cleared_error_is_announced_by_the_value_again() {
    let mut h = Harness::new();
    let (s, ws) = with_cached_clusters(&mut h, &["c1", "c2"]);
    let both = || vec![cluster("c1"), cluster("c2")];
    let mut round = 2;
    let mut next = |h: &mut Harness, resources, errors| {
        round += 1;
        let (v, n) = (round.to_string(), format!("n{round}"));
        let mut r = response(CDS, &v, &n, resources);
        r.resource_errors = errors;
        h.respond_with(s, r);
        let notes: Vec<Notification> = h
            .take()
            .into_iter()
            .filter_map(|a| match a {
                Action::Notify(n) => Some(n),
                _ => None,
            })
            .collect();
        h.sent(s);
        notes
    };
    let nack = vec![fixtures::invalid_cluster("c1"), cluster("c2")];
    let tp3 = vec![resource_error("c1", Code::UNAVAILABLE, "flaky")];
    for (bad, errors, kind) in [
        (nack, vec![], ErrorKind::Invalid),
        (vec![cluster("c2")], tp3, ErrorKind::ServerReported),
        (vec![cluster("c2")], vec![], ErrorKind::DeletionIgnored),
    ] {
        let notes = next(&mut h, bad, errors);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(
            (notes[0].watcher, ambient_error(&notes[0]).kind),
            (ws[0], kind)
        );
        let notes = next(&mut h, both(), vec![]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].watcher, ws[0]);
        assert_eq!(value_of(&notes[0]).get::<Cds>().unwrap().name, "c1");
        // Once: the same value again tells nothing.
        assert!(next(&mut h, both(), vec![]).is_empty());
    }
    h.connectivity_failure(0, "blip");
    for w in &ws {
        let n = h.expect_notify();
        assert_eq!(
            (n.watcher, ambient_error(&n).kind),
            (*w, ErrorKind::Connectivity)
        );
    }
    let notes = next(&mut h, both(), vec![]);
    assert_eq!(notes.iter().map(|n| n.watcher).collect::<Vec<_>>(), ws);
    assert!(
        notes
            .iter()
            .all(|n| matches!(n.event, WatchEvent::Changed(Ok(_))))
    );
}

/// Item 4, per watcher: the value told again reaches only the watchers that hold the
/// ambient error; one that started after the error cleared hears nothing.
#[test]
fn the_clearing_value_reaches_only_the_watchers_that_hold_the_error() {
    let mut h = Harness::new();
    let (s, ws) = with_cached_clusters(&mut h, &["c1"]);
    h.watch::<Lds>("l1");
    assert_eq!(h.expect_request(s), Req::new(LDS, &["l1"], "", ""));
    h.sent(s);
    h.connectivity_failure(0, "blip");
    // l1 is not cached yet: its watcher's state is the error; c1's is ambient.
    assert_eq!(
        changed_error(&h.expect_notify()).kind,
        ErrorKind::Connectivity
    );
    assert_eq!(
        ambient_error(&h.expect_notify()).kind,
        ErrorKind::Connectivity
    );
    // An LDS response clears the server's error; a new CDS watcher hears only the value.
    h.respond(s, LDS, "1", "l", vec![listener("l1", "r1")]);
    h.take();
    h.sent(s);
    let late = h.watch::<Cds>("c1");
    let n = h.expect_notify();
    assert_eq!(n.watcher, late);
    value_of(&n);
    h.expect_nothing();
    // The same cluster again: only the watcher that held the error is told.
    h.respond(s, CDS, "2", "n2", vec![cluster("c1")]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, ws[0]);
    value_of(&n);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["c1"], "2", "n2"));
    h.expect_nothing();
}

/// Item 5: an ignored LDS/CDS deletion shows in CSDS as DOES_NOT_EXIST with the cached
/// config (as C-core reports it) and the reason; the A78 state is
/// `does_not_exist_but_cached`. Every DOES_NOT_EXIST entry has an `error_state`.
#[test]
fn csds_shows_an_ignored_deletion_as_does_not_exist_with_the_cached_config() {
    use xds_proto_core::metrics::CacheState;
    use xds_proto_core::pb::envoy::admin::v3::ClientResourceStatus;
    let mut h = Harness::new();
    let (s, _) = with_cached_clusters(&mut h, &["c1", "c2"]);
    h.watch::<Cds>("missing");
    h.expect_request(s);
    h.sent(s);
    h.respond(s, CDS, "2", "n2", vec![cluster("c1")]);
    h.take();
    h.sent(s);
    let c2 = csds_of(&h, "c2");
    assert_eq!(c2.client_status, ClientResourceStatus::DoesNotExist as i32);
    assert_eq!(c2.xds_config.unwrap().value, cluster("c2").value);
    assert_eq!(c2.version_info, "1"); // the cached value's
    let failure = c2.error_state.expect("the reason");
    assert_eq!(failure.version_info, "2");
    // CSDS records the reason untagged: its ClientConfig names the node already.
    assert_eq!(
        failure.details,
        "xDS server \"xds.example:443\" no longer sends Cluster \"c2\"; keeping the cached value"
    );
    let states: Vec<CacheState> = h
        .client
        .metrics()
        .resources
        .iter()
        .map(|r| r.cache_state)
        .collect();
    assert!(
        states.contains(&CacheState::DoesNotExistButCached),
        "{states:?}"
    );
    // The timer's verdict carries its reason too.
    h.advance(15 * SECOND);
    h.take();
    let missing = csds_of(&h, "missing");
    assert_eq!(
        missing.client_status,
        ClientResourceStatus::DoesNotExist as i32
    );
    assert!(missing.xds_config.is_none());
    let failure = missing.error_state.expect("the reason");
    assert!(
        failure.details.contains("did not send it within 15s"),
        "{}",
        failure.details
    );
    // The resource comes back: ACKED again.
    h.respond(s, CDS, "3", "n3", vec![cluster("c1"), cluster("c2")]);
    h.take();
    let c2 = csds_of(&h, "c2");
    assert_eq!(c2.client_status, ClientResourceStatus::Acked as i32);
    assert!(c2.error_state.is_none());
}

/// Item 6: `ignore_resource_deletion` is deprecated by A88; `fail_on_data_errors`
/// alone decides whether a deletion drops the cached value.
#[test]
fn ignore_resource_deletion_no_longer_has_an_effect() {
    let json = bootstrap_with_features(r#""fail_on_data_errors", "ignore_resource_deletion""#);
    let mut h = Harness::with_bootstrap(&json, |_| {});
    let (s, ws) = with_cached_clusters(&mut h, &["c1", "c2"]);
    h.respond(s, CDS, "2", "n2", vec![cluster("c1")]);
    let n = h.expect_notify();
    assert_eq!(
        (n.watcher, changed_error(&n).kind),
        (ws[1], ErrorKind::DoesNotExist)
    );
    h.expect_request(s);
    let c2 = csds_of(&h, "c2");
    assert!(c2.xds_config.is_none());
    // Without fail_on_data_errors, the deletion is ignored as by default.
    let json = bootstrap_with_features(r#""ignore_resource_deletion""#);
    let mut h = Harness::with_bootstrap(&json, |_| {});
    let (s, ws) = with_cached_clusters(&mut h, &["c1", "c2"]);
    h.respond(s, CDS, "2", "n2", vec![cluster("c1")]);
    let n = h.expect_notify();
    assert_eq!(
        (n.watcher, ambient_error(&n).kind),
        (ws[1], ErrorKind::DeletionIgnored)
    );
}

// ----- CSDS snapshot -----

#[test]
fn csds_reports_every_state_with_versions_raw_bytes_and_errors() {
    use xds_proto_core::pb::envoy::admin::v3::ClientResourceStatus;
    let mut h = Harness::new();
    let (s, _) = with_cached_clusters(&mut h, &["good"]);
    h.watch::<Cds>("pending");
    h.expect_request(s);
    h.sent(s);
    let acked_at = h.now;
    h.advance(SECOND);
    h.respond(
        s,
        CDS,
        "2",
        "n2",
        vec![cluster("good"), fixtures::invalid_cluster("pending")],
    );
    h.take();
    let configs = h.client.csds_configs();
    assert_eq!(configs.len(), 2);
    let good = &configs[0];
    assert_eq!(
        (good.name.as_str(), good.version_info.as_str()),
        ("good", "2")
    );
    assert_eq!(good.client_status, ClientResourceStatus::Acked as i32);
    let raw = good.xds_config.as_ref().unwrap();
    assert_eq!(raw.type_url, CDS);
    assert_eq!(raw.value, cluster("good").value);
    assert_eq!(
        good.last_updated.unwrap().seconds as u64,
        acked_at.since_origin().as_secs()
    );
    let pending = &configs[1];
    assert_eq!(pending.client_status, ClientResourceStatus::Nacked as i32);
    assert!(pending.xds_config.is_none());
    let failure = pending.error_state.as_ref().unwrap();
    assert_eq!(failure.version_info, "2");
    assert!(!failure.details.is_empty());
}

#[test]
fn a_wildcard_watch_hears_every_resource_and_sotw_omissions_delete_them() {
    let mut h = Harness::new();
    let all = h.watch::<Cds>("*");
    let s = h.connect_first(CDS, &["*"]);
    assert_eq!(
        h.client.poll_timeout(),
        None,
        "no does-not-exist timer for *"
    );
    h.respond(
        s,
        CDS,
        "1",
        "n1",
        vec![cluster_v("c1", 1), cluster_v("c2", 2)],
    );
    for name in ["c1", "c2"] {
        let n = h.expect_notify();
        assert_eq!((n.watcher, &*n.name), (all, name));
        value_of(&n);
    }
    assert_eq!(h.expect_request(s), Req::new(CDS, &["*"], "1", "n1"));
    h.sent(s);
    // A SotW CDS response that omits c2 deleted it: cached, so an ambient NOT_FOUND.
    h.respond(s, CDS, "2", "n2", vec![cluster_v("c1", 1)]);
    let n = h.expect_notify();
    assert_eq!((n.watcher, &*n.name), (all, "c2"));
    assert_eq!(ambient_error(&n).kind, ErrorKind::DeletionIgnored);
    assert_eq!(h.expect_request(s), Req::new(CDS, &["*"], "2", "n2"));
    h.expect_nothing();
}
