//! The A71 fallback rules of the invariant checker (`xds_proto_tests::sim::check`):
//! fallback scenarios driven through a [`CheckedClient`], which must find nothing wrong
//! (`fallback-needs-failure`, `fallback-needs-uncached`, `switch-back-on-response`,
//! `updates-only-from-server-in-use` and every other rule hold at every step), with the
//! facts each scenario is about asserted on the way. Some of them are the only place
//! that reaches a rule: a fallback server that sends resources nobody asked it for, or
//! answers a request outstanding across a switch-back.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::Cds;
use xds_proto_core::client::{
    Action, ErrorKind, Event, ServerId, StreamId, WatchEvent, WatcherId, XdsClientConfig,
};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::{Bootstrap, Code, Instant, Status};
use xds_proto_tests::fixtures::cluster_v;
use xds_proto_tests::sim::{CheckOptions, CheckedClient, Violation};
use xds_proto_tests::{CDS, response};

const SECOND: Duration = Duration::from_secs(1);

fn server(uri: &str) -> String {
    format!(r#"{{"server_uri": "{uri}", "channel_creds": [{{"type": "insecure"}}]}}"#)
}

/// A bootstrap with these top-level servers and these authorities (name, servers; no
/// servers: the top-level ones).
fn bootstrap(top: &[&str], authorities: &[(&str, &[&str])]) -> String {
    let list = |uris: &[&str]| {
        uris.iter()
            .map(|u| server(u))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let auths = authorities
        .iter()
        .map(|(name, uris)| {
            if uris.is_empty() {
                format!(r#""{name}": {{}}"#)
            } else {
                format!(r#""{name}": {{"xds_servers": [{}]}}"#, list(uris))
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"{{"xds_servers": [{}], "node": {{"id": "n"}}, "authorities": {{{auths}}}}}"#,
        list(top)
    )
}

fn xdstp(authority: &str, name: &str) -> String {
    format!("xdstp://{authority}/envoy.config.cluster.v3.Cluster/{name}")
}

fn ok<T>(r: Result<T, Violation>) -> T {
    r.unwrap_or_else(|v| panic!("{v}"))
}

/// One client under the checker, on a virtual clock that fires every timer exactly at
/// its deadline.
struct Drive {
    cc: CheckedClient,
    now: Instant,
}

impl Drive {
    fn new(json: &str) -> Drive {
        let config = XdsClientConfig::new(Bootstrap::from_json_str(json).expect("bootstrap"));
        Drive {
            cc: CheckedClient::new(config, 7, CheckOptions { exact_timing: true }),
            now: Instant::from_secs(1000),
        }
    }

    fn watch(&mut self, name: &str) -> (WatcherId, Vec<Action>) {
        let (w, actions) = ok(self.cc.watch(self.now, CDS, name));
        (w.expect("watch accepted"), actions)
    }

    fn event(&mut self, event: Event) -> Vec<Action> {
        ok(self.cc.event(self.now, event))
    }

    /// Reports `stream` started and every request it emits sent, as they come.
    fn connect(&mut self, stream: StreamId) -> Vec<Action> {
        let mut actions = self.event(Event::StreamStarted { stream });
        actions.extend(self.flush(stream));
        actions
    }

    /// Reports every request `stream` emits sent, as they come.
    fn flush(&mut self, stream: StreamId) -> Vec<Action> {
        let mut actions = Vec::new();
        while self.cc.has_outstanding(stream) {
            actions.extend(self.event(Event::RequestSent { stream }));
        }
        actions
    }

    fn respond(&mut self, stream: StreamId, version: &str, resources: Vec<Any>) -> Vec<Action> {
        let r = response(CDS, version, &format!("n{version}"), resources);
        self.event(Event::ResponseReceived {
            stream,
            bytes: Bytes::from(r.encode_to_vec()),
        })
    }

    fn close(&mut self, stream: StreamId) -> Vec<Action> {
        self.event(Event::StreamClosed {
            stream,
            status: Status::new(Code::UNAVAILABLE, "connection refused"),
        })
    }

    fn transient_failure(&mut self, server: ServerId) -> Vec<Action> {
        self.event(Event::ConnectivityFailure {
            server,
            reason: "TRANSIENT_FAILURE".to_string(),
        })
    }

    /// Advances the clock by `by`, firing every timer due on the way.
    fn advance(&mut self, by: Duration) -> Vec<Action> {
        let target = self.now + by;
        let mut actions = Vec::new();
        while let Some(at) = self.cc.poll_timeout().filter(|at| *at <= target) {
            self.now = self.now.max(at);
            actions.extend(ok(self.cc.timeout(self.now)));
        }
        self.now = target;
        actions
    }

    /// What watcher `w` holds: the cluster's `max_requests`, or the error kind.
    fn held(&self, w: WatcherId) -> Option<Result<u32, ErrorKind>> {
        let held = self.cc.watchers()[&w].held.as_ref()?;
        Some(match held {
            Ok(v) => Ok(v.get::<Cds>().unwrap().max_requests),
            Err(e) => Err(e.kind),
        })
    }
}

/// The stream a `StartStream` in `actions` opens to `uri`.
fn start_to(actions: &[Action], uri: &str) -> Option<StreamId> {
    actions.iter().find_map(|a| match a {
        Action::StartStream { config, stream, .. } if config.server_uri == uri => Some(*stream),
        _ => None,
    })
}

fn starts(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::StartStream { .. }))
        .count()
}

/// The names of every request on `stream` in `actions`.
fn requests_on(actions: &[Action], stream: StreamId) -> Vec<Vec<String>> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SendRequest { stream: s, request } if *s == stream => Some(
                request
                    .resource_names
                    .iter()
                    .map(|n| n.to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

fn closes(actions: &[Action], stream: StreamId) -> bool {
    actions.contains(&Action::CloseStream { stream })
}

fn notifies(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::Notify(_)))
}

#[test]
fn fallback_at_startup_and_switch_back_on_the_primarys_first_response() {
    let mut d = Drive::new(&bootstrap(&["primary:443", "fallback:443"], &[]));
    let (w, a) = d.watch("c1");
    let p = start_to(&a, "primary:443").expect("primary");
    d.connect(p);
    let a = d.close(p); // before any response, with c1 uncached: fall back
    let f = start_to(&a, "fallback:443").expect("fallback");
    assert_eq!(requests_on(&a, f), vec![vec!["c1".to_string()]]);
    assert!(!notifies(&a), "{a:?}");
    d.connect(f);
    d.respond(f, "1", vec![cluster_v("c1", 2)]);
    d.flush(f);
    assert_eq!(d.held(w), Some(Ok(2)));
    let a = d.advance(2 * SECOND);
    let p2 = start_to(&a, "primary:443").expect("primary retried");
    d.connect(p2);
    let a = d.respond(p2, "1", vec![cluster_v("c1", 1)]);
    assert!(closes(&a, f), "{a:?}");
    assert!(a.contains(&Action::DropChannel {
        server: ServerId::from_raw(1)
    }));
    assert_eq!(d.held(w), Some(Ok(1)));
    // Late data from the closed fallback stream changes nothing.
    let a = d.respond(f, "2", vec![cluster_v("c1", 3)]);
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(d.held(w), Some(Ok(1)));
}

#[test]
fn everything_cached_means_no_fallback_until_a_new_uncached_watch() {
    let mut d = Drive::new(&bootstrap(&["primary:443", "fallback:443"], &[]));
    let (w1, a) = d.watch("c1");
    let p = start_to(&a, "primary:443").unwrap();
    d.connect(p);
    d.respond(p, "1", vec![cluster_v("c1", 1)]);
    d.flush(p);
    // A failure with everything cached: an ambient error, no fallback.
    let a = d.transient_failure(ServerId::from_raw(0));
    assert_eq!(starts(&a), 0, "{a:?}");
    assert!(matches!(
        &a[..],
        [Action::Notify(n)] if matches!(n.event, WatchEvent::AmbientError(_))
    ));
    // The stream closes after its response: restarted at once; then fails before one.
    let a = d.close(p);
    let p2 = start_to(&a, "primary:443").unwrap();
    d.connect(p2);
    let a = d.close(p2);
    assert_eq!(starts(&a), 0, "{a:?}");
    assert_eq!(d.held(w1), Some(Ok(1)));
    // A new uncached resource: fall back with every name of the authority.
    let (w2, a) = d.watch("c2");
    let f = start_to(&a, "fallback:443").expect("fallback");
    assert_eq!(
        requests_on(&a, f),
        vec![vec!["c1".to_string(), "c2".to_string()]]
    );
    d.connect(f);
    let a = d.respond(f, "1", vec![cluster_v("c1", 21), cluster_v("c2", 22)]);
    assert!(notifies(&a));
    assert_eq!(d.held(w1), Some(Ok(21)));
    assert_eq!(d.held(w2), Some(Ok(22)));
}

#[test]
fn does_not_exist_counts_as_cached() {
    let mut d = Drive::new(&bootstrap(&["primary:443", "fallback:443"], &[]));
    let (w, a) = d.watch("c1");
    let p = start_to(&a, "primary:443").unwrap();
    d.connect(p);
    let a = d.advance(15 * SECOND);
    assert!(notifies(&a), "{a:?}");
    assert_eq!(d.held(w), Some(Err(ErrorKind::DoesNotExist)));
    let a = d.close(p);
    assert_eq!(starts(&a), 0, "{a:?}");
    assert_eq!(d.held(w), Some(Err(ErrorKind::DoesNotExist)));
}

#[test]
fn three_servers_fall_back_in_order_and_switch_back_step_by_step() {
    let mut d = Drive::new(&bootstrap(&["p:443", "s:443", "t:443"], &[]));
    let (w, a) = d.watch("c1");
    let p = start_to(&a, "p:443").unwrap();
    let a = d.close(p);
    let s = start_to(&a, "s:443").unwrap();
    let a = d.close(s);
    let t = start_to(&a, "t:443").unwrap();
    d.connect(t);
    d.respond(t, "1", vec![cluster_v("c1", 3)]);
    d.flush(t);
    assert_eq!(d.held(w), Some(Ok(3)));
    let a = d.advance(2 * SECOND);
    let p2 = start_to(&a, "p:443").unwrap();
    let s2 = start_to(&a, "s:443").unwrap();
    d.connect(p2);
    d.connect(s2);
    // The secondary answers first: the tertiary goes, the primary stays.
    let a = d.respond(s2, "1", vec![cluster_v("c1", 2)]);
    assert!(closes(&a, t) && !closes(&a, p2), "{a:?}");
    assert_eq!(d.held(w), Some(Ok(2)));
    d.flush(s2);
    let a = d.respond(p2, "1", vec![cluster_v("c1", 1)]);
    assert!(closes(&a, s2), "{a:?}");
    assert_eq!(d.held(w), Some(Ok(1)));
}

#[test]
fn a_transient_failure_of_a_live_primary_falls_back_and_its_response_switches_back() {
    let mut d = Drive::new(&bootstrap(&["primary:443", "fallback:443"], &[]));
    let (w, a) = d.watch("c1");
    let p = start_to(&a, "primary:443").unwrap();
    d.connect(p);
    let a = d.transient_failure(ServerId::from_raw(0));
    let f = start_to(&a, "fallback:443").expect("fallback");
    d.connect(f);
    d.respond(f, "1", vec![cluster_v("c1", 2)]);
    d.flush(f);
    assert_eq!(d.held(w), Some(Ok(2)));
    // The primary's stream survived the channel's failure and answers.
    let a = d.respond(p, "1", vec![cluster_v("c1", 1)]);
    assert!(closes(&a, f), "{a:?}");
    assert_eq!(d.held(w), Some(Ok(1)));
}

#[test]
fn a_server_listed_twice_counts_once() {
    let mut d = Drive::new(&bootstrap(
        &["primary:443", "primary:443", "fallback:443"],
        &[],
    ));
    let (w, a) = d.watch("c1");
    let p = start_to(&a, "primary:443").unwrap();
    let a = d.close(p);
    let f = start_to(&a, "fallback:443").expect("fallback is next after the duplicate");
    d.connect(f);
    d.respond(f, "1", vec![cluster_v("c1", 2)]);
    assert_eq!(d.held(w), Some(Ok(2)));
}

/// Two authorities on the same two servers: one all cached, one not. Only the second
/// falls back; the fallback server also sends the first one's resource, unasked, and
/// that must not reach its watchers (`updates-only-from-server-in-use`).
#[test]
fn authorities_sharing_servers_fall_back_independently() {
    let mut d = Drive::new(&bootstrap(
        &["primary:443", "fallback:443"],
        &[("x.example", &[])],
    ));
    let c2 = xdstp("x.example", "c2");
    let (w1, a) = d.watch("c1");
    let p = start_to(&a, "primary:443").unwrap();
    let (w2, _) = d.watch(&c2);
    d.connect(p);
    d.respond(p, "1", vec![cluster_v("c1", 1)]);
    d.flush(p);
    assert_eq!(d.held(w1), Some(Ok(1)));
    let a = d.transient_failure(ServerId::from_raw(0));
    let f = start_to(&a, "fallback:443").expect("x.example falls back");
    assert_eq!(requests_on(&a, f), vec![vec![c2.clone()]]);
    d.connect(f);
    let a = d.respond(f, "1", vec![cluster_v("c1", 21), cluster_v(&c2, 22)]);
    assert!(notifies(&a));
    assert_eq!(
        d.held(w1),
        Some(Ok(1)),
        "c1's authority does not use fallback:443"
    );
    assert_eq!(d.held(w2), Some(Ok(22)));
    d.flush(f);
    // The primary answers: x.example switches back, the fallback stream closes, and
    // is not sent a last request naming the other authority's resources first.
    let a = d.respond(p, "2", vec![cluster_v("c1", 1), cluster_v(&c2, 2)]);
    assert!(closes(&a, f), "{a:?}");
    assert!(requests_on(&a, f).is_empty(), "{a:?}");
    assert_eq!(d.held(w2), Some(Ok(2)));
}

/// The fallback server is another authority's primary, so its stream stays: the
/// switch-back unsubscribes the names with the next request, which waits for the
/// outstanding one; the fallback's answer to that outstanding request must not reach
/// the switched-back authority's watchers.
#[test]
fn switch_back_with_a_request_outstanding_on_a_shared_fallback_server() {
    let mut d = Drive::new(&bootstrap(
        &["primary:443", "shared:443"],
        &[("b.example", &["shared:443"])],
    ));
    let c2 = xdstp("b.example", "c2");
    let (w1, a) = d.watch("c1");
    let p = start_to(&a, "primary:443").unwrap();
    let (w2, a) = d.watch(&c2);
    let f = start_to(&a, "shared:443").unwrap();
    d.connect(f);
    let a = d.close(p);
    assert_eq!(starts(&a), 0);
    assert_eq!(requests_on(&a, f), vec![vec!["c1".to_string(), c2.clone()]]);
    d.flush(f);
    d.respond(f, "1", vec![cluster_v("c1", 21), cluster_v(&c2, 22)]);
    assert_eq!(d.held(w1), Some(Ok(21)));
    assert_eq!(d.held(w2), Some(Ok(22)));
    // The ACK naming c1 is outstanding when the primary answers.
    assert!(d.cc.has_outstanding(f));
    let a = d.advance(2 * SECOND);
    let p2 = start_to(&a, "primary:443").unwrap();
    d.connect(p2);
    let a = d.respond(p2, "1", vec![cluster_v("c1", 1)]);
    assert!(!closes(&a, f) && requests_on(&a, f).is_empty(), "{a:?}");
    assert_eq!(d.held(w1), Some(Ok(1)));
    // The shared server answers the outstanding request, c1 included: ignored for c1.
    d.respond(f, "2", vec![cluster_v("c1", 31), cluster_v(&c2, 32)]);
    assert_eq!(d.held(w1), Some(Ok(1)));
    assert_eq!(d.held(w2), Some(Ok(32)));
    // Then the request that unsubscribes c1 there.
    let a = d.flush(f);
    assert!(
        requests_on(&a, f).iter().any(|n| *n == vec![c2.clone()]),
        "{a:?}"
    );
}
