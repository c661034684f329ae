//! gRPC status codes and the errors watchers are told, with one constructor per
//! failure so that every path words its message the same way.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A gRPC status code, kept as its wire value so that codes unknown today survive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Code(pub i32);

impl Code {
    /// OK.
    pub const OK: Code = Code(0);
    /// CANCELLED.
    pub const CANCELLED: Code = Code(1);
    /// UNKNOWN.
    pub const UNKNOWN: Code = Code(2);
    /// INVALID_ARGUMENT.
    pub const INVALID_ARGUMENT: Code = Code(3);
    /// DEADLINE_EXCEEDED.
    pub const DEADLINE_EXCEEDED: Code = Code(4);
    /// NOT_FOUND.
    pub const NOT_FOUND: Code = Code(5);
    /// ALREADY_EXISTS.
    pub const ALREADY_EXISTS: Code = Code(6);
    /// PERMISSION_DENIED.
    pub const PERMISSION_DENIED: Code = Code(7);
    /// RESOURCE_EXHAUSTED.
    pub const RESOURCE_EXHAUSTED: Code = Code(8);
    /// FAILED_PRECONDITION.
    pub const FAILED_PRECONDITION: Code = Code(9);
    /// ABORTED.
    pub const ABORTED: Code = Code(10);
    /// OUT_OF_RANGE.
    pub const OUT_OF_RANGE: Code = Code(11);
    /// UNIMPLEMENTED.
    pub const UNIMPLEMENTED: Code = Code(12);
    /// INTERNAL.
    pub const INTERNAL: Code = Code(13);
    /// UNAVAILABLE.
    pub const UNAVAILABLE: Code = Code(14);
    /// DATA_LOSS.
    pub const DATA_LOSS: Code = Code(15);
    /// UNAUTHENTICATED.
    pub const UNAUTHENTICATED: Code = Code(16);

    /// The canonical upper-case name; `UNKNOWN` for a value outside 0..=16 (as gRPC
    /// maps codes it does not know). [`Display`](fmt::Display) shows such a value as
    /// `CODE(n)`.
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 17] = [
            "OK",
            "CANCELLED",
            "UNKNOWN",
            "INVALID_ARGUMENT",
            "DEADLINE_EXCEEDED",
            "NOT_FOUND",
            "ALREADY_EXISTS",
            "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED",
            "FAILED_PRECONDITION",
            "ABORTED",
            "OUT_OF_RANGE",
            "UNIMPLEMENTED",
            "INTERNAL",
            "UNAVAILABLE",
            "DATA_LOSS",
            "UNAUTHENTICATED",
        ];
        usize::try_from(self.0)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("UNKNOWN")
    }

    /// Whether this is one of the 17 codes gRPC defines.
    pub fn is_known(self) -> bool {
        (0..=16).contains(&self.0)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_known() {
            f.write_str(self.name())
        } else {
            write!(f, "CODE({})", self.0)
        }
    }
}

/// A gRPC status: a code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// The message.
    pub message: String,
}

impl Status {
    /// A status with the given code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Status {}

/// What kind of failure an [`XdsError`] reports, for programs that react to it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The resource does not exist: the timer fired, the server said NOT_FOUND, or a
    /// deletion was applied.
    DoesNotExist,
    /// The does-not-exist timer fired on a server with `resource_timer_is_transient_error`.
    Timeout,
    /// The server sent the resource and it failed validation (it was NACKed).
    Invalid,
    /// The server omitted a cached LDS/CDS resource from a SotW response and the client
    /// kept the cached value (the default of gRFC A88).
    DeletionIgnored,
    /// The ADS stream or channel to the server failed.
    Connectivity,
    /// The server reported an error for this resource in `resource_errors` (TP3).
    ServerReported,
}

/// An error delivered to a watcher, shaped as a gRPC status with a kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdsError {
    /// The kind of failure.
    pub kind: ErrorKind,
    /// The status a data plane would fail RPCs with, with a message naming the
    /// resource and the server.
    pub status: Status,
}

impl XdsError {
    /// Whether the server reported this error in `resource_errors` (TP3), which CSDS
    /// shows as RECEIVED_ERROR: every [`ErrorKind::ServerReported`], and the
    /// [`ErrorKind::DoesNotExist`] of a server-reported NOT_FOUND (kept of that kind
    /// because it means what a does-not-exist means, A88). A tool that says what
    /// happened (the CLI) tells the two does-not-exists apart by it.
    pub fn is_server_reported(&self) -> bool {
        self.kind == ErrorKind::ServerReported
            || (self.kind == ErrorKind::DoesNotExist
                && self.status.message.contains(REPORTED_AN_ERROR))
    }
}

/// What [`XdsError::server_reported`]'s message says after the server's quoted URI,
/// and no other constructor's does (a server URI holds no quote or space).
const REPORTED_AN_ERROR: &str = "\" reported an error for ";

impl fmt::Display for XdsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.status.fmt(f)
    }
}

impl std::error::Error for XdsError {}

/// What every error a watcher is told ends with: the client's node ID, worded as
/// C-core words it (` (node ID:my-node)`), so that an operator can find the client in
/// the control plane's logs. gRPC-Go says the same as a prefix (`[xDS node id:
/// my-node]: ...`); we follow C-core. Nothing is added when the bootstrap gives no
/// node ID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct NodeTag(Option<Arc<str>>);

impl NodeTag {
    /// The tag of the node `id`.
    pub(super) fn new(id: &str) -> NodeTag {
        NodeTag((!id.is_empty()).then(|| Arc::from(format!(" (node ID:{id})"))))
    }

    /// No tag: for a message recorded for CSDS, which names the node on its own.
    pub(super) const NONE: NodeTag = NodeTag(None);

    fn append(&self, mut message: String) -> String {
        if let Some(tag) = &self.0 {
            message.push_str(tag);
        }
        message
    }
}

/// The messages are part of the contract (tests and operators read them): each
/// constructor words one failure, naming the resource and the server, and ends with
/// the node's [`NodeTag`].
impl XdsError {
    fn new(node: &NodeTag, kind: ErrorKind, code: Code, message: String) -> XdsError {
        XdsError {
            kind,
            status: Status::new(code, node.append(message)),
        }
    }

    /// The same error, its message ending with `node`'s tag (made with
    /// [`NodeTag::NONE`] to record its message untagged first).
    pub(super) fn tagged(mut self, node: &NodeTag) -> XdsError {
        self.status.message = node.append(self.status.message);
        self
    }

    /// The channel or stream to a server failed.
    pub(super) fn connectivity(node: &NodeTag, server_uri: &str, reason: &str) -> XdsError {
        XdsError::new(
            node,
            ErrorKind::Connectivity,
            Code::UNAVAILABLE,
            format!("xDS channel for server {server_uri:?}: {reason}"),
        )
    }

    /// The resource is known not to exist, for the reason `why`.
    pub(super) fn does_not_exist(
        node: &NodeTag,
        type_url: &str,
        name: &str,
        why: &str,
    ) -> XdsError {
        XdsError::new(
            node,
            ErrorKind::DoesNotExist,
            Code::NOT_FOUND,
            format!("{} {name:?} does not exist: {why}", short_type(type_url)),
        )
    }

    /// The does-not-exist timer ran out on a server that treats it as transient.
    pub(super) fn timeout(
        node: &NodeTag,
        type_url: &str,
        name: &str,
        server_uri: &str,
        timeout: Duration,
    ) -> XdsError {
        XdsError::new(
            node,
            ErrorKind::Timeout,
            Code::UNAVAILABLE,
            format!(
                "timed out after {timeout:?} waiting for {} {name:?} from xDS server {server_uri:?}",
                short_type(type_url),
            ),
        )
    }

    /// The server sent the resource and it failed validation.
    pub(super) fn invalid(
        node: &NodeTag,
        type_url: &str,
        name: &str,
        server_uri: &str,
        version: &str,
        message: &str,
    ) -> XdsError {
        XdsError::new(
            node,
            ErrorKind::Invalid,
            Code::UNAVAILABLE,
            format!(
                "xDS server {server_uri:?} sent an invalid {} {name:?} (version {version:?}): {message}",
                short_type(type_url),
            ),
        )
    }

    /// The server reported `status` for the resource in `resource_errors` (TP3);
    /// NOT_FOUND means it does not exist.
    pub(super) fn server_reported(
        node: &NodeTag,
        type_url: &str,
        name: &str,
        server_uri: &str,
        status: &Status,
    ) -> XdsError {
        let kind = if status.code == Code::NOT_FOUND {
            ErrorKind::DoesNotExist
        } else {
            ErrorKind::ServerReported
        };
        XdsError::new(
            node,
            kind,
            status.code,
            format!(
                "xDS server {server_uri:?}{}{} {name:?}: {status}",
                &REPORTED_AN_ERROR[1..],
                short_type(type_url),
            ),
        )
    }

    /// The server omitted a cached resource from a SotW response; the client keeps it.
    pub(super) fn deletion_ignored(
        node: &NodeTag,
        type_url: &str,
        name: &str,
        server_uri: &str,
    ) -> XdsError {
        XdsError::new(
            node,
            ErrorKind::DeletionIgnored,
            Code::NOT_FOUND,
            format!(
                "xDS server {server_uri:?} no longer sends {} {name:?}; keeping the cached value",
                short_type(type_url)
            ),
        )
    }
}

/// `type.googleapis.com/envoy.config.listener.v3.Listener` → `Listener`.
pub(super) fn short_type(type_url: &str) -> &str {
    type_url.rsplit(['.', '/']).next().unwrap_or(type_url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names() {
        assert_eq!(Code::UNAVAILABLE.name(), "UNAVAILABLE");
        assert_eq!(Code(42).name(), "UNKNOWN");
        assert_eq!(Code(42).to_string(), "CODE(42)");
        assert_eq!(Code::DATA_LOSS.to_string(), "DATA_LOSS");
        assert_eq!(short_type(crate::resource::type_url::CLUSTER), "Cluster");
    }

    /// Every constructor ends its message with the node's tag, worded as C-core's
    /// ` (node ID:...)`; an empty node ID adds nothing.
    #[test]
    fn every_error_ends_with_the_node_id() {
        let node = NodeTag::new("my-node");
        let url = crate::resource::type_url::CLUSTER;
        let status = Status::new(Code::NOT_FOUND, "gone");
        let errors = [
            XdsError::connectivity(&node, "xds:443", "refused"),
            XdsError::does_not_exist(&node, url, "c", "removed"),
            XdsError::timeout(&node, url, "c", "xds:443", Duration::from_secs(30)),
            XdsError::invalid(&node, url, "c", "xds:443", "1", "bad"),
            XdsError::server_reported(&node, url, "c", "xds:443", &status),
            XdsError::deletion_ignored(&node, url, "c", "xds:443"),
            XdsError::does_not_exist(&NodeTag::NONE, url, "c", "removed").tagged(&node),
        ];
        let reported: Vec<bool> = errors.iter().map(XdsError::is_server_reported).collect();
        assert_eq!(reported, [false, false, false, false, true, false, false]);
        let denied = Status::new(Code::PERMISSION_DENIED, "no");
        assert!(
            XdsError::server_reported(&node, url, "c", "xds:443", &denied).is_server_reported()
        );
        for e in errors {
            assert!(e.status.message.ends_with(" (node ID:my-node)"), "{e}");
            assert_eq!(e.status.message.matches("node ID").count(), 1, "{e}");
        }
        assert_eq!(
            XdsError::connectivity(&NodeTag::new(""), "xds:443", "refused")
                .status
                .message,
            "xDS channel for server \"xds:443\": refused"
        );
    }
}
