//! The streams a client hands out: typed and untyped watch streams (dropping one
//! cancels its watch) and the stream of channel events.

use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use futures::channel::mpsc::UnboundedReceiver;
use xds_proto_core::{WatchEvent, WatcherId, XdsError, XdsResourceType};

use crate::client::Inner;
use crate::driver::{ChannelEvent, Command};

/// An update of a typed watch: the gRFC A88 split of the core's [`WatchEvent`].
#[derive(Debug)]
pub enum WatchUpdate<V> {
    /// The resource changed: the new value, or an error that replaces the old value
    /// (does-not-exist, an invalid resource that was never accepted, a connectivity
    /// error before any value arrived).
    Changed(Result<Arc<V>, XdsError>),
    /// Something went wrong, but the value the watcher holds stays valid (a NACKed
    /// update, a lost connection, a server-reported error for a cached resource).
    AmbientError(XdsError),
}

impl<V> Clone for WatchUpdate<V> {
    fn clone(&self) -> Self {
        match self {
            WatchUpdate::Changed(r) => WatchUpdate::Changed(r.clone()),
            WatchUpdate::AmbientError(e) => WatchUpdate::AmbientError(e.clone()),
        }
    }
}

impl<V> WatchUpdate<V> {
    /// The new value, if this update carries one.
    pub fn value(&self) -> Option<&Arc<V>> {
        match self {
            WatchUpdate::Changed(Ok(v)) => Some(v),
            _ => None,
        }
    }

    /// The error, if this update carries one (replacing or ambient).
    pub fn error(&self) -> Option<&XdsError> {
        match self {
            WatchUpdate::Changed(Err(e)) | WatchUpdate::AmbientError(e) => Some(e),
            WatchUpdate::Changed(Ok(_)) => None,
        }
    }
}

/// An untyped watch: yields the core's [`WatchEvent`]s for one resource until the
/// client shuts down. Dropping it cancels the watch. It keeps its client running (and,
/// in a pool, keeps the pool handing out the same client for its target).
pub struct RawWatchStream {
    events: UnboundedReceiver<WatchEvent>,
    client: Arc<Inner>,
    watcher: WatcherId,
    type_url: Arc<str>,
    name: Arc<str>,
}

impl RawWatchStream {
    pub(crate) fn new(
        events: UnboundedReceiver<WatchEvent>,
        client: Arc<Inner>,
        watcher: WatcherId,
        type_url: &str,
        name: &str,
    ) -> RawWatchStream {
        RawWatchStream {
            events,
            client,
            watcher,
            type_url: Arc::from(type_url),
            name: Arc::from(name),
        }
    }

    /// The watcher's id in the core.
    pub fn watcher(&self) -> WatcherId {
        self.watcher
    }

    /// The watched resource's type URL.
    pub fn type_url(&self) -> &str {
        &self.type_url
    }

    /// The watched resource's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for RawWatchStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawWatchStream")
            .field("watcher", &self.watcher)
            .field("type_url", &self.type_url)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Stream for RawWatchStream {
    type Item = WatchEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        Pin::new(&mut self.events).poll_next(cx)
    }
}

impl Drop for RawWatchStream {
    fn drop(&mut self) {
        let _ = self
            .client
            .commands
            .unbounded_send(Command::Cancel(self.watcher));
    }
}

/// A typed watch of one resource of type `T` (`WatchStream<Cds>`): yields
/// [`WatchUpdate`]s of `T`'s value until the client shuts down. Dropping it cancels
/// the watch.
pub struct WatchStream<T> {
    raw: RawWatchStream,
    _type: PhantomData<fn() -> T>,
}

impl<T: XdsResourceType> WatchStream<T> {
    pub(crate) fn new(raw: RawWatchStream) -> WatchStream<T> {
        WatchStream {
            raw,
            _type: PhantomData,
        }
    }

    /// The untyped stream underneath.
    pub fn into_raw(self) -> RawWatchStream {
        self.raw
    }

    /// The watcher's id in the core.
    pub fn watcher(&self) -> WatcherId {
        self.raw.watcher
    }

    /// The watched resource's name.
    pub fn name(&self) -> &str {
        &self.raw.name
    }
}

impl<T> fmt::Debug for WatchStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WatchStream").field(&self.raw).finish()
    }
}

impl<T: XdsResourceType> Stream for WatchStream<T> {
    type Item = WatchUpdate<T::Value>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<WatchUpdate<T::Value>>> {
        loop {
            let event = match Pin::new(&mut self.raw).poll_next(cx) {
                Poll::Ready(Some(event)) => event,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            if let WatchEvent::AmbientError(e) = event {
                return Poll::Ready(Some(WatchUpdate::AmbientError(e)));
            }
            // The core only accepts `watch::<T>` when `T` itself registered the type
            // URL, so every value of this watch is `T::Value`.
            match event.changed::<T>() {
                Some(changed) => return Poll::Ready(Some(WatchUpdate::Changed(changed))),
                None => debug_assert!(false, "a value of another type: {event:?}"),
            }
        }
    }
}

/// The stream of a client's [`ChannelEvent`]s, from the moment it was subscribed.
#[derive(Debug)]
pub struct ChannelEventStream {
    pub(crate) events: UnboundedReceiver<ChannelEvent>,
}

impl Stream for ChannelEventStream {
    type Item = ChannelEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ChannelEvent>> {
        Pin::new(&mut self.events).poll_next(cx)
    }
}
