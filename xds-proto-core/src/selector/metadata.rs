//! Request metadata as route and hash-policy matchers see it: the [`Metadata`] trait an
//! adapter implements over its header map, and [`header_value`], which applies gRPC's
//! visibility rules (only custom, non-binary metadata; `content-type` fixed) and joins
//! repeated values.

/// Request metadata as the selector reads it.
///
/// Implemented for slices, arrays and vectors of `(name, value)` pairs; an adapter with
/// its own header map implements it in a few lines.
pub trait Metadata {
    /// Calls `f` with every value of the header `name`, in order. `name` is the header
    /// name of a matcher (gRPC metadata keys are lower-case); implementations compare
    /// names ASCII case-insensitively.
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str));
}

impl<K: AsRef<str>, V: AsRef<str>> Metadata for [(K, V)] {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        for (k, v) in self {
            if k.as_ref().eq_ignore_ascii_case(name) {
                f(v.as_ref());
            }
        }
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> Metadata for [(K, V); N] {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        self[..].for_each_value(name, f);
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Metadata for Vec<(K, V)> {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        self[..].for_each_value(name, f);
    }
}

impl<T: Metadata + ?Sized> Metadata for &T {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        (**self).for_each_value(name, f);
    }
}

/// The value a header matcher sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderValue<'a> {
    /// The header is absent (or hidden from matchers, see [`header_value`]).
    Absent,
    /// The header has one value.
    One(&'a str),
    /// The header has several values, joined with `,` (the only case that allocates).
    Joined(String),
}

impl HeaderValue<'_> {
    /// The value, if present.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            HeaderValue::Absent => None,
            HeaderValue::One(v) => Some(v),
            HeaderValue::Joined(v) => Some(v),
        }
    }
}

/// Whether header matchers can see the header `name` at all.
///
/// gRFC A28 (Picking): "only custom metadata is considered during header matching, unlike
/// in Envoy, where all headers (including HTTP/2 pseudo-headers) are included", because
/// the pick happens above the transport. In gRPC's HTTP/2 protocol (PROTOCOL-HTTP2.md) a
/// request's headers are the call definition followed by custom metadata; the call
/// definition is the pseudo-headers (`:method`, `:scheme`, `:path`, `:authority`), `te`,
/// `grpc-timeout`, `content-type`, `grpc-message-type`, `grpc-encoding`,
/// `grpc-accept-encoding` and `user-agent`, and the other `grpc-` names are reserved for
/// gRPC, never custom metadata. Binary (`-bin`) custom metadata is left out too, as gRPC
/// implementations do (C-core's `GetHeaderValue`, grpc-go's route matcher). The one
/// call-definition header matchers do see is `content-type` ([`header_value`]).
fn visible_to_matchers(name: &str) -> bool {
    let bytes = name.as_bytes();
    let binary = bytes.len() >= 4 && bytes[bytes.len() - 4..].eq_ignore_ascii_case(b"-bin");
    let grpc = bytes.len() >= 5 && bytes[..5].eq_ignore_ascii_case(b"grpc-");
    !(binary
        || grpc
        || bytes.first() == Some(&b':')
        || name.eq_ignore_ascii_case("te")
        || name.eq_ignore_ascii_case("user-agent"))
}

/// The value of header `name` as gRPC's route and hash-policy matchers see it:
/// - only custom metadata is visible (gRFC A28): pseudo-headers (`:authority`, ...), `te`,
///   `user-agent` and `grpc-` headers (`grpc-timeout`, `grpc-encoding`, ...: gRPC's own)
///   are always absent, whatever the metadata holds;
/// - binary headers (`-bin` suffix) are always absent;
/// - `content-type` is always `application/grpc`;
/// - several values of one header are joined with `,` (no space).
pub fn header_value<'a, M: Metadata + ?Sized>(metadata: &'a M, name: &str) -> HeaderValue<'a> {
    if name.eq_ignore_ascii_case("content-type") {
        return HeaderValue::One("application/grpc");
    }
    if !visible_to_matchers(name) {
        return HeaderValue::Absent;
    }
    let mut value = HeaderValue::Absent;
    metadata.for_each_value(name, &mut |v| {
        value = match std::mem::replace(&mut value, HeaderValue::Absent) {
            HeaderValue::Absent => HeaderValue::One(v),
            HeaderValue::One(first) => {
                let mut joined = String::with_capacity(first.len() + 1 + v.len());
                joined.push_str(first);
                joined.push(',');
                joined.push_str(v);
                HeaderValue::Joined(joined)
            }
            HeaderValue::Joined(mut joined) => {
                joined.push(',');
                joined.push_str(v);
                HeaderValue::Joined(joined)
            }
        };
    });
    value
}
