//! What the server says about its connection, read from the HTTP/2 frame headers of
//! the bytes hyper reads (above TLS): the first SETTINGS frame, which makes a
//! connection connected, and GOAWAY, which retires it for new streams. Only the 9-byte
//! frame headers are parsed; payloads are skipped, and hyper still parses everything.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::channel::oneshot;

const FRAME_HEADER_LEN: usize = 9;
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_GOAWAY: u8 = 0x7;
const FLAG_ACK: u8 = 0x1;

/// How an attempt's HTTP/2 handshake ended: the server's SETTINGS arrived, or the
/// connection ended first (with why).
pub(crate) type Handshake = Result<(), String>;

/// The state of one connection that its reader, its connection task and the channel
/// slot share.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    going_away: AtomicBool,
    /// Until the handshake has ended: where its outcome goes.
    handshake: Mutex<Option<oneshot::Sender<Handshake>>>,
}

impl ConnectionState {
    /// A new connection's state, and the receiver of its handshake's outcome.
    pub(crate) fn new() -> (Arc<ConnectionState>, oneshot::Receiver<Handshake>) {
        let (tx, rx) = oneshot::channel();
        let state = ConnectionState {
            going_away: AtomicBool::new(false),
            handshake: Mutex::new(Some(tx)),
        };
        (Arc::new(state), rx)
    }

    /// Whether the server has sent GOAWAY: the connection takes no new streams.
    pub(crate) fn is_going_away(&self) -> bool {
        self.going_away.load(Ordering::Acquire)
    }

    /// The connection ended. Returns false when its handshake had not ended yet: the
    /// attempt is told (with `error`) and the end is the attempt's failure, no
    /// connection's close.
    pub(crate) fn ended(&self, error: Option<&str>) -> bool {
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

/// Parses the frame headers of a connection's inbound bytes as they are read.
#[derive(Debug)]
pub(crate) struct FrameWatcher {
    state: Arc<ConnectionState>,
    header: [u8; FRAME_HEADER_LEN],
    header_len: usize,
    /// Payload bytes of the current frame still to skip.
    skip: usize,
    first_frame: bool,
}

impl FrameWatcher {
    pub(crate) fn new(state: Arc<ConnectionState>) -> FrameWatcher {
        FrameWatcher {
            state,
            header: [0; FRAME_HEADER_LEN],
            header_len: 0,
            skip: 0,
            first_frame: true,
        }
    }

    /// Takes the next bytes read from the server.
    pub(crate) fn observe(&mut self, mut bytes: &[u8]) {
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
                self.on_frame_header();
            }
        }
    }

    fn on_frame_header(&mut self) {
        let [l0, l1, l2, kind, flags, ..] = self.header;
        self.skip = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
        // The server's connection preface is a SETTINGS frame (RFC 9113 §3.4); anything
        // else first is a protocol error, which hyper reports as the connection's end.
        if std::mem::take(&mut self.first_frame) && kind == FRAME_SETTINGS && flags & FLAG_ACK == 0
        {
            self.state.settings_received();
        }
        if kind == FRAME_GOAWAY {
            self.state.going_away.store(true, Ordering::Release);
        }
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
}
