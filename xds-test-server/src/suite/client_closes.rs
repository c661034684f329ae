//! Streams the client closes itself: each one is published as a `StreamClosed` channel
//! event that says so and why, like a stream the server or the transport ended.

use xds_adapter_common::{ChannelEvent, Runtime};
use xds_proto_core::resource::Cds;
use xds_proto_core::{Code, Status, StreamId};

use super::{CDS, PROMPT, builder, channel_event, next_value, server_saw};
use crate::LoopbackServer;
use crate::resources::{cluster, cluster_with};

/// The server sends a message that is no `DiscoveryResponse`: the client closes the
/// stream (`INTERNAL`, and says so on the channel), opens a new one, and its watcher
/// keeps its value and gets the next version. When the last watch goes, the client
/// closes that stream too (`CANCELLED`: nothing is watched on the server any more).
pub async fn client_closed_streams_are_published<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster("cluster-1")]);
    let client = builder::<R>(&server.bootstrap_json("client-closes-node", None))
        .build()
        .expect("client");
    let mut events = client.channel_events();
    let mut cds = client.watch::<Cds>("cluster-1").await.expect("watch");
    next_value(&rt, &mut cds).await;
    let first = channel_event(
        &rt,
        &mut events,
        PROMPT,
        "the first response",
        |e| match e {
            ChannelEvent::ResponseReceived { stream, .. } => Some(*stream),
            _ => None,
        },
    )
    .await;

    server.send_undecodable_message();
    let (closed, status) = closed_by_client(&rt, &mut events).await;
    assert_eq!(closed, first);
    assert_eq!(status.code, Code::INTERNAL, "{status}");
    assert!(status.message.contains("DiscoveryResponse"), "{status}");
    let reopened = channel_event(&rt, &mut events, PROMPT, "a new stream", |e| match e {
        ChannelEvent::StreamStarted { stream, .. } => Some(*stream),
        _ => None,
    })
    .await;
    assert_ne!(reopened, first);
    server_saw(
        &rt,
        &server,
        "the resubscription on a second stream",
        |reqs, _| reqs.iter().any(|r| r.stream == 2).then_some(()),
    )
    .await;
    server.set_resources(CDS, "2", vec![cluster_with("cluster-1", 7)]);
    assert_eq!(next_value(&rt, &mut cds).await.max_requests, 7);

    drop(cds);
    let (closed, status) = closed_by_client(&rt, &mut events).await;
    assert_eq!(closed, reopened);
    assert_eq!(status.code, Code::CANCELLED, "{status}");
    client.shutdown().await;
    server.stop().await;
}

/// The next stream the client closed itself, and why.
async fn closed_by_client<R: Runtime>(
    rt: &R,
    events: &mut xds_adapter_common::ChannelEventStream,
) -> (StreamId, Status) {
    channel_event(
        rt,
        events,
        PROMPT,
        "a stream the client closed",
        |e| match e {
            ChannelEvent::StreamClosed {
                stream,
                status,
                by_client: true,
                ..
            } => Some((*stream, status.clone())),
            _ => None,
        },
    )
    .await
}
