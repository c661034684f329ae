//! The gRFC A78 XdsClient metrics the core keeps, read after a scripted session with an
//! ACK, a NACK, a TP3 resource error and a server failure.

use xds_proto_core::metrics::{CacheState, OLD_STYLE_AUTHORITY, names};
use xds_proto_core::{Cds, Code, Lds};
use xds_proto_tests::fixtures::{self, cluster, cluster_v};
use xds_proto_tests::{CDS, Harness, LDS, resource_error, response};

const SERVER: &str = "xds.example:443";
const CLUSTER: &str = "envoy.config.cluster.v3.Cluster";
const LISTENER: &str = "envoy.config.listener.v3.Listener";

#[test]
fn metric_names_are_the_a78_names() {
    assert_eq!(names::CONNECTED, "grpc.xds_client.connected");
    assert_eq!(names::SERVER_FAILURE, "grpc.xds_client.server_failure");
    assert_eq!(
        names::RESOURCE_UPDATES_VALID,
        "grpc.xds_client.resource_updates_valid"
    );
    assert_eq!(
        names::RESOURCE_UPDATES_INVALID,
        "grpc.xds_client.resource_updates_invalid"
    );
    assert_eq!(names::RESOURCES, "grpc.xds_client.resources");
}

#[test]
fn every_a78_metric_after_an_ack_a_nack_a_server_error_and_a_server_failure() {
    let mut h = Harness::new();
    h.watch::<Cds>("c1");
    let s = h.connect_first(CDS, &["c1"]);
    h.watch::<Cds>("c2");
    h.watch::<Cds>("c3");
    flush(&mut h, s);
    let m = h.client.metrics();
    let server = m
        .server(SERVER)
        .expect("the server is known from the first watch");
    assert!(!server.connected, "no response yet");
    assert_eq!(server.failures, 0);
    assert_eq!(server.updates_of(CLUSTER), (0, 0));
    assert_eq!(
        m.resource_count(OLD_STYLE_AUTHORITY, CLUSTER, CacheState::Requested),
        3
    );

    // ACK: three valid clusters.
    h.respond(
        s,
        CDS,
        "1",
        "n1",
        vec![cluster("c1"), cluster("c2"), cluster("c3")],
    );
    flush(&mut h, s);
    let m = h.client.metrics();
    let server = m.server(SERVER).unwrap();
    assert!(server.connected, "a response arrived");
    assert_eq!(server.updates_of(CLUSTER), (3, 0));
    assert_eq!(
        m.resource_count(OLD_STYLE_AUTHORITY, CLUSTER, CacheState::Acked),
        3
    );

    // NACK: c2 invalid (cached, so nacked_but_cached); c1 and c3 unchanged still count
    // as valid updates.
    h.respond(
        s,
        CDS,
        "2",
        "n2",
        vec![
            cluster("c1"),
            fixtures::invalid_cluster("c2"),
            cluster("c3"),
        ],
    );
    flush(&mut h, s);
    let m = h.client.metrics();
    assert_eq!(m.server(SERVER).unwrap().updates_of(CLUSTER), (5, 1));
    assert_eq!(
        m.resource_count(OLD_STYLE_AUTHORITY, CLUSTER, CacheState::NackedButCached),
        1
    );
    assert_eq!(
        m.resource_count(OLD_STYLE_AUTHORITY, CLUSTER, CacheState::Acked),
        2
    );

    // TP3: the server reports an error for c3 (cached: received_error_but_cached); a
    // reported error is not a resource, so the update counters do not move.
    let mut r = response(
        CDS,
        "3",
        "n3",
        vec![cluster_v("c1", 7), fixtures::invalid_cluster("c2")],
    );
    r.resource_errors = vec![resource_error("c3", Code::UNAVAILABLE, "backend down")];
    h.respond_with(s, r);
    flush(&mut h, s);
    let m = h.client.metrics();
    assert_eq!(m.server(SERVER).unwrap().updates_of(CLUSTER), (6, 2));
    assert_eq!(
        m.resource_count(
            OLD_STYLE_AUTHORITY,
            CLUSTER,
            CacheState::ReceivedErrorButCached
        ),
        1
    );
    assert_eq!(
        m.resource_count(OLD_STYLE_AUTHORITY, CLUSTER, CacheState::Acked),
        1
    );

    // An uncached listener that arrives invalid is `nacked`.
    h.watch::<Lds>("l1");
    flush(&mut h, s);
    h.respond(s, LDS, "1", "l1", vec![fixtures::invalid_listener("l1")]);
    flush(&mut h, s);
    let m = h.client.metrics();
    assert_eq!(m.server(SERVER).unwrap().updates_of(LISTENER), (0, 1));
    assert_eq!(
        m.resource_count(OLD_STYLE_AUTHORITY, LISTENER, CacheState::Nacked),
        1
    );

    // Server failure: the stream ends, the next one fails before any response.
    h.close(s, Code::UNAVAILABLE, "server restarted");
    let s2 = h.expect_start();
    h.take();
    let m = h.client.metrics();
    assert!(
        m.server(SERVER).unwrap().connected,
        "a stream that had responses ends without a failure (A57)"
    );
    assert_eq!(m.server(SERVER).unwrap().failures, 0);
    h.close(s2, Code::UNAVAILABLE, "connection refused");
    h.take();
    let m = h.client.metrics();
    let server = m.server(SERVER).unwrap();
    assert!(!server.connected);
    assert_eq!(server.failures, 1, "healthy to unhealthy, once");
    // A second failure while unhealthy is not a new transition.
    h.connectivity_failure(0, "still refused");
    h.take();
    assert_eq!(h.client.metrics().server(SERVER).unwrap().failures, 1);
    // The counters survive the failure; the gauge still counts every watched resource.
    let m = h.client.metrics();
    assert_eq!(m.server(SERVER).unwrap().updates_of(CLUSTER), (6, 2));
    let total: u64 = m.resources.iter().map(|r| r.count).sum();
    assert_eq!(total, 4);
    assert!(
        m.resources
            .iter()
            .all(|r| r.authority == OLD_STYLE_AUTHORITY && r.count > 0)
    );
}

/// Reports every request emitted so far as sent, until the client has nothing more to send.
fn flush(h: &mut Harness, s: xds_proto_core::StreamId) {
    loop {
        let requests = h
            .take()
            .into_iter()
            .filter(|a| matches!(a, xds_proto_core::Action::SendRequest { .. }))
            .count();
        if requests == 0 {
            return;
        }
        for _ in 0..requests {
            h.sent(s);
        }
    }
}
