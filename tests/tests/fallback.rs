//! Scenario tests for fallback within an authority (gRFC A71) and federation (A47):
//! exact streams, requests and notifications over virtual time.

use std::time::Duration;
use xds_proto_core::Cds;

use xds_proto_core::client::{Action, ErrorKind, WatchError, WatchEvent};
use xds_proto_core::{Code, ServerId, StreamId};
use xds_proto_tests::fixtures::{cluster, cluster_v};
use xds_proto_tests::{CDS, Harness, Req};

const TWO_SERVERS: &str = r#"{
  "xds_servers": [
    {"server_uri": "primary:443", "channel_creds": [{"type": "insecure"}]},
    {"server_uri": "fallback:443", "channel_creds": [{"type": "insecure"}]}
  ],
  "node": {"id": "n"}
}"#;

const THREE_SERVERS: &str = r#"{
  "xds_servers": [
    {"server_uri": "primary:443", "channel_creds": [{"type": "insecure"}]},
    {"server_uri": "secondary:443", "channel_creds": [{"type": "insecure"}]},
    {"server_uri": "tertiary:443", "channel_creds": [{"type": "insecure"}]}
  ],
  "node": {"id": "n"}
}"#;

const FEDERATION: &str = r#"{
  "xds_servers": [{"server_uri": "default:443", "channel_creds": [{"type": "insecure"}]}],
  "authorities": {
    "a.example": {"xds_servers": [{"server_uri": "a:443", "channel_creds": [{"type": "insecure"}]}]},
    "b.example": {"xds_servers": [{"server_uri": "b:443", "channel_creds": [{"type": "insecure"}]}]},
    "shared.example": {"xds_servers": [{"server_uri": "default:443", "channel_creds": [{"type": "insecure"}]}]}
  },
  "node": {"id": "n"}
}"#;

const SECOND: Duration = Duration::from_secs(1);

fn a_cluster(name: &str) -> String {
    format!("xdstp://a.example/envoy.config.cluster.v3.Cluster/{name}")
}

fn b_cluster(name: &str) -> String {
    format!("xdstp://b.example/envoy.config.cluster.v3.Cluster/{name}")
}

/// The next action must open a stream to `uri`; returns its id and server.
fn expect_start_to(h: &mut Harness, uri: &str) -> (StreamId, ServerId) {
    match h.next_action() {
        Action::StartStream {
            server,
            config,
            stream,
        } => {
            assert_eq!(config.server_uri, uri);
            (stream, server)
        }
        other => panic!("expected StartStream to {uri}, got {other:?}"),
    }
}

fn is_value(event: &WatchEvent) -> bool {
    matches!(event, WatchEvent::Changed(Ok(_)))
}

/// Fails the primary's first stream of a fresh `c1` watch; returns the fallback stream.
fn fall_back_at_startup(h: &mut Harness) -> (StreamId, StreamId) {
    h.watch::<Cds>("c1");
    let (p, _) = expect_start_to(h, "primary:443");
    assert_eq!(
        h.expect_request(p),
        Req::new(CDS, &["c1"], "", "").with_node()
    );
    h.started(p);
    h.sent(p);
    h.close(p, Code::UNAVAILABLE, "connection refused");
    let (f, _) = expect_start_to(h, "fallback:443");
    assert_eq!(
        h.expect_request(f),
        Req::new(CDS, &["c1"], "", "").with_node()
    );
    h.expect_nothing(); // no error reported while a lower-priority server is tried
    h.started(f);
    h.sent(f);
    (p, f)
}

#[test]
fn fallback_at_startup_serves_from_the_next_server() {
    let mut h = Harness::with_bootstrap(TWO_SERVERS, |_| {});
    let (_, f) = fall_back_at_startup(&mut h);
    h.respond(f, CDS, "f1", "fn1", vec![cluster("c1")]);
    assert!(is_value(&h.expect_notify().event));
    assert_eq!(h.expect_request(f), Req::new(CDS, &["c1"], "f1", "fn1"));
    h.expect_nothing();
}

#[test]
fn no_fallback_when_everything_is_cached() {
    let mut h = Harness::with_bootstrap(TWO_SERVERS, |_| {});
    let w = h.watch::<Cds>("c1");
    let p = h.connect_first(CDS, &["c1"]);
    h.respond(p, CDS, "1", "n1", vec![cluster("c1")]);
    h.take();
    h.connectivity_failure(0, "reset");
    let n = h.expect_notify();
    assert_eq!(n.watcher, w);
    match &n.event {
        WatchEvent::AmbientError(e) => assert!(e.status.message.contains("primary:443"), "{e}"),
        other => panic!("expected an ambient error, got {other:?}"),
    }
    h.expect_nothing();
}

#[test]
fn a_new_uncached_watch_while_the_primary_is_down_triggers_fallback_for_all_names() {
    let mut h = Harness::with_bootstrap(TWO_SERVERS, |_| {});
    let w1 = h.watch::<Cds>("c1");
    let p = h.connect_first(CDS, &["c1"]);
    h.respond(p, CDS, "1", "n1", vec![cluster("c1")]);
    h.take();
    h.sent(p);
    h.close(p, Code::UNAVAILABLE, "goaway"); // after a response: reconnect at once
    let (p2, _) = expect_start_to(&mut h, "primary:443");
    assert_eq!(
        h.expect_request(p2),
        Req::new(CDS, &["c1"], "1", "").with_node()
    );
    h.close(p2, Code::UNAVAILABLE, "refused"); // all cached: ambient error, no fallback
    assert!(matches!(
        h.expect_notify().event,
        WatchEvent::AmbientError(_)
    ));
    h.expect_nothing();
    // A watch for an uncached resource now starts fallback, subscribing every name there.
    let w2 = h.watch::<Cds>("c2");
    let (f, _) = expect_start_to(&mut h, "fallback:443");
    assert_eq!(
        h.expect_request(f),
        Req::new(CDS, &["c1", "c2"], "", "").with_node()
    );
    h.expect_nothing();
    // The primary keeps being retried with every name too.
    h.advance(3 * SECOND);
    let (p3, _) = expect_start_to(&mut h, "primary:443");
    assert_eq!(
        h.expect_request(p3),
        Req::new(CDS, &["c1", "c2"], "1", "").with_node()
    );
    // The fallback's data is used meanwhile. c1's watcher holds the primary's ambient
    // error: the same value again announces that it cleared (A88).
    h.started(f);
    h.sent(f);
    h.respond(f, CDS, "f1", "x", vec![cluster("c1"), cluster("c2")]);
    for w in [w1, w2] {
        let n = h.expect_notify();
        assert_eq!(n.watcher, w);
        assert!(is_value(&n.event));
    }
}

#[test]
fn the_first_primary_response_switches_back_and_closes_the_fallback_stream() {
    let mut h = Harness::with_bootstrap(TWO_SERVERS, |_| {});
    let (_, f) = fall_back_at_startup(&mut h);
    h.respond(f, CDS, "f1", "fn1", vec![cluster_v("c1", 1)]);
    assert!(is_value(&h.expect_notify().event));
    h.expect_request(f);
    h.sent(f);
    h.advance(2 * SECOND);
    let (p, _) = expect_start_to(&mut h, "primary:443");
    assert_eq!(
        h.expect_request(p),
        Req::new(CDS, &["c1"], "", "").with_node()
    );
    h.started(p);
    h.sent(p);
    h.respond(p, CDS, "p1", "pn1", vec![cluster_v("c1", 2)]);
    assert_eq!(h.next_action(), Action::CloseStream { stream: f });
    assert_eq!(
        h.next_action(),
        Action::DropChannel {
            server: ServerId::from_raw(1)
        }
    );
    // The primary's data replaces the fallback's.
    let n = h.expect_notify();
    let value = match &n.event {
        WatchEvent::Changed(Ok(v)) => v.get::<Cds>().unwrap().clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(value.max_requests, 2);
    assert_eq!(h.expect_request(p), Req::new(CDS, &["c1"], "p1", "pn1"));
    h.expect_nothing();
    // Late data from the closed fallback stream is ignored.
    h.respond(f, CDS, "f2", "fn2", vec![cluster_v("c1", 3)]);
    h.expect_nothing();
}

#[test]
fn identical_bytes_from_the_primary_after_fallback_cause_no_notification() {
    let mut h = Harness::with_bootstrap(TWO_SERVERS, |_| {});
    let (_, f) = fall_back_at_startup(&mut h);
    h.respond(f, CDS, "f1", "fn1", vec![cluster("c1")]);
    h.take();
    h.sent(f);
    h.advance(2 * SECOND);
    let (p, _) = expect_start_to(&mut h, "primary:443");
    h.take();
    h.started(p);
    h.sent(p);
    h.respond(p, CDS, "p1", "pn1", vec![cluster("c1")]);
    assert_eq!(
        h.take(),
        vec![
            Action::CloseStream { stream: f },
            Action::DropChannel {
                server: ServerId::from_raw(1)
            },
            Action::SendRequest {
                stream: p,
                request: Box::new(ack(&["c1"], "p1", "pn1"))
            },
        ]
    );
}

fn ack(names: &[&str], version: &str, nonce: &str) -> xds_proto_core::AdsRequest {
    xds_proto_core::AdsRequest {
        version_info: version.to_string(),
        node: None,
        resource_names: names.iter().map(|s| std::sync::Arc::from(*s)).collect(),
        type_url: CDS,
        response_nonce: nonce.to_string(),
        error_detail: None,
    }
}

#[test]
fn three_servers_promote_in_order_and_the_secondary_returning_first_wins() {
    let mut h = Harness::with_bootstrap(THREE_SERVERS, |_| {});
    let w = h.watch::<Cds>("c1");
    let (p, _) = expect_start_to(&mut h, "primary:443");
    h.take();
    h.close(p, Code::UNAVAILABLE, "down");
    let (s, _) = expect_start_to(&mut h, "secondary:443");
    h.take();
    h.close(s, Code::UNAVAILABLE, "down");
    let (t, _) = expect_start_to(&mut h, "tertiary:443");
    assert_eq!(
        h.expect_request(t),
        Req::new(CDS, &["c1"], "", "").with_node()
    );
    h.expect_nothing();
    h.started(t);
    h.sent(t);
    h.respond(t, CDS, "t1", "tn", vec![cluster_v("c1", 3)]);
    assert_eq!(h.expect_notify().watcher, w);
    h.take();
    // Both higher-priority servers are retried after their backoff.
    h.advance(2 * SECOND);
    let mut reopened = Vec::new();
    for action in h.take() {
        if let Action::StartStream { config, stream, .. } = action {
            reopened.push((config.server_uri.clone(), stream));
        }
    }
    reopened.sort();
    assert_eq!(
        reopened.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(),
        vec!["primary:443", "secondary:443"]
    );
    let p2 = reopened[0].1;
    let s2 = reopened[1].1;
    for stream in [p2, s2] {
        h.started(stream);
        h.sent(stream);
    }
    // The secondary answers first: the tertiary is dropped, the primary kept.
    h.respond(s2, CDS, "s1", "sn", vec![cluster_v("c1", 2)]);
    assert_eq!(h.next_action(), Action::CloseStream { stream: t });
    assert_eq!(
        h.next_action(),
        Action::DropChannel {
            server: ServerId::from_raw(2)
        }
    );
    assert_eq!(h.expect_notify().watcher, w);
    assert_eq!(h.expect_request(s2), Req::new(CDS, &["c1"], "s1", "sn"));
    h.expect_nothing();
    assert!(h.client.current_stream(ServerId::from_raw(0)).is_some());
    // Then the primary answers: the secondary is dropped.
    h.respond(p2, CDS, "p1", "pn", vec![cluster_v("c1", 1)]);
    assert_eq!(h.next_action(), Action::CloseStream { stream: s2 });
    assert_eq!(
        h.next_action(),
        Action::DropChannel {
            server: ServerId::from_raw(1)
        }
    );
    assert_eq!(h.expect_notify().watcher, w);
    assert_eq!(h.expect_request(p2), Req::new(CDS, &["c1"], "p1", "pn"));
}

#[test]
fn the_error_is_reported_only_when_every_server_failed_naming_the_last() {
    let mut h = Harness::with_bootstrap(TWO_SERVERS, |_| {});
    let (_, f) = fall_back_at_startup(&mut h);
    h.close(f, Code::UNAVAILABLE, "no route to host");
    let n = h.expect_notify();
    match &n.event {
        WatchEvent::Changed(Err(e)) => {
            assert_eq!(e.kind, ErrorKind::Connectivity);
            assert_eq!(
                e.status.message,
                "xDS channel for server \"fallback:443\": ADS stream closed before any response: UNAVAILABLE: no route to host (node ID:n)"
            );
        }
        other => panic!("{other:?}"),
    }
    h.expect_nothing();
    // A failing retry of the primary (not the server in use) reports nothing new.
    h.advance(2 * SECOND);
    let restarted: Vec<_> = h.take();
    let p2 = restarted
        .iter()
        .find_map(|a| match a {
            Action::StartStream { config, stream, .. } if config.server_uri == "primary:443" => {
                Some(*stream)
            }
            _ => None,
        })
        .expect("primary retried");
    h.close(p2, Code::UNAVAILABLE, "still down");
    assert!(
        h.pending().iter().all(|a| !matches!(a, Action::Notify(_))),
        "{:?}",
        h.pending()
    );
}

#[test]
fn no_does_not_exist_while_falling_back() {
    let mut h = Harness::with_bootstrap(TWO_SERVERS, |_| {});
    let (_, f) = fall_back_at_startup(&mut h);
    // The primary's timer was cancelled by its failure; the fallback's runs from its send.
    h.advance(Duration::from_millis(14_999));
    assert!(h.take().iter().all(|a| !matches!(a, Action::Notify(_))));
    h.respond(f, CDS, "f1", "fn1", vec![cluster("c1")]);
    assert!(is_value(&h.expect_notify().event));
}

#[test]
fn federation_keeps_failures_within_their_authority() {
    let mut h = Harness::with_bootstrap(FEDERATION, |_| {});
    let wa = h.watch::<Cds>(&a_cluster("c1"));
    let (sa, _) = expect_start_to(&mut h, "a:443");
    assert_eq!(
        h.expect_request(sa),
        Req::new(CDS, &[&a_cluster("c1")], "", "").with_node()
    );
    let wb = h.watch::<Cds>(&b_cluster("c2"));
    let (sb, _) = expect_start_to(&mut h, "b:443");
    assert_eq!(
        h.expect_request(sb),
        Req::new(CDS, &[&b_cluster("c2")], "", "").with_node()
    );
    h.close(sa, Code::UNAVAILABLE, "a is down");
    let n = h.expect_notify();
    assert_eq!(n.watcher, wa);
    h.expect_nothing();
    // b is unaffected and serves its resource.
    h.started(sb);
    h.sent(sb);
    h.respond(sb, CDS, "1", "n", vec![cluster(&b_cluster("c2"))]);
    let n = h.expect_notify();
    assert_eq!(n.watcher, wb);
    assert!(is_value(&n.event), "{:?}", n.event);
}

#[test]
fn identical_servers_of_several_authorities_share_one_stream() {
    let mut h = Harness::with_bootstrap(FEDERATION, |_| {});
    h.watch::<Cds>("old-style");
    let (s, _) = expect_start_to(&mut h, "default:443");
    h.expect_request(s);
    h.sent(s);
    let shared = "xdstp://shared.example/envoy.config.cluster.v3.Cluster/c9";
    h.watch::<Cds>(shared);
    assert_eq!(
        h.expect_request(s),
        Req::new(CDS, &["old-style", shared], "", "")
    );
    h.expect_nothing();
}

#[test]
fn unknown_authorities_and_malformed_names_are_typed_errors() {
    let mut h = Harness::with_bootstrap(FEDERATION, |_| {});
    let err = h
        .client
        .watch::<Cds>("xdstp://nope.example/envoy.config.cluster.v3.Cluster/c1")
        .unwrap_err();
    assert_eq!(
        err,
        WatchError::UnknownAuthority {
            authority: "nope.example".to_string(),
            name: "xdstp://nope.example/envoy.config.cluster.v3.Cluster/c1".to_string()
        }
    );
    assert_eq!(
        err.to_string(),
        "authority \"nope.example\" of resource \"xdstp://nope.example/envoy.config.cluster.v3.Cluster/c1\" is not in the bootstrap's authorities"
    );
    let err = h
        .client
        .watch::<Cds>("xdstp://a.example/envoy.config.listener.v3.Listener/l1")
        .unwrap_err();
    assert!(matches!(err, WatchError::InvalidName(_)), "{err:?}");
    assert!(h.client.watch::<Cds>("xdstp://a.example").is_err());
    h.expect_nothing();
}

#[test]
fn xdstp_names_are_canonical_in_requests_and_responses() {
    let mut h = Harness::with_bootstrap(FEDERATION, |_| {});
    let w1 = h.watch::<Cds>(&a_cluster("c1?z=1&a=2"));
    let (s, _) = expect_start_to(&mut h, "a:443");
    assert_eq!(
        h.expect_request(s),
        Req::new(CDS, &[&a_cluster("c1?a=2&z=1")], "", "").with_node()
    );
    h.started(s);
    h.sent(s);
    let w2 = h.watch::<Cds>(&a_cluster("c1?a=2&z=1"));
    h.expect_nothing(); // the same resource: no new subscription
    // The server spells it the other way round; both watchers get it.
    h.respond(s, CDS, "1", "n", vec![cluster(&a_cluster("c1?z=1&a=2"))]);
    let (n1, n2) = (h.expect_notify(), h.expect_notify());
    assert!(is_value(&n1.event) && is_value(&n2.event), "{n1:?}");
    assert_eq!(&*n1.name, a_cluster("c1?a=2&z=1"));
    let mut got = vec![n1.watcher, n2.watcher];
    got.sort();
    assert_eq!(got, vec![w1, w2]);
}

/// Old-style names and the authority `x.example` share the top-level primary and
/// fallback servers.
const SHARED: &str = r#"{
  "xds_servers": [
    {"server_uri": "primary:443", "channel_creds": [{"type": "insecure"}]},
    {"server_uri": "fallback:443", "channel_creds": [{"type": "insecure"}]}
  ],
  "authorities": {"x.example": {}},
  "node": {"id": "n"}
}"#;

/// Regression (found by the A71 checker's author): the first watch of an authority whose
/// primary, shared with another authority, is already failing must fall back at once
/// (A71: a new uncached resource while the server in use is failing), not wait for the
/// primary's next attempt to fail.
#[test]
fn first_watch_of_an_authority_on_a_failing_shared_primary_falls_back_at_once() {
    let mut h = Harness::with_bootstrap(SHARED, |_| {});
    h.watch::<Cds>("c1");
    let p = h.expect_start();
    h.take();
    h.close(p, Code::UNAVAILABLE, "down"); // old-style names fall back to fallback:443
    let f = h
        .client
        .current_stream(ServerId::from_raw(1))
        .expect("fallback stream");
    h.take();
    h.started(f);
    h.sent(f);
    h.take();
    let x = "xdstp://x.example/envoy.config.cluster.v3.Cluster/c2";
    h.watch::<Cds>(x);
    let actions = h.take();
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::SendRequest { stream, request }
            if *stream == f && request.resource_names.iter().any(|n| &**n == x))),
        "watching {x} while primary:443 is failing: expected it on fallback:443, got {actions:?}"
    );
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Notify(_))),
        "a server may still work: no error yet, got {actions:?}"
    );
}

/// Two authorities fall back to the same server; when the primary answers, both switch
/// back and the shared fallback stream is closed, without a last request naming the
/// second authority's resources first (each server is settled once, after every
/// authority has dropped it).
#[test]
fn switching_back_two_authorities_closes_the_shared_fallback_without_a_last_request() {
    let x = "xdstp://x.example/envoy.config.cluster.v3.Cluster/c2";
    let mut h = Harness::with_bootstrap(SHARED, |_| {});
    h.watch::<Cds>("c1");
    h.watch::<Cds>(x);
    let p = h.expect_start();
    h.take();
    h.close(p, Code::UNAVAILABLE, "down"); // both authorities fall back
    let f = h
        .client
        .current_stream(ServerId::from_raw(1))
        .expect("fallback stream");
    h.take();
    h.started(f);
    for _ in 0..3 {
        h.sent(f); // every subscribing request leaves; none is outstanding
        h.take();
    }
    h.advance(2 * SECOND); // the primary's backoff
    let p2 = h
        .client
        .current_stream(ServerId::from_raw(0))
        .expect("primary again");
    h.take();
    h.started(p2);
    h.sent(p2);
    h.take();
    h.respond(p2, CDS, "1", "n1", vec![cluster("c1"), cluster(x)]);
    let actions = h.take();
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::CloseStream { stream } if *stream == f)),
        "{actions:?}"
    );
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::SendRequest { stream, .. } if *stream == f)),
        "a request on the fallback stream on its way out: {actions:?}"
    );
}
