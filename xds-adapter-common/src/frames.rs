//! What the server says about its connection, read from the HTTP/2 frame headers of
//! the bytes hyper reads (above TLS): the first SETTINGS frame, which makes a
//! connection connected, and GOAWAY, which retires it for new streams. The frame
//! headers hyper writes are followed too, for one fact: whether a keepalive PING is
//! waiting for its answer when the connection ends. Only the 9-byte frame headers are
//! parsed; payloads are skipped, and hyper still parses everything.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use futures::channel::oneshot;
use futures::future;

const FRAME_HEADER_LEN: usize = 9;
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_PING: u8 = 0x6;
const FRAME_GOAWAY: u8 = 0x7;
const FLAG_ACK: u8 = 0x1;
/// The client's connection preface, which precedes its first frame (RFC 9113 §3.4).
const CLIENT_PREFACE_LEN: usize = 24;

/// Why a connection ended whose task ended without an error, while a PING it sent was
/// unanswered and the server had not closed its side. hyper's own error for it reaches
/// the connection's task only when that task notices first.
pub(crate) const KEEPALIVE_TIMED_OUT: &str = "keep-alive timed out";

/// How an attempt's HTTP/2 handshake ended: the server's SETTINGS arrived, or the
/// connection ended first (with why).
pub(crate) type Handshake = Result<(), String>;

/// Why a connection stopped taking new streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Retired {
    /// The server sent GOAWAY: the streams on the connection go on until they end.
    GoingAway,
    /// The connection ended, with the error that ended it, if any.
    Ended(Option<String>),
}

/// The state of one connection that its reader, its connection task and the channel
/// slot share.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    going_away: AtomicBool,
    /// A PING was written and its ACK has not been read since.
    ping_unanswered: AtomicBool,
    /// Reading from the server ended (end of stream or an error).
    read_ended: AtomicBool,
    /// Until the handshake has ended: where its outcome goes.
    handshake: Mutex<Option<oneshot::Sender<Handshake>>>,
    end: Mutex<End>,
}

/// Whether the connection has ended and why; who waits for it (or for a GOAWAY).
#[derive(Debug, Default)]
struct End {
    ended: bool,
    error: Option<String>,
    waiting: Vec<Waker>,
}

impl End {
    /// Registers `waker` (once, however often the waiting future is polled).
    fn wait(&mut self, waker: &Waker) {
        if !self.waiting.iter().any(|w| w.will_wake(waker)) {
            self.waiting.push(waker.clone());
        }
    }
}

impl ConnectionState {
    /// A new connection's state, and the receiver of its handshake's outcome.
    pub(crate) fn new() -> (Arc<ConnectionState>, oneshot::Receiver<Handshake>) {
        let (tx, rx) = oneshot::channel();
        let state = ConnectionState {
            going_away: AtomicBool::new(false),
            ping_unanswered: AtomicBool::new(false),
            read_ended: AtomicBool::new(false),
            handshake: Mutex::new(Some(tx)),
            end: Mutex::new(End::default()),
        };
        (Arc::new(state), rx)
    }

    /// Whether the server has sent GOAWAY: the connection takes no new streams.
    pub(crate) fn is_going_away(&self) -> bool {
        self.going_away.load(Ordering::Acquire)
    }

    /// The server sent GOAWAY: whoever waits for the connection's retirement is woken.
    fn goaway_received(&self) {
        self.going_away.store(true, Ordering::Release);
        let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
        end.waiting.drain(..).for_each(Waker::wake);
    }

    /// Reading from the server ended: it closed the connection, or the socket failed.
    pub(crate) fn read_ended(&self) {
        self.read_ended.store(true, Ordering::Release);
    }

    /// Why the connection ended when hyper gave no error: a keepalive timeout when a
    /// PING went unanswered while the server's side was still open (hyper ends the
    /// connection quietly then and reports the timeout only to whichever of its tasks
    /// notices first); `None` for a close by the server or by this client.
    pub(crate) fn quiet_end_reason(&self) -> Option<String> {
        (self.ping_unanswered.load(Ordering::Acquire) && !self.read_ended.load(Ordering::Acquire))
            .then(|| KEEPALIVE_TIMED_OUT.to_string())
    }

    /// The connection ended. Returns false when its handshake had not ended yet: the
    /// attempt is told (with `error`) and the end is the attempt's failure, no
    /// connection's close.
    pub(crate) fn ended(&self, error: Option<&str>) -> bool {
        {
            let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
            end.ended = true;
            end.error = error.map(str::to_string);
            end.waiting.drain(..).for_each(Waker::wake);
        }
        match self.take_handshake() {
            Some(tx) => {
                let reason = match error {
                    Some(e) => format!("the connection ended before the SETTINGS frame: {e}"),
                    None => "the connection ended before the SETTINGS frame".to_string(),
                };
                let _ = tx.send(Err(reason));
                false
            }
            None => true,
        }
    }

    /// Completes when the connection has ended, with the error that ended it, if any.
    pub(crate) fn end(&self) -> impl Future<Output = Option<String>> + '_ {
        future::poll_fn(move |cx| {
            let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
            if end.ended {
                return Poll::Ready(end.error.clone());
            }
            end.wait(cx.waker());
            Poll::Pending
        })
    }

    /// Completes when the connection stops taking new streams: at the server's GOAWAY
    /// (the streams on it go on) or at its end, whichever comes first.
    pub(crate) fn retired(&self) -> impl Future<Output = Retired> + '_ {
        future::poll_fn(move |cx| {
            let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
            if end.ended {
                return Poll::Ready(Retired::Ended(end.error.clone()));
            }
            if self.is_going_away() {
                return Poll::Ready(Retired::GoingAway);
            }
            end.wait(cx.waker());
            Poll::Pending
        })
    }

    fn settings_received(&self) {
        if let Some(tx) = self.take_handshake() {
            let _ = tx.send(Ok(()));
        }
    }

    fn take_handshake(&self) -> Option<oneshot::Sender<Handshake>> {
        self.handshake
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Follows the frame headers of one direction of a connection, skipping payloads.
#[derive(Debug, Default)]
struct FrameCursor {
    header: [u8; FRAME_HEADER_LEN],
    header_len: usize,
    /// Bytes still to skip: the current frame's payload (or the client's preface).
    skip: usize,
}

impl FrameCursor {
    /// Takes the next bytes, calling `on_header` with each frame header completed.
    fn feed(&mut self, mut bytes: &[u8], mut on_header: impl FnMut(&[u8; FRAME_HEADER_LEN])) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (FRAME_HEADER_LEN - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
            self.header_len += n;
            bytes = &bytes[n..];
            if self.header_len == FRAME_HEADER_LEN {
                self.header_len = 0;
                let [l0, l1, l2, ..] = self.header;
                self.skip = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
                on_header(&self.header);
            }
        }
    }
}

/// Parses the frame headers of a connection's bytes as they are read and written.
#[derive(Debug)]
pub(crate) struct FrameWatcher {
    state: Arc<ConnectionState>,
    read: FrameCursor,
    written: FrameCursor,
    first_frame: bool,
}

impl FrameWatcher {
    pub(crate) fn new(state: Arc<ConnectionState>) -> FrameWatcher {
        FrameWatcher {
            state,
            read: FrameCursor::default(),
            written: FrameCursor {
                skip: CLIENT_PREFACE_LEN,
                ..FrameCursor::default()
            },
            first_frame: true,
        }
    }

    /// Takes the next bytes read from the server.
    pub(crate) fn observe(&mut self, bytes: &[u8]) {
        let (state, first_frame) = (&self.state, &mut self.first_frame);
        self.read.feed(bytes, |&[.., kind, flags, _, _, _, _]| {
            // The server's connection preface is a SETTINGS frame (RFC 9113 §3.4);
            // anything else first is a protocol error, which hyper reports as the
            // connection's end.
            if std::mem::take(first_frame) && kind == FRAME_SETTINGS && flags & FLAG_ACK == 0 {
                state.settings_received();
            }
            match kind {
                FRAME_GOAWAY => state.goaway_received(),
                FRAME_PING if flags & FLAG_ACK != 0 => {
                    state.ping_unanswered.store(false, Ordering::Release);
                }
                _ => {}
            }
        });
    }

    /// Takes the next bytes written to the server (after the client's preface).
    pub(crate) fn observe_written(&mut self, bytes: &[u8]) {
        let state = &self.state;
        self.written.feed(bytes, |&[.., kind, flags, _, _, _, _]| {
            if kind == FRAME_PING && flags & FLAG_ACK == 0 {
                state.ping_unanswered.store(true, Ordering::Release);
            }
        });
    }

    /// Reading from the server ended.
    pub(crate) fn read_ended(&self) {
        self.state.read_ended();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn the_first_settings_frame_ends_the_handshake_even_when_split_across_reads() {
        let (state, mut handshake) = ConnectionState::new();
        let mut watcher = FrameWatcher::new(state.clone());
        let bytes = frame(FRAME_SETTINGS, 0, &[0, 3, 0, 0, 0, 100]);
        watcher.observe(&bytes[..4]);
        assert_eq!(handshake.try_recv(), Ok(None), "half a header is no frame");
        watcher.observe(&bytes[4..]);
        assert_eq!(handshake.try_recv(), Ok(Some(Ok(()))));
        assert!(
            state.ended(None),
            "after SETTINGS an end is the connection's close"
        );
    }

    #[test]
    fn a_first_frame_other_than_settings_is_no_handshake() {
        let (state, mut handshake) = ConnectionState::new();
        let mut watcher = FrameWatcher::new(state.clone());
        watcher.observe(&frame(0x6, 0, &[0; 8]));
        watcher.observe(&frame(FRAME_SETTINGS, 0, &[]));
        assert_eq!(handshake.try_recv(), Ok(None));
        assert!(!state.ended(Some("protocol error")));
        let outcome = handshake.try_recv().unwrap().unwrap();
        assert_eq!(
            outcome,
            Err("the connection ended before the SETTINGS frame: protocol error".to_string())
        );
    }

    #[test]
    fn the_end_of_a_connection_and_its_error_are_awaitable() {
        use futures::FutureExt;
        let (state, _handshake) = ConnectionState::new();
        state.settings_received();
        let mut end = Box::pin(state.end());
        assert_eq!(end.as_mut().now_or_never(), None, "open");
        assert!(state.ended(Some("keep-alive timed out")));
        assert_eq!(
            end.now_or_never(),
            Some(Some("keep-alive timed out".into()))
        );
    }

    #[test]
    fn goaway_is_seen_behind_payloads_of_any_size() {
        let (state, _handshake) = ConnectionState::new();
        let mut watcher = FrameWatcher::new(state.clone());
        let mut bytes = frame(FRAME_SETTINGS, 0, &[]);
        bytes.extend(frame(0x0, 0, &vec![0xAA; 70_000]));
        bytes.extend(frame(FRAME_SETTINGS, FLAG_ACK, &[]));
        for chunk in bytes.chunks(1000) {
            watcher.observe(chunk);
        }
        assert!(!state.is_going_away());
        let goaway = frame(FRAME_GOAWAY, 0, &[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        for byte in &goaway {
            watcher.observe(std::slice::from_ref(byte));
        }
        assert!(state.is_going_away());
    }

    #[test]
    fn retirement_is_the_first_of_goaway_and_the_end() {
        use futures::FutureExt;
        use futures::task::{ArcWake, waker};
        struct Count(std::sync::atomic::AtomicUsize);
        impl ArcWake for Count {
            fn wake_by_ref(arc: &Arc<Self>) {
                arc.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (state, _handshake) = ConnectionState::new();
        let mut watcher = FrameWatcher::new(state.clone());
        watcher.observe(&frame(FRAME_SETTINGS, 0, &[]));
        let woken = Arc::new(Count(Default::default()));
        let waker = waker(woken.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let mut retired = Box::pin(state.retired());
        for _ in 0..3 {
            assert_eq!(retired.as_mut().poll(&mut cx), Poll::Pending, "open");
        }
        watcher.observe(&frame(
            FRAME_GOAWAY,
            0,
            &[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0],
        ));
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            1,
            "woken once by the GOAWAY"
        );
        assert_eq!(
            retired.as_mut().poll(&mut cx),
            Poll::Ready(Retired::GoingAway)
        );

        let (state, _handshake) = ConnectionState::new();
        state.settings_received();
        let mut retired = Box::pin(state.retired());
        assert_eq!(retired.as_mut().now_or_never(), None);
        assert!(state.ended(Some("reset")));
        assert_eq!(
            retired.now_or_never(),
            Some(Retired::Ended(Some("reset".into())))
        );
    }

    /// hyper sometimes ends a connection whose keepalive PING went unanswered without
    /// an error (the timeout reaches only the task that notices it first): the PING
    /// written and never answered says why, unless the server closed its side.
    #[test]
    fn an_unanswered_ping_explains_a_quiet_end_and_an_answer_or_a_close_does_not() {
        let ping = frame(FRAME_PING, 0, &[7; 8]);
        let ack = frame(FRAME_PING, FLAG_ACK, &[7; 8]);
        let mut preface_and_settings = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        assert_eq!(preface_and_settings.len(), CLIENT_PREFACE_LEN);
        preface_and_settings.extend(frame(FRAME_SETTINGS, 0, &[0, 3, 0, 0, 0, 100]));

        let (state, _handshake) = ConnectionState::new();
        let mut watcher = FrameWatcher::new(state.clone());
        watcher.observe_written(&preface_and_settings);
        watcher.observe_written(&frame(0x0, 0, &vec![0x6; 20_000]));
        assert_eq!(state.quiet_end_reason(), None, "no PING yet");
        for byte in &ping {
            watcher.observe_written(std::slice::from_ref(byte));
        }
        assert_eq!(
            state.quiet_end_reason().as_deref(),
            Some(KEEPALIVE_TIMED_OUT)
        );
        // A PING from the server, and this client's answer to it, change nothing.
        watcher.observe(&frame(FRAME_PING, 0, &[1; 8]));
        watcher.observe_written(&frame(FRAME_PING, FLAG_ACK, &[1; 8]));
        assert_eq!(
            state.quiet_end_reason().as_deref(),
            Some(KEEPALIVE_TIMED_OUT)
        );
        watcher.observe(&ack);
        assert_eq!(state.quiet_end_reason(), None, "answered");

        watcher.observe_written(&ping);
        watcher.read_ended();
        assert_eq!(state.quiet_end_reason(), None, "the server closed its side");
    }
}
