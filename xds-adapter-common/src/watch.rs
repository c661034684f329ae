//! The streams a client hands out: typed and untyped watch streams (dropping one
//! cancels its watch).
//!
//! A watch stream is fed through a [`WatchSlot`], not a queue: the driver overwrites,
//! the reader takes, so a reader that stops reading holds at most two events (see
//! [`WatchStream`] for the policy) however fast the resource changes.

use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use xds_proto_core::{WatchEvent, WatcherId, XdsError, XdsResourceType};

use crate::client::Inner;
use crate::driver::Command;

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

/// What a watch stream holds unread: the newest `Changed` and the newest ambient error
/// since the last read, and which of the two came first.
#[derive(Default)]
struct Unread {
    changed: Option<WatchEvent>,
    ambient: Option<WatchEvent>,
    /// The pending ambient error arrived before the pending change.
    ambient_first: bool,
    /// The driver let go: the stream ends once the unread events are read.
    closed: bool,
    /// The reader let go: publishing is pointless.
    reader_gone: bool,
    waker: Option<Waker>,
}

impl Unread {
    fn take(&mut self) -> Option<WatchEvent> {
        if self.ambient_first || self.changed.is_none() {
            self.ambient_first = false;
            if let Some(e) = self.ambient.take() {
                return Some(e);
            }
        }
        self.changed.take().or_else(|| self.ambient.take())
    }
}

/// The slot between the driver and one watch stream, with latest-value semantics: a
/// `Changed` replaces the unread `Changed` (value or error), an ambient error replaces
/// the unread ambient error, and they are read in the order they arrived.
///
/// It also names the stream's watch for the driver: `watch()` queues its command
/// without waiting for an answer, and the driver records the core's watcher here, so
/// the cancel that dropping the stream queues (behind the watch) finds it without a
/// map from streams to watchers.
pub(crate) struct WatchSlot {
    unread: Mutex<Unread>,
    /// The core's watcher, once the driver has taken the watch ([`NO_WATCHER`] before,
    /// and if the core refused it). Written and read by the driver only.
    watcher: AtomicU64,
}

const NO_WATCHER: u64 = u64::MAX;

impl Default for WatchSlot {
    fn default() -> WatchSlot {
        WatchSlot {
            unread: Mutex::default(),
            watcher: AtomicU64::new(NO_WATCHER),
        }
    }
}

impl WatchSlot {
    fn lock(&self) -> MutexGuard<'_, Unread> {
        self.unread.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the core's watcher of this stream (the driver, taking the watch).
    pub(crate) fn set_watcher(&self, id: WatcherId) {
        self.watcher.store(id.into_raw(), Ordering::Relaxed);
    }

    /// The core's watcher of this stream (the driver, taking its cancel).
    pub(crate) fn watcher(&self) -> Option<WatcherId> {
        match self.watcher.load(Ordering::Relaxed) {
            NO_WATCHER => None,
            raw => Some(WatcherId::from_raw(raw)),
        }
    }

    /// Leaves `event` for the reader and wakes it; false when the reader is gone.
    pub(crate) fn publish(&self, event: WatchEvent) -> bool {
        let (replaced, waker) = {
            let mut unread = self.lock();
            if unread.reader_gone {
                return false;
            }
            let replaced = match event {
                WatchEvent::AmbientError(_) => {
                    unread.ambient_first = false;
                    unread.ambient.replace(event)
                }
                // A change, or a kind this adapter does not know yet: latest wins.
                _ => {
                    unread.ambient_first = unread.ambient.is_some();
                    unread.changed.replace(event)
                }
            };
            (replaced, unread.waker.take())
        };
        // Dropped outside the lock: a value may be large.
        drop(replaced);
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    /// How many events wait unread (at most two).
    pub(crate) fn unread(&self) -> usize {
        let unread = self.lock();
        usize::from(unread.changed.is_some()) + usize::from(unread.ambient.is_some())
    }

    /// Ends the stream once its unread events are read.
    pub(crate) fn close(&self) {
        let waker = {
            let mut unread = self.lock();
            unread.closed = true;
            unread.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        let mut unread = self.lock();
        if let Some(event) = unread.take() {
            return Poll::Ready(Some(event));
        }
        if unread.closed {
            return Poll::Ready(None);
        }
        unread.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn reader_dropped(&self) {
        let mut unread = self.lock();
        unread.reader_gone = true;
        unread.changed = None;
        unread.ambient = None;
    }
}

/// The driver's end of a [`WatchSlot`]: dropping it ends the stream, as dropping a
/// channel's sender would.
pub(crate) struct WatchSender(Arc<WatchSlot>);

impl WatchSender {
    pub(crate) fn new(slot: Arc<WatchSlot>) -> WatchSender {
        WatchSender(slot)
    }

    /// See [`WatchSlot::publish`].
    pub(crate) fn publish(&self, event: WatchEvent) -> bool {
        self.0.publish(event)
    }

    /// See [`WatchSlot::set_watcher`].
    pub(crate) fn set_watcher(&self, id: WatcherId) {
        self.0.set_watcher(id);
    }
}

impl Drop for WatchSender {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// An untyped watch: yields the core's [`WatchEvent`]s for one resource until the
/// client shuts down, with the latest-value policy of [`WatchStream`]. Dropping it
/// cancels the watch. It keeps its client running (and, in a pool, keeps the pool
/// handing out the same client for its target).
pub struct RawWatchStream {
    events: Arc<WatchSlot>,
    client: Arc<Inner>,
    type_url: &'static str,
    name: Arc<str>,
}

impl RawWatchStream {
    pub(crate) fn new(
        events: Arc<WatchSlot>,
        client: Arc<Inner>,
        type_url: &'static str,
        name: Arc<str>,
    ) -> RawWatchStream {
        RawWatchStream {
            events,
            client,
            type_url,
            name,
        }
    }

    /// The watched resource's type URL.
    pub fn type_url(&self) -> &str {
        self.type_url
    }

    /// The watched resource's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many events wait unread: never more than two (see [`WatchStream`]).
    pub fn unread(&self) -> usize {
        self.events.unread()
    }
}

impl fmt::Debug for RawWatchStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawWatchStream")
            .field("type_url", &self.type_url)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Stream for RawWatchStream {
    type Item = WatchEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        self.events.poll_take(cx)
    }
}

impl Drop for RawWatchStream {
    fn drop(&mut self) {
        self.events.reader_dropped();
        let _ = self.client.commands.unbounded_send(Command::Cancel {
            slot: self.events.clone(),
            type_url: self.type_url,
        });
    }
}

/// A typed watch of one resource of type `T` (`WatchStream<Cds>`): yields
/// [`WatchUpdate`]s of `T`'s value until the client shuts down. Dropping it cancels
/// the watch.
///
/// # A slow reader sees the newest state, not a backlog
///
/// Updates are not queued. The stream holds, unread, at most the newest
/// [`Changed`](WatchUpdate::Changed) and the newest
/// [`AmbientError`](WatchUpdate::AmbientError) since the last read, so a reader that
/// falls behind (or stops reading) costs at most two updates of memory:
///
/// - a `Changed` replaces the unread `Changed`, whether value or error (a
///   `Changed(Err)` replaces a pending value, and a new value a pending error);
/// - an ambient error replaces the unread ambient error;
/// - both kinds are kept apart, so no kind of error is lost behind the other, and they
///   are read in the order they arrived: the value first, then an ambient error that
///   arrived after it (an ambient error followed by a newer change is read first).
///
/// A reader that keeps up sees every update, as before.
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

    /// The watched resource's name.
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// How many updates wait unread: never more than two (see the type's policy).
    pub fn unread(&self) -> usize {
        self.raw.unread()
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

#[cfg(test)]
mod tests {
    use futures::task::noop_waker_ref;
    use xds_proto_core::resource::ResourceValue;
    use xds_proto_core::{Code, ErrorKind, Status};

    use super::*;

    /// A resource type whose value is a number.
    struct Numbers;

    impl XdsResourceType for Numbers {
        type Value = u32;
        const TYPE_URL: &'static str = "type.googleapis.com/test.Number";
        const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
        fn decode(_: &[u8]) -> Result<(String, u32), xds_proto_core::resource::DecodeError> {
            Ok((String::new(), 0))
        }
    }

    fn value(v: u32) -> WatchEvent {
        WatchEvent::Changed(Ok(ResourceValue::new::<Numbers>(v)))
    }

    fn error(kind: ErrorKind, message: &str) -> XdsError {
        XdsError {
            kind,
            status: Status::new(Code::UNAVAILABLE, message),
        }
    }

    fn ambient(message: &str) -> WatchEvent {
        WatchEvent::AmbientError(error(ErrorKind::Connectivity, message))
    }

    fn read_all(slot: &WatchSlot) -> Vec<WatchEvent> {
        let mut cx = Context::from_waker(noop_waker_ref());
        let mut out = Vec::new();
        while let Poll::Ready(Some(e)) = slot.poll_take(&mut cx) {
            out.push(e);
        }
        out
    }

    #[test]
    fn a_slow_reader_gets_the_newest_value_then_the_ambient_error_after_it() {
        let slot = WatchSlot::default();
        for v in 0..1000 {
            assert!(slot.publish(value(v)));
        }
        slot.publish(ambient("lost"));
        slot.publish(ambient("lost again"));
        assert_eq!(slot.unread(), 2);
        assert_eq!(read_all(&slot), vec![value(999), ambient("lost again")]);
        assert_eq!(slot.unread(), 0);
    }

    #[test]
    fn an_ambient_error_before_a_newer_change_is_read_first() {
        let slot = WatchSlot::default();
        slot.publish(value(1));
        slot.publish(ambient("nacked"));
        slot.publish(value(2));
        assert_eq!(read_all(&slot), vec![ambient("nacked"), value(2)]);
    }

    #[test]
    fn a_changed_error_replaces_a_pending_value_and_keeps_the_ambient_one() {
        let slot = WatchSlot::default();
        slot.publish(value(1));
        slot.publish(ambient("lost"));
        let gone = WatchEvent::Changed(Err(error(ErrorKind::DoesNotExist, "gone")));
        slot.publish(gone.clone());
        assert_eq!(read_all(&slot), vec![ambient("lost"), gone]);
    }

    #[test]
    fn the_stream_ends_after_its_unread_events_and_a_gone_reader_refuses_events() {
        let slot = Arc::new(WatchSlot::default());
        let sender = WatchSender::new(slot.clone());
        assert!(sender.publish(value(1)));
        drop(sender);
        let mut cx = Context::from_waker(noop_waker_ref());
        assert_eq!(slot.poll_take(&mut cx), Poll::Ready(Some(value(1))));
        assert_eq!(slot.poll_take(&mut cx), Poll::Ready(None));
        slot.reader_dropped();
        assert!(!slot.publish(value(2)), "nobody reads");
    }
}
