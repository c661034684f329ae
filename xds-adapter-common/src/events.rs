//! A client's channel events ([`ChannelEvent`]) and their fan-out: one bounded queue
//! per subscriber. The driver never waits for a subscriber; one that falls behind loses
//! the oldest events first (the newest, which tell the current state of the transport,
//! are kept) and can read how many it lost.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use xds_proto_core::{ServerId, Status, StreamId};

/// What the transport did, as the client reports it to [`Client::channel_events`]
/// subscribers: which server is in use, connection attempts and their failures, the
/// ADS stream's life, and every request HTTP/2 took (ACKs and NACKs included).
///
/// [`Client::channel_events`]: crate::Client::channel_events
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ChannelEvent {
    /// The core asked for an ADS stream to this server.
    StreamRequested {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
        /// The new stream.
        stream: StreamId,
    },
    /// A connection attempt to the server began.
    Connecting {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
    },
    /// A connection to the server is established (`reused`: the open one was taken).
    Connected {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
        /// Whether an already open connection was reused.
        reused: bool,
    },
    /// A connection attempt failed.
    ConnectFailed {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
        /// Why.
        reason: String,
    },
    /// The ADS stream is dispatched on an established connection.
    StreamStarted {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
        /// The stream.
        stream: StreamId,
    },
    /// HTTP/2 took a request of the stream.
    RequestSent {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
        /// The stream.
        stream: StreamId,
        /// The request's type URL.
        type_url: &'static str,
        /// Its `version_info` (empty on a delta stream).
        version: String,
        /// Its `response_nonce` (empty for a subscription without a response yet).
        nonce: String,
        /// The subscribed names (shared with the request); on a delta stream, the
        /// names it subscribes to (`resource_names_subscribe`).
        resource_names: Arc<[Arc<str>]>,
        /// The NACK's `error_detail` message, when it is a NACK.
        nack: Option<String>,
        /// What a delta request carried besides; `None` on a SotW stream.
        delta: Option<DeltaSent>,
    },
    /// A response arrived on the stream.
    ResponseReceived {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
        /// The stream.
        stream: StreamId,
        /// Its size in bytes.
        bytes: usize,
    },
    /// The ADS stream ended: the server or the transport ended it, or the client
    /// closed it itself (`by_client`).
    StreamClosed {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
        /// The stream.
        stream: StreamId,
        /// How it ended; when the client closed it, why: `INTERNAL` for a response
        /// that was no `DiscoveryResponse`, `CANCELLED` when nothing is watched on the
        /// server any more (the last watch went, or a fallback server was left for a
        /// recovered primary).
        status: Status,
        /// Whether the client closed it.
        by_client: bool,
    },
    /// The connection to a server ended.
    ConnectionClosed {
        /// The server.
        server: ServerId,
        /// Its URI.
        server_uri: Arc<str>,
        /// The error that ended it, if any.
        error: Option<String>,
    },
    /// Nothing on this server is watched any more; its connection was dropped.
    ChannelDropped {
        /// The server.
        server: ServerId,
    },
}

/// What a delta request carried that a SotW request has not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeltaSent {
    /// `resource_names_unsubscribe`.
    pub unsubscribe: Vec<Arc<str>>,
    /// How many `initial_resource_versions` it named (on a type's first request of a
    /// new stream: the resources the client holds).
    pub initial_resource_versions: usize,
}

/// How many channel events a subscriber's queue holds
/// ([`Client::channel_events`](crate::Client::channel_events)); beyond it the oldest
/// are dropped and counted ([`ChannelEventStream::dropped`]).
pub const CHANNEL_EVENT_BUFFER: usize = 1024;

#[derive(Debug)]
struct Queue {
    events: VecDeque<ChannelEvent>,
    capacity: usize,
    dropped: u64,
    waker: Option<Waker>,
    /// The client stopped: no more events will come.
    closed: bool,
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new subscriber's queue of at most `capacity` (at least 1) events: the driver's
/// end and the subscriber's.
pub(crate) fn subscription(capacity: usize) -> (EventSender, ChannelEventStream) {
    let queue = Arc::new(Mutex::new(Queue {
        events: VecDeque::new(),
        capacity: capacity.max(1),
        dropped: 0,
        waker: None,
        closed: false,
    }));
    (
        EventSender {
            queue: queue.clone(),
        },
        ChannelEventStream { queue },
    )
}

/// The driver's end of a subscriber's queue. Dropping it ends the subscriber's stream
/// (after the queued events).
#[derive(Debug)]
pub(crate) struct EventSender {
    queue: Arc<Mutex<Queue>>,
}

impl EventSender {
    /// Queues `event`, dropping the oldest queued one when full. False when the
    /// subscriber has gone.
    pub(crate) fn send(&self, event: &ChannelEvent) -> bool {
        if Arc::strong_count(&self.queue) == 1 {
            return false;
        }
        let mut queue = lock(&self.queue);
        if queue.events.len() == queue.capacity {
            queue.events.pop_front();
            queue.dropped += 1;
        }
        queue.events.push_back(event.clone());
        if let Some(waker) = queue.waker.take() {
            waker.wake();
        }
        true
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        let mut queue = lock(&self.queue);
        queue.closed = true;
        if let Some(waker) = queue.waker.take() {
            waker.wake();
        }
    }
}

/// The stream of a client's [`ChannelEvent`]s, from the moment it was subscribed. It
/// ends when the client shuts down. Its queue is bounded: a reader that falls behind
/// by more than its capacity loses the oldest events (see [`dropped`](Self::dropped)).
#[derive(Debug)]
pub struct ChannelEventStream {
    queue: Arc<Mutex<Queue>>,
}

impl ChannelEventStream {
    /// How many events were dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        lock(&self.queue).dropped
    }
}

impl Stream for ChannelEventStream {
    type Item = ChannelEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ChannelEvent>> {
        let mut queue = lock(&self.queue);
        if let Some(event) = queue.events.pop_front() {
            return Poll::Ready(Some(event));
        }
        if queue.closed {
            return Poll::Ready(None);
        }
        queue.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use futures::{FutureExt, StreamExt};
    use xds_proto_core::ServerId;

    use super::*;

    fn event(i: u64) -> ChannelEvent {
        ChannelEvent::ChannelDropped {
            server: ServerId::from_raw(i as usize),
        }
    }

    #[test]
    fn a_full_queue_drops_the_oldest_and_counts_them() {
        let (tx, mut events) = subscription(3);
        for i in 0..5 {
            assert!(tx.send(&event(i)));
        }
        assert_eq!(events.dropped(), 2);
        let read: Vec<_> = std::iter::from_fn(|| events.next().now_or_never().flatten()).collect();
        assert_eq!(
            read,
            vec![event(2), event(3), event(4)],
            "the newest are kept"
        );
        assert!(events.next().now_or_never().is_none(), "pending, not ended");
        tx.send(&event(5));
        drop(tx);
        assert_eq!(events.next().now_or_never(), Some(Some(event(5))));
        assert_eq!(
            events.next().now_or_never(),
            Some(None),
            "ended after the queue"
        );
        assert_eq!(events.dropped(), 2);
    }

    #[test]
    fn a_gone_subscriber_is_reported_to_the_driver() {
        let (tx, events) = subscription(CHANNEL_EVENT_BUFFER);
        assert!(tx.send(&event(1)));
        drop(events);
        assert!(!tx.send(&event(2)));
    }
}
