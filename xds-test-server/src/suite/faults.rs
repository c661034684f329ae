//! Transport faults injected with a [`FaultProxy`]: a server that accepts TCP and never
//! speaks HTTP/2 (the connect deadline, then fallback), one that goes silent
//! mid-stream (keepalive, on and off), and one that retires its connections with
//! GOAWAY (a fresh connection for every rotation, nothing failed).

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use xds_adapter_common::{
    ChannelEvent, ChannelEventStream, Client, KeepaliveSettings, Runtime, WatchStream,
};
use xds_proto_core::backoff::BackoffConfig;
use xds_proto_core::resource::{Cds, Lds};
use xds_proto_core::{Code, ErrorKind, Status, StreamId, XdsResourceType};

use super::{PROMPT, builder, next_value, ready_updates, short_backoff, updates_during, within};
use crate::resources::{cluster, listener};
use crate::{FaultProxy, LoopbackServer};

const CDS: &str = xds_proto_core::resource::type_url::CLUSTER;
const LDS: &str = xds_proto_core::resource::type_url::LISTENER;

/// How late a timer of the client may be observed here (scheduling on a busy machine).
const SLACK: Duration = Duration::from_millis(1500);

fn bootstrap_json(uris: &[String], node: &str) -> String {
    let servers: Vec<String> = uris
        .iter()
        .map(|uri| {
            format!(
                r#"{{"server_uri": "{uri}", "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"]}}"#
            )
        })
        .collect();
    format!(
        r#"{{"xds_servers": [{}], "node": {{"id": "{node}", "cluster": "loopback-test"}}}}"#,
        servers.join(", ")
    )
}

/// Collects channel events until `pick` returns something, within `limit`.
async fn record_until<R: Runtime, T>(
    rt: &R,
    events: &mut ChannelEventStream,
    seen: &mut Vec<ChannelEvent>,
    limit: Duration,
    what: &str,
    mut pick: impl FnMut(&ChannelEvent) -> Option<T>,
) -> T {
    within(rt, limit, what, async {
        while let Some(e) = events.next().await {
            let picked = pick(&e);
            seen.push(e);
            if let Some(t) = picked {
                return t;
            }
        }
        panic!("the client stopped while waiting for {what}")
    })
    .await
}

fn drain(events: &mut ChannelEventStream, seen: &mut Vec<ChannelEvent>) {
    while let Some(Some(e)) = events.next().now_or_never() {
        seen.push(e);
    }
}

fn assert_no_replacing_error<T: XdsResourceType>(
    updates: &[xds_adapter_common::WatchUpdate<T::Value>],
) {
    for update in updates {
        if let xds_adapter_common::WatchUpdate::Changed(Err(e)) = update {
            panic!("the cached value was replaced by an error: {e}");
        }
    }
}

/// The primary accepts TCP and never sends its SETTINGS: the attempt fails as a
/// connectivity failure at the connect deadline ("timed out before receiving SETTINGS
/// frame"), no stream is started on it (so no does-not-exist timer runs), and the
/// listener comes from the fallback server; the watcher sees connectivity errors at
/// most, never does-not-exist, although the resource timeout is shorter than the wait.
pub async fn no_settings_is_a_connect_failure_then_fallback<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let fallback = LoopbackServer::start();
    fallback.set_resources(LDS, "1", vec![listener("listener-1", "routes-1")]);
    let primary = FaultProxy::start(fallback.addr());
    primary.set_silent(true);
    let connect_timeout = Duration::from_millis(400);
    let json = bootstrap_json(&[primary.uri(), fallback.uri()], "no-settings-node");
    let client = builder::<R>(&json)
        .connect_timeout(connect_timeout)
        .resource_timeout(Duration::from_millis(300))
        .backoff(short_backoff())
        .build()
        .expect("client");
    let mut events = client.channel_events();
    let mut seen = Vec::new();
    let start = rt.now();
    let mut lds = client.watch::<Lds>("listener-1").await.expect("watch");
    let primary_uri = primary.uri();
    let reason = record_until(
        &rt,
        &mut events,
        &mut seen,
        PROMPT,
        "the failed attempt",
        |e| match e {
            ChannelEvent::ConnectFailed {
                server_uri, reason, ..
            } if **server_uri == *primary_uri => Some(reason.clone()),
            _ => None,
        },
    )
    .await;
    let elapsed = rt.now() - start;
    assert!(
        reason.contains("timed out before receiving SETTINGS frame"),
        "{reason}"
    );
    assert!(
        elapsed >= connect_timeout && elapsed < connect_timeout + SLACK,
        "failed at the deadline: {elapsed:?}"
    );
    assert!(primary.connections() >= 1, "TCP was accepted");

    let value = within(&rt, PROMPT, "the listener from the fallback", async {
        loop {
            match lds.next().await.expect("watch open") {
                xds_adapter_common::WatchUpdate::Changed(Ok(v)) => return v,
                xds_adapter_common::WatchUpdate::Changed(Err(e))
                | xds_adapter_common::WatchUpdate::AmbientError(e) => {
                    assert_eq!(
                        e.kind,
                        ErrorKind::Connectivity,
                        "only connectivity errors: {e}"
                    )
                }
            }
        }
    })
    .await;
    assert_eq!(value.name, "listener-1");
    // Further attempts on the primary keep failing at the deadline meanwhile.
    let later = updates_during(&rt, &mut lds, Duration::from_millis(600)).await;
    assert_no_replacing_error::<Lds>(&later);
    drain(&mut events, &mut seen);
    for e in &seen {
        match e {
            ChannelEvent::StreamStarted { server_uri, .. }
            | ChannelEvent::Connected { server_uri, .. }
                if **server_uri == *primary_uri =>
            {
                panic!("a server that never sent SETTINGS counted as connected: {e:?}")
            }
            _ => {}
        }
    }
    client.shutdown().await;
    fallback.stop().await;
}

/// The server goes silent mid-stream (the proxy black-holes the connection). With
/// keepalive on (short test settings) the PING goes unanswered, the connection and
/// its stream end with UNAVAILABLE "keep-alive timed out" within interval + timeout,
/// and the client reconnects (a new connection, a new stream that gets responses),
/// the cached value untouched. With keepalive off nothing is noticed in the same
/// window: the client keeps waiting on the dead connection.
pub async fn silent_server_mid_stream<R: Runtime>(keepalive: bool) {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
    let proxy = FaultProxy::start(server.addr());
    let settings = KeepaliveSettings {
        interval: Duration::from_millis(200),
        timeout: Duration::from_millis(200),
    };
    let client = builder::<R>(&bootstrap_json(&[proxy.uri()], "silent-node"))
        .keepalive(keepalive.then_some(settings))
        .backoff(short_backoff())
        .build()
        .expect("client");
    let mut events = client.channel_events();
    let mut seen = Vec::new();
    let mut cds = client.watch::<Cds>("cluster-1").await.expect("watch");
    next_value(&rt, &mut cds).await;
    // Healthy: PINGs are answered and the stream stays up across several intervals.
    let healthy = updates_during(&rt, &mut cds, Duration::from_millis(700)).await;
    assert!(healthy.is_empty(), "{healthy:?}");
    drain(&mut events, &mut seen);
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, ChannelEvent::StreamClosed { .. })),
        "answered PINGs keep the stream: {seen:?}"
    );

    let silent_at = rt.now();
    proxy.black_hole().await;
    let window = settings.interval + settings.timeout + SLACK;
    if !keepalive {
        let during = updates_during(&rt, &mut cds, window).await;
        drain(&mut events, &mut seen);
        assert!(during.is_empty(), "{during:?}");
        assert!(
            !seen.iter().any(|e| matches!(
                e,
                ChannelEvent::StreamClosed { .. } | ChannelEvent::ConnectionClosed { .. }
            )),
            "without keepalive the silent server goes unnoticed: {seen:?}"
        );
        assert_eq!(proxy.connections(), 1);
        client.shutdown().await;
        server.stop().await;
        return;
    }
    let (stream, status) = record_until(
        &rt,
        &mut events,
        &mut seen,
        PROMPT,
        "the stream's end",
        |e| match e {
            ChannelEvent::StreamClosed { stream, status, .. } => Some((*stream, status.clone())),
            _ => None,
        },
    )
    .await;
    let elapsed = rt.now() - silent_at;
    assert_eq!(status.code, Code::UNAVAILABLE, "{status}");
    assert!(
        status.message.contains("keep-alive timed out"),
        "the stream's status says why the connection ended: {status}"
    );
    let closed = |e: &ChannelEvent| match e {
        ChannelEvent::ConnectionClosed { error, .. } => Some(error.clone()),
        _ => None,
    };
    let error = match seen.iter().find_map(closed) {
        Some(error) => error,
        None => record_until(&rt, &mut events, &mut seen, PROMPT, "the end", closed).await,
    };
    let error = error.expect("an error ended the connection");
    assert!(error.contains("keep-alive timed out"), "{error}");
    // At most interval + timeout after the last frame read (a PING in flight when the
    // proxy went silent times out sooner).
    assert!(
        elapsed < window,
        "detected within interval + timeout: {elapsed:?}"
    );
    record_until(
        &rt,
        &mut events,
        &mut seen,
        PROMPT,
        "a response on a new stream",
        |e| {
            matches!(e, ChannelEvent::ResponseReceived { stream: s, .. } if *s != stream)
                .then_some(())
        },
    )
    .await;
    assert_eq!(proxy.connections(), 2, "a new connection");
    assert_no_replacing_error::<Cds>(&ready_updates(&mut cds));
    client.shutdown().await;
    server.stop().await;
}

/// A client behind the fault proxy watching `cluster-1`, with a long backoff (a
/// spurious failure would show as a visible pause), once its first response is in.
struct GoawayScene<R: Runtime> {
    rt: R,
    server: LoopbackServer,
    proxy: FaultProxy,
    client: Client<R>,
    events: ChannelEventStream,
    seen: Vec<ChannelEvent>,
    cds: WatchStream<Cds>,
    /// The stream of the last response.
    stream: StreamId,
}

impl<R: Runtime> GoawayScene<R> {
    async fn start(node: &str) -> GoawayScene<R> {
        let rt = R::current().expect("a runtime");
        let server = LoopbackServer::start();
        server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
        let proxy = FaultProxy::start(server.addr());
        let client = builder::<R>(&bootstrap_json(&[proxy.uri()], node))
            .backoff(BackoffConfig {
                initial: Duration::from_secs(5),
                ..short_backoff()
            })
            .build()
            .expect("client");
        let mut events = client.channel_events();
        let mut seen = Vec::new();
        let mut cds = client.watch::<Cds>("cluster-1").await.expect("watch");
        next_value(&rt, &mut cds).await;
        let stream = record_until(
            &rt,
            &mut events,
            &mut seen,
            PROMPT,
            "the first response",
            |e| match e {
                ChannelEvent::ResponseReceived { stream, .. } => Some(*stream),
                _ => None,
            },
        )
        .await;
        GoawayScene {
            rt,
            server,
            proxy,
            client,
            events,
            seen,
            cds,
            stream,
        }
    }

    /// Waits for a response on a stream other than the last one.
    async fn next_stream_responds(&mut self) {
        let old = self.stream;
        self.stream = record_until(
            &self.rt,
            &mut self.events,
            &mut self.seen,
            Duration::from_secs(3),
            "the next stream's response",
            |e| match e {
                ChannelEvent::ResponseReceived { stream, .. } if *stream != old => Some(*stream),
                _ => None,
            },
        )
        .await;
    }

    /// Every stream went on a new connection, one per rotation, and nothing failed:
    /// no attempt, no stream without a response, no watcher error.
    async fn assert_clean_and_stop(mut self, rotations: usize) {
        drain(&mut self.events, &mut self.seen);
        assert_rotations_were_clean(&self.seen, rotations);
        assert_eq!(
            self.proxy.connections(),
            rotations + 1,
            "one connection per rotation"
        );
        assert_no_replacing_error::<Cds>(&ready_updates(&mut self.cds));
        assert!(
            ready_updates(&mut self.cds).is_empty(),
            "nothing reached the watcher"
        );
        self.client.shutdown().await;
        self.server.stop().await;
    }
}

/// The server retires its connection every 300 ms: a GOAWAY, then the stream on it
/// ended with UNAVAILABLE (as a server with a maximum connection age does). Every
/// rotation's new stream goes on a new connection and gets its response: no failed
/// connection attempt, no stream that ends without a response, no watcher error.
pub async fn goaway_rotations_use_fresh_connections<R: Runtime>() {
    let mut scene = GoawayScene::<R>::start("goaway-node").await;
    const ROTATIONS: usize = 5;
    for _ in 0..ROTATIONS {
        scene.rt.sleep(Duration::from_millis(300)).await;
        assert!(
            scene.proxy.send_goaway().await >= 1,
            "the GOAWAY was written"
        );
        scene
            .server
            .close_streams(Status::new(Code::UNAVAILABLE, "max connection age"));
        scene.next_stream_responds().await;
    }
    scene.assert_clean_and_stop(ROTATIONS).await;
}

/// A GOAWAY arrives while the stream stays open (the server does not end it), then the
/// client itself replaces the stream (an undecodable response makes it close the
/// stream). The connection is still open, with the old stream winding down, so only
/// the GOAWAY says it takes no new streams: the new stream must go on a new
/// connection, and nothing fails.
pub async fn a_stream_after_goaway_goes_on_a_new_connection<R: Runtime>() {
    let mut scene = GoawayScene::<R>::start("goaway-open-node").await;
    assert!(
        scene.proxy.send_goaway().await >= 1,
        "the GOAWAY was written"
    );
    scene.server.send_undecodable_message();
    scene.next_stream_responds().await;
    scene.assert_clean_and_stop(1).await;
}

fn assert_rotations_were_clean(seen: &[ChannelEvent], rotations: usize) {
    let mut responded: Vec<StreamId> = Vec::new();
    let mut connected = Vec::new();
    for e in seen {
        match e {
            ChannelEvent::ConnectFailed { reason, .. } => panic!("a failed attempt: {reason}"),
            ChannelEvent::Connected { reused, .. } => connected.push(*reused),
            ChannelEvent::ResponseReceived { stream, .. } => responded.push(*stream),
            ChannelEvent::StreamClosed { stream, status, .. } => assert!(
                responded.contains(stream),
                "stream {stream:?} ended without a response: {status}"
            ),
            _ => {}
        }
    }
    assert_eq!(
        connected,
        vec![false; rotations + 1],
        "every stream on a new connection"
    );
}

/// The default keepalive (5 min, 20 s) against a server that goes silent right after
/// its response: the connection ends "keep-alive timed out" between 5 min and
/// 5 min 20 s later (plus scheduling), never sooner. Meant for a paused clock.
pub async fn default_keepalive_detects_a_silent_server<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
    let proxy = FaultProxy::start(server.addr());
    let client = builder::<R>(&bootstrap_json(&[proxy.uri()], "default-keepalive-node"))
        .build()
        .expect("client");
    let mut events = client.channel_events();
    let mut seen = Vec::new();
    let mut cds = client.watch::<Cds>("cluster-1").await.expect("watch");
    next_value(&rt, &mut cds).await;
    let silent_at = rt.now();
    proxy.black_hole().await;
    let defaults = KeepaliveSettings::default();
    let limit = defaults.interval + defaults.timeout + SLACK;
    let error = record_until(
        &rt,
        &mut events,
        &mut seen,
        limit,
        "the keepalive",
        |e| match e {
            ChannelEvent::ConnectionClosed { error, .. } => Some(error.clone()),
            _ => None,
        },
    )
    .await;
    let elapsed = rt.now() - silent_at;
    let error = error.expect("an error ended the connection");
    assert!(error.contains("keep-alive timed out"), "{error}");
    assert!(
        elapsed >= defaults.interval,
        "no PING before the interval: {elapsed:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, ChannelEvent::StreamClosed { .. })),
        "the stream lived until the keepalive failed: {seen:?}"
    );
    client.shutdown().await;
    server.stop().await;
}
