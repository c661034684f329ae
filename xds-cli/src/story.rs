//! The transport's story as the CLI tells it from the client's channel events: which
//! server is in use, when connectivity is lost, when a fallback server takes over, and
//! which server recovered. Each event makes at most one line.

use std::collections::BTreeSet;
use std::sync::Arc;

use xds_adapter_tokio::xds_proto_core::{Code, Status, StreamId};
use xds_adapter_tokio::{ChannelEvent, DeltaSent};

use crate::describe::short_type;

/// What the channel events have told so far.
#[derive(Default)]
pub(crate) struct TransportStory {
    verbose: bool,
    /// The server whose response came last: the one serving the resources.
    in_use: Option<Arc<str>>,
    /// Servers whose connection or stream failed and that have not responded since.
    down: BTreeSet<Arc<str>>,
    /// Streams that started (a stream that never did failed to connect, which the
    /// connect failure already reported).
    started: BTreeSet<StreamId>,
}

/// One event's part of the story.
pub(crate) struct Told {
    /// The line to print, if any.
    pub(crate) line: Option<String>,
    /// Connectivity came back: per-resource "unreachable" errors are over.
    pub(crate) recovered: bool,
}

impl TransportStory {
    /// A story that also tells every subscription, ACK and closed connection (`verbose`).
    pub(crate) fn new(verbose: bool) -> TransportStory {
        TransportStory {
            verbose,
            ..TransportStory::default()
        }
    }

    /// Whether no server is serving: the one in use is down (or, before any response,
    /// some server is).
    fn lost(&self) -> bool {
        match &self.in_use {
            Some(server) => self.down.contains(server),
            None => !self.down.is_empty(),
        }
    }

    /// The server that keeps serving while `server` fails: the one in use, when it is
    /// another one and up. Without one, the failure cuts the client off.
    fn serving_instead(&self, server: &str) -> Option<Arc<str>> {
        (self.in_use.clone()).filter(|s| &**s != server && !self.down.contains(s))
    }

    /// The line (if any) that tells `e`.
    pub(crate) fn tell(&mut self, e: &ChannelEvent) -> Told {
        let mut recovered = false;
        let line = match e {
            ChannelEvent::StreamRequested {
                server_uri, stream, ..
            } => (self.verbose || !self.lost())
                .then(|| format!("server {server_uri}: opening ADS {stream}")),
            ChannelEvent::Connecting { server_uri, .. } => self
                .verbose
                .then(|| format!("server {server_uri}: connecting")),
            ChannelEvent::Connected {
                server_uri,
                reused: false,
                ..
            } => Some(if self.in_use.is_none() {
                format!("server {server_uri}: connected; this is the xDS server in use")
            } else {
                format!("server {server_uri}: connected")
            }),
            ChannelEvent::StreamStarted { stream, .. } => {
                self.started.insert(*stream);
                None
            }
            ChannelEvent::ConnectFailed {
                server_uri, reason, ..
            } => Some(self.connect_failed(server_uri, reason)),
            ChannelEvent::StreamClosed {
                server_uri,
                stream,
                status,
                by_client,
                ..
            } => {
                if !self.started.remove(stream) {
                    return Told {
                        line: None,
                        recovered,
                    }; // never started: the connect failure said why
                }
                Some(self.stream_closed(server_uri, status, *by_client))
            }
            ChannelEvent::ResponseReceived { server_uri, .. } => {
                recovered = self.lost();
                self.responded(server_uri)
            }
            ChannelEvent::RequestSent {
                type_url,
                version,
                nonce,
                resource_names,
                nack,
                delta,
                ..
            } => match nack {
                Some(detail) => Some(nack_line(type_url, version, nonce, detail, delta.is_some())),
                None => self.verbose.then(|| {
                    request_line(type_url, version, nonce, resource_names, delta.as_ref())
                }),
            },
            ChannelEvent::ConnectionClosed {
                server_uri,
                error: Some(error),
                ..
            } if self.verbose => Some(format!("server {server_uri}: connection closed: {error}")),
            _ => None,
        };
        Told { line, recovered }
    }

    /// The line for a stream that had started and closed.
    fn stream_closed(&mut self, server_uri: &Arc<str>, status: &Status, by_client: bool) -> String {
        if by_client {
            format!("server {server_uri}: ADS stream {status}")
        } else if status.code != Code::OK && !self.down.contains(server_uri) {
            self.down.insert(server_uri.clone());
            match self.serving_instead(server_uri) {
                Some(in_use) => format!(
                    "server {server_uri}: ADS stream failed: {status}; {in_use} stays in use"
                ),
                None => format!("CONNECTIVITY LOST: ADS stream to {server_uri} failed: {status}"),
            }
        } else {
            format!("server {server_uri}: ADS stream closed: {status}")
        }
    }

    fn connect_failed(&mut self, server: &Arc<str>, reason: &str) -> String {
        if self.down.contains(server) {
            return format!("server {server}: reconnect failed: {reason}");
        }
        self.down.insert(server.clone());
        match self.serving_instead(server) {
            Some(in_use) => {
                format!("server {server}: cannot connect: {reason}; {in_use} stays in use")
            }
            None => format!("CONNECTIVITY LOST: cannot connect to {server}: {reason}"),
        }
    }

    /// `server` responded: it is the server in use from now on. Says so when that is
    /// news: a server that recovered, or a switch to another server.
    fn responded(&mut self, server: &Arc<str>) -> Option<String> {
        let recovered = self.down.remove(server);
        let previous = self.in_use.replace(server.clone());
        let switched = previous.as_ref().is_some_and(|p| p != server);
        let previous = previous.unwrap_or_else(|| server.clone());
        if recovered && switched {
            Some(format!(
                "CONNECTIVITY RECOVERED: server {server} is responding again; it is the xDS server in use again (instead of {previous})"
            ))
        } else if recovered {
            Some(format!(
                "CONNECTIVITY RECOVERED: server {server} is responding again; it is the xDS server in use"
            ))
        } else if switched && self.down.contains(&previous) {
            Some(format!(
                "FALLBACK: server {server} is responding; it is the xDS server in use while {previous} is unreachable"
            ))
        } else if switched {
            Some(format!("server {server} is now the xDS server in use"))
        } else {
            None
        }
    }
}

/// The line for a NACK: on a delta stream it names the response only (a delta NACK
/// keeps no version).
fn nack_line(type_url: &str, version: &str, nonce: &str, detail: &str, delta: bool) -> String {
    let t = short_type(type_url);
    if delta {
        format!("NACK {t} (response {nonce}): {detail}")
    } else {
        format!("NACK {t} (keeping version {version:?}, response {nonce}): {detail}")
    }
}

/// The verbose line for a request that is no NACK: an ACK, or a subscription change.
fn request_line(
    type_url: &str,
    version: &str,
    nonce: &str,
    resource_names: &[Arc<str>],
    delta: Option<&DeltaSent>,
) -> String {
    let t = short_type(type_url);
    let mut line = if !nonce.is_empty() && delta.is_some() {
        format!("ACK {t} ({nonce})")
    } else if !nonce.is_empty() {
        format!("ACK {t} version {version} ({nonce})")
    } else {
        format!("subscribe {t} {resource_names:?}")
    };
    if let Some(delta) = delta {
        if !nonce.is_empty() && !resource_names.is_empty() {
            line.push_str(&format!(", subscribe {resource_names:?}"));
        }
        if !delta.unsubscribe.is_empty() {
            line.push_str(&format!(", unsubscribe {:?}", delta.unsubscribe));
        }
        if delta.initial_resource_versions > 0 {
            let held = delta.initial_resource_versions;
            line.push_str(&format!(" (holding {held} from an earlier stream)"));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use xds_adapter_tokio::xds_proto_core::ServerId;

    use super::*;

    const A: &str = "primary:443";
    const B: &str = "fallback:443";

    fn server(uri: &str) -> (ServerId, Arc<str>) {
        (ServerId::from_raw(usize::from(uri == B)), Arc::from(uri))
    }

    fn started(uri: &str, stream: u64) -> ChannelEvent {
        let (server, server_uri) = server(uri);
        let stream = StreamId::from_raw(stream);
        ChannelEvent::StreamStarted {
            server,
            server_uri,
            stream,
        }
    }

    fn response(uri: &str, stream: u64) -> ChannelEvent {
        let (server, server_uri) = server(uri);
        let stream = StreamId::from_raw(stream);
        ChannelEvent::ResponseReceived {
            server,
            server_uri,
            stream,
            bytes: 100,
        }
    }

    fn closed(uri: &str, stream: u64, status: Status, by_client: bool) -> ChannelEvent {
        let (server, server_uri) = server(uri);
        let stream = StreamId::from_raw(stream);
        ChannelEvent::StreamClosed {
            server,
            server_uri,
            stream,
            status,
            by_client,
        }
    }

    fn connect_failed(uri: &str) -> ChannelEvent {
        let (server, server_uri) = server(uri);
        let reason = "connection refused".to_string();
        ChannelEvent::ConnectFailed {
            server,
            server_uri,
            reason,
        }
    }

    /// The primary fails, the fallback serves while the primary keeps failing, then the
    /// primary recovers: each line names the server it is about and which one is in use.
    #[test]
    fn fallback_names_the_server_in_use_and_the_one_that_recovered() {
        let mut story = TransportStory::new(false);
        let mut lines = Vec::new();
        let unavailable = Status::new(Code::UNAVAILABLE, "server went away");
        let released = Status::new(Code::CANCELLED, "closed by the client");
        for e in [
            started(A, 1),
            response(A, 1),
            closed(A, 1, unavailable, false),
            started(B, 2),
            response(B, 2),
            connect_failed(A),
            connect_failed(A),
            response(B, 2),
            started(A, 3),
            response(A, 3),
            closed(B, 2, released, true),
        ] {
            lines.extend(story.tell(&e).line);
        }
        let expected = [
            format!("CONNECTIVITY LOST: ADS stream to {A} failed: UNAVAILABLE: server went away"),
            format!(
                "FALLBACK: server {B} is responding; it is the xDS server in use while {A} is unreachable"
            ),
            format!("server {A}: reconnect failed: connection refused"),
            format!("server {A}: reconnect failed: connection refused"),
            format!(
                "CONNECTIVITY RECOVERED: server {A} is responding again; it is the xDS server in use again (instead of {B})"
            ),
            format!("server {B}: ADS stream CANCELLED: closed by the client"),
        ];
        assert_eq!(lines, expected);
    }

    /// One server that goes away and comes back: lost once, then recovered.
    #[test]
    fn a_single_server_is_lost_once_and_recovers() {
        let mut story = TransportStory::new(false);
        let mut told = Vec::new();
        for e in [
            started(A, 1),
            response(A, 1),
            closed(A, 1, Status::new(Code::UNAVAILABLE, "gone"), false),
            connect_failed(A),
            started(A, 2),
            response(A, 2),
        ] {
            let t = story.tell(&e);
            told.push((t.line, t.recovered));
        }
        let lost = format!("CONNECTIVITY LOST: ADS stream to {A} failed: UNAVAILABLE: gone");
        let back = format!(
            "CONNECTIVITY RECOVERED: server {A} is responding again; it is the xDS server in use"
        );
        let refused = format!("server {A}: reconnect failed: connection refused");
        assert_eq!(
            told,
            [
                (None, false),
                (None, false),
                (Some(lost), false),
                (Some(refused), false),
                (None, false),
                (Some(back), true),
            ]
        );
    }

    fn delta_request(
        nonce: &str,
        subscribe: &[&str],
        unsubscribe: &[&str],
        held: usize,
        nack: Option<&str>,
    ) -> ChannelEvent {
        let (server, server_uri) = server(A);
        let mut delta = xds_adapter_tokio::DeltaSent::default();
        delta.unsubscribe = unsubscribe.iter().map(|n| Arc::from(*n)).collect();
        delta.initial_resource_versions = held;
        ChannelEvent::RequestSent {
            server,
            server_uri,
            stream: StreamId::from_raw(1),
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            version: String::new(),
            nonce: nonce.to_string(),
            resource_names: subscribe.iter().map(|n| Arc::from(*n)).collect(),
            nack: nack.map(str::to_string),
            delta: Some(delta),
        }
    }

    /// Delta requests read as what they change: the names a new stream holds, an ACK
    /// that also subscribes and unsubscribes, a NACK without a version.
    #[test]
    fn delta_requests_say_what_they_change() {
        let mut story = TransportStory::new(true);
        let lines: Vec<String> = [
            delta_request("", &["a", "b"], &[], 1, None),
            delta_request("n-2", &["c"], &["a"], 0, None),
            delta_request("n-3", &[], &[], 0, Some("bad cluster")),
        ]
        .iter()
        .filter_map(|e| story.tell(e).line)
        .collect();
        assert_eq!(
            lines,
            [
                r#"subscribe CDS ["a", "b"] (holding 1 from an earlier stream)"#,
                r#"ACK CDS (n-2), subscribe ["c"], unsubscribe ["a"]"#,
                "NACK CDS (response n-3): bad cluster",
            ]
        );
    }
}
