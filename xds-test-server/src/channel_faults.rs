//! The `xds:///` channel's endpoint connections against backends that misbehave at the
//! transport, generic over the [`Runtime`] like [`crate::channel_suite`], with gRPC-Go's
//! outcomes (run beside it on the same control plane) as the expected ones:
//! - a locality whose endpoint accepts TCP and never sends HTTP/2 SETTINGS stays
//!   CONNECTING, and round robin skips it (200 of 200 RPCs succeed);
//! - such an endpoint as the whole of priority 0 is failed over from after the
//!   priority's failover timeout, and not before; with a shorter connect timeout, at the
//!   connect deadline (TRANSIENT_FAILURE);
//! - a backend that goes silent while READY is noticed by HTTP/2 keepalive, and its RPCs
//!   are retried elsewhere;
//! - a backend's GOAWAY retires its connection for new RPCs (they go on a new one)
//!   while the RPCs on it finish;
//! - a dropped channel closes its endpoint connections.
//!
//! The misbehaving endpoints are [`FaultProxy`]s in front of [`EchoBackend`]s.

use std::time::Duration;

use xds_adapter_common::{
    ClientPool, KeepaliveSettings, Runtime, TransportSettings, XdsChannel, XdsChannelBuilder,
};
use xds_proto_core::Bootstrap;
use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_proto_core::pb::google::protobuf::UInt32Value;
use xds_proto_core::resource::type_url;

use crate::echo::{EchoBackend, EchoRequest, call_echo, echo_request};
use crate::resources::{
    Host, Locality, cluster, cluster_action, endpoints_with, forward, listener, pb_duration,
    prefix, rc_any, route_config_of, vhost, with_retry,
};
use crate::suite::{PROMPT, within};
use crate::{FaultProxy, LoopbackServer};

const TARGET: &str = "xds:///faults.example.com";
const LISTENER: &str = "faults.example.com";
const ROUTES: &str = "faults-routes";
const CLUSTER: &str = "backends";

/// How late a timer of the channel may be observed here (scheduling on a busy machine).
const SLACK: Duration = Duration::from_millis(1500);

/// The control plane of one scenario: [`TARGET`] routed to one cluster with these
/// localities, its RPCs retried on UNAVAILABLE when `retry` says so, and a pool on it.
struct Plane<R> {
    _server: LoopbackServer,
    pool: ClientPool<R>,
}

impl<R: Runtime> Plane<R> {
    fn start(localities: &[Locality], retry: bool) -> Plane<R> {
        let server = LoopbackServer::start();
        let mut action = cluster_action(CLUSTER);
        if retry {
            let policy = route_pb::RetryPolicy {
                retry_on: "unavailable".into(),
                num_retries: Some(UInt32Value { value: 3 }),
                retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
                    base_interval: Some(pb_duration(Duration::from_millis(5))),
                    max_interval: Some(pb_duration(Duration::from_millis(20))),
                }),
                ..Default::default()
            };
            action = with_retry(action, policy);
        }
        let routes = vec![forward(prefix("/"), action)];
        let route_config = route_config_of(ROUTES, vec![vhost("faults", &[LISTENER], routes)]);
        server.set_resources(type_url::LISTENER, "1", vec![listener(LISTENER, ROUTES)]);
        server.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "1",
            vec![rc_any(&route_config)],
        );
        server.set_resources(type_url::CLUSTER, "1", vec![cluster(CLUSTER)]);
        server.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![endpoints_with(CLUSTER, localities)],
        );
        let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("channel-faults", None))
            .expect("the loopback bootstrap");
        let pool = ClientPool::<R>::builder(bootstrap)
            .build_pool()
            .expect("a pool");
        Plane {
            _server: server,
            pool,
        }
    }

    fn channel(&self) -> XdsChannelBuilder<R> {
        XdsChannel::builder(TARGET).pool(&self.pool).seed(11)
    }
}

fn locality(zone: &str, priority: u32, ports: &[u16]) -> Locality {
    let hosts = ports.iter().map(|p| Host::healthy(u32::from(*p))).collect();
    Locality {
        priority,
        ..Locality::new("region", zone, hosts)
    }
}

/// A proxy that accepts TCP and never answers: a backend that never speaks HTTP/2.
fn silent_endpoint(behind: &EchoBackend) -> FaultProxy {
    let proxy = FaultProxy::start(behind.addr());
    proxy.set_silent(true);
    proxy
}

fn with_timeout(
    mut request: tonic::Request<EchoRequest>,
    timeout: Duration,
) -> tonic::Request<EchoRequest> {
    request.set_timeout(timeout);
    request
}

/// One locality with a live endpoint and one whose endpoint accepts TCP and never sends
/// SETTINGS: the silent one stays CONNECTING and round robin skips it, so all 200 RPCs
/// (each with a 2 s deadline) succeed on the live one, as on gRPC-Go.
pub async fn a_silent_locality_is_skipped<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let live = EchoBackend::start("live");
    let silent = silent_endpoint(&live);
    let plane = Plane::<R>::start(
        &[
            locality("live", 0, &[live.port()]),
            locality("silent", 0, &[silent.port()]),
        ],
        false,
    );
    let channel = plane.channel().build().expect("a channel");
    within(&rt, PROMPT, "200 RPCs", async {
        for i in 0..200 {
            let request = with_timeout(echo_request(&format!("rpc {i}")), Duration::from_secs(2));
            let reply = call_echo(channel.clone(), request).await;
            let reply = reply.unwrap_or_else(|s| panic!("RPC {i} failed: {s:?}"));
            assert_eq!(reply.backend, "live");
        }
    })
    .await;
    assert_eq!(live.served(), 200);
    assert!(
        silent.connections() >= 1,
        "the silent endpoint was dialled (and kept CONNECTING)"
    );
}

/// Priority 0 is one endpoint that never sends SETTINGS, priority 1 a live one: the
/// first RPC succeeds once the failover timeout (1 s here) has passed, and not before
/// (gRPC-Go: first success at 10.02 s with its 10 s default). The timer starts when the
/// configuration arrives, after the RPC was made, so the RPC cannot end sooner.
pub async fn a_silent_priority_fails_over_at_the_failover_timeout<R: Runtime>() {
    const FAILOVER: Duration = Duration::from_secs(1);
    let rt = R::current().expect("a runtime");
    let live = EchoBackend::start("live");
    let silent = silent_endpoint(&live);
    let plane = Plane::<R>::start(
        &[
            locality("silent", 0, &[silent.port()]),
            locality("live", 1, &[live.port()]),
        ],
        false,
    );
    let channel = (plane.channel().failover_timeout(FAILOVER))
        .build()
        .expect("a channel");
    let start = rt.now();
    let request = with_timeout(echo_request("first"), Duration::from_secs(5));
    let reply = call_echo(channel.clone(), request)
        .await
        .expect("priority 1 serves once priority 0's failover timeout passed");
    let took = rt.now() - start;
    assert_eq!(reply.backend, "live");
    assert!(
        took >= FAILOVER,
        "failed over after {took:?}, before the timeout"
    );
    assert!(took < FAILOVER + SLACK, "failed over only after {took:?}");
    assert_eq!(silent.connections(), 1, "priority 0 was dialled once");
    for _ in 0..20 {
        let reply = call_echo(channel.clone(), echo_request("next")).await;
        assert_eq!(reply.expect("priority 1 is in use").backend, "live");
    }
}

/// The same two priorities with the default failover timeout (10 s) and a 400 ms
/// connect timeout: the attempt at the silent endpoint expires into TRANSIENT_FAILURE,
/// which fails over at once, so the first RPC succeeds after the connect deadline and
/// long before the failover timeout.
pub async fn the_connect_deadline_covers_the_wait_for_settings<R: Runtime>() {
    const CONNECT_TIMEOUT: Duration = Duration::from_millis(400);
    let rt = R::current().expect("a runtime");
    let live = EchoBackend::start("live");
    let silent = silent_endpoint(&live);
    let plane = Plane::<R>::start(
        &[
            locality("silent", 0, &[silent.port()]),
            locality("live", 1, &[live.port()]),
        ],
        false,
    );
    let settings = TransportSettings {
        connect_timeout: CONNECT_TIMEOUT,
        ..TransportSettings::endpoint_defaults()
    };
    let channel = (plane.channel().transport_settings(settings))
        .build()
        .expect("a channel");
    let start = rt.now();
    let request = with_timeout(echo_request("first"), Duration::from_secs(5));
    let reply = call_echo(channel, request)
        .await
        .expect("priority 1 serves once priority 0 failed to connect");
    let took = rt.now() - start;
    assert_eq!(reply.backend, "live");
    assert!(took >= CONNECT_TIMEOUT, "failed over after {took:?}");
    assert!(
        took < CONNECT_TIMEOUT + SLACK,
        "failed over only after {took:?}"
    );
}

/// Two READY backends, one behind a proxy that then black-holes its connection (and
/// leaves new ones silent): with keepalive (a PING after 250 ms without a frame read,
/// 250 ms for its ACK) the dead connection is closed, its RPCs fail with UNAVAILABLE
/// and the route's retry policy moves them to the live backend. Without keepalive they
/// would wait out their 5 s deadline.
pub async fn keepalive_notices_a_backend_gone_silent<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let live = EchoBackend::start("live");
    let doomed = EchoBackend::start("doomed");
    let proxy = FaultProxy::start(doomed.addr());
    let plane = Plane::<R>::start(&[locality("z", 0, &[live.port(), proxy.port()])], true);
    let settings = TransportSettings {
        keepalive: Some(KeepaliveSettings {
            interval: Duration::from_millis(250),
            timeout: Duration::from_millis(250),
        }),
        ..TransportSettings::endpoint_defaults()
    };
    let channel = (plane.channel().transport_settings(settings))
        .build()
        .expect("a channel");
    within(&rt, PROMPT, "both backends serving", async {
        while live.served() == 0 || doomed.served() == 0 {
            call_echo(channel.clone(), echo_request("warm"))
                .await
                .expect("both backends are live");
        }
    })
    .await;
    let doomed_served = doomed.served();
    proxy.set_silent(true);
    assert_eq!(proxy.black_hole().await, 1);
    let start = rt.now();
    let calls = (0..10).map(|i| {
        let request = with_timeout(echo_request(&format!("rpc {i}")), Duration::from_secs(5));
        call_echo(channel.clone(), request)
    });
    let replies = futures::future::join_all(calls).await;
    let took = rt.now() - start;
    for reply in replies {
        let reply = reply.expect("every RPC ends on the live backend");
        assert_eq!(reply.backend, "live");
    }
    assert!(took < Duration::from_millis(500) + SLACK, "took {took:?}");
    assert_eq!(doomed.served(), doomed_served, "nothing got through");
    assert!(
        proxy.connections() >= 2,
        "the dead connection was closed and the endpoint dialled again"
    );
}

/// One backend behind a proxy that injects a GOAWAY (last stream id 2^31-1, NO_ERROR)
/// while five slow RPCs are on the connection: the five finish there, and the RPCs made
/// after it go on a new connection and succeed (before, they failed at once: hyper
/// refuses new streams on a connection that received GOAWAY).
pub async fn goaway_retires_the_connection_for_new_rpcs<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let backend = EchoBackend::start("backend");
    let proxy = FaultProxy::start(backend.addr());
    let plane = Plane::<R>::start(&[locality("z", 0, &[proxy.port()])], false);
    let channel = plane.channel().build().expect("a channel");
    call_echo(channel.clone(), echo_request("warm"))
        .await
        .expect("the backend serves");
    let slow = (0..5).map(|i| {
        let request = EchoRequest {
            message: format!("slow {i}"),
            delay_ms: 600,
        };
        call_echo(channel.clone(), tonic::Request::new(request))
    });
    let slow = futures::future::join_all(slow);
    let rest = async {
        within(&rt, PROMPT, "the slow RPCs at the backend", async {
            while backend.received() < 6 {
                rt.sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert_eq!(proxy.send_goaway().await, 1, "GOAWAY on the one connection");
        for i in 0..20 {
            let request = with_timeout(echo_request(&format!("after {i}")), Duration::from_secs(2));
            let reply = call_echo(channel.clone(), request).await;
            reply.unwrap_or_else(|s| panic!("RPC {i} after the GOAWAY failed: {s:?}"));
        }
    };
    let (slow, ()) = within(&rt, PROMPT, "the RPCs", futures::future::join(slow, rest)).await;
    for reply in slow {
        reply.expect("an RPC in flight at the GOAWAY finishes");
    }
    assert_eq!(
        proxy.connections(),
        2,
        "one new connection after the GOAWAY"
    );
}

/// A channel that is dropped closes its endpoint connections (its connections' tasks
/// hold no reference to it).
pub async fn a_dropped_channel_closes_its_connections<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let backend = EchoBackend::start("backend");
    let proxy = FaultProxy::start(backend.addr());
    let plane = Plane::<R>::start(&[locality("z", 0, &[proxy.port()])], false);
    let channel = plane.channel().build().expect("a channel");
    call_echo(channel.clone(), echo_request("one"))
        .await
        .expect("the backend serves");
    assert_eq!(proxy.open_connections(), 1);
    drop(channel);
    within(&rt, PROMPT, "the connection closed", async {
        while proxy.open_connections() > 0 {
            rt.sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}
