//! What the channel reads and writes on the wire besides messages: the `grpc-timeout`
//! header (gRPC's HTTP/2 protocol), an attempt's status from its response headers
//! (a Trailers-Only response) or trailers, the server's retry pushback, request headers
//! as the config selector's [`Metadata`], the Trailers-Only responses the channel
//! answers itself with when it ends an RPC (no route, a failed pick, its deadline), and
//! which HTTP/2 failures of an attempt mean the server refused it unprocessed.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use xds_proto_core::selector::Metadata;

/// The request header that carries the RPC's timeout.
pub(crate) const GRPC_TIMEOUT: &str = "grpc-timeout";

/// The trailer in which a server asks for a retry delay, or for none (A6).
const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";

/// Reads a `grpc-timeout` value: at most 8 ASCII digits and a unit (`H`, `M`, `S`, `m`,
/// `u`, `n`). Anything else is no timeout, as gRPC treats it.
pub(crate) fn parse_grpc_timeout(value: &HeaderValue) -> Option<Duration> {
    let bytes = value.as_bytes();
    let (digits, unit) = bytes.split_at(bytes.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(amount * 3600),
        b"M" => Duration::from_secs(amount * 60),
        b"S" => Duration::from_secs(amount),
        b"m" => Duration::from_millis(amount),
        b"u" => Duration::from_micros(amount),
        b"n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Writes a `grpc-timeout` value: the finest unit whose amount fits in 8 digits,
/// rounded up so that the server never sees a shorter timeout than the channel keeps.
pub(crate) fn encode_grpc_timeout(timeout: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let nanos = timeout.as_nanos();
    let units: [(u128, &str); 6] = [
        (1, "n"),
        (1_000, "u"),
        (1_000_000, "m"),
        (1_000_000_000, "S"),
        (60_000_000_000, "M"),
        (3_600_000_000_000, "H"),
    ];
    let (amount, unit) = units
        .iter()
        .map(|&(per, unit)| (nanos.div_ceil(per), unit))
        .find(|&(amount, _)| amount <= MAX)
        .unwrap_or((MAX, "H"));
    HeaderValue::from_str(&format!("{amount}{unit}")).expect("digits and a unit letter")
}

/// The gRPC status code in a header map (a Trailers-Only response's headers, or
/// trailers), if it carries one.
pub(crate) fn status_code(headers: &HeaderMap) -> Option<tonic::Code> {
    let value = headers.get("grpc-status")?;
    Some(tonic::Code::from_bytes(value.as_bytes()))
}

/// What a server's trailers say about retrying (A6): `None` when they say nothing,
/// `Some(None)` when they forbid retrying (a negative or malformed value), and
/// `Some(Some(delay))` for the delay they ask for.
pub(crate) fn retry_pushback(headers: &HeaderMap) -> Option<Option<Duration>> {
    let value = headers.get(RETRY_PUSHBACK)?;
    let millis = value.to_str().ok().and_then(|v| v.parse::<u64>().ok());
    Some(millis.map(Duration::from_millis))
}

/// Whether an attempt failed because the server's HTTP/2 library refused its stream
/// before the application saw it (A6's transparent retry; gRPC-Go's "unprocessed"):
/// the server reset the stream with REFUSED_STREAM, or sent a GOAWAY whose last stream
/// id is below the stream's. h2 fails with the remote GOAWAY exactly those streams (and
/// the streams opened after it); the streams it lets finish end otherwise. hyper keeps
/// h2's error as the source of its own.
pub(crate) fn refused_unprocessed(error: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(h2) = cause.downcast_ref::<h2::Error>() {
            let refused = h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
            return h2.is_remote() && (refused || h2.is_go_away());
        }
        source = cause.source();
    }
    false
}

/// The status of an HTTP response that is no gRPC response (gRPC's HTTP to gRPC
/// status mapping), `None` for 200.
pub(crate) fn http_status_code(status: http::StatusCode) -> Option<tonic::Code> {
    Some(match status.as_u16() {
        200 => return None,
        400 => tonic::Code::Internal,
        401 => tonic::Code::Unauthenticated,
        403 => tonic::Code::PermissionDenied,
        404 => tonic::Code::Unimplemented,
        429 | 502..=504 => tonic::Code::Unavailable,
        _ => tonic::Code::Unknown,
    })
}

/// A Trailers-Only response ending the RPC with `status`, as a server would send it:
/// tonic's client reads the status from the headers.
pub(crate) fn trailers_only<B: Default>(status: tonic::Status) -> http::Response<B> {
    status.into_http()
}

/// Converts the core's status (from the config selector) into tonic's.
pub(crate) fn tonic_status(status: &xds_proto_core::Status) -> tonic::Status {
    tonic::Status::new(tonic::Code::from(status.code.0), status.message.to_string())
}

/// Request headers as the config selector's route matchers read them: every value of a
/// name, in order; values that are not visible ASCII (binary `-bin` metadata) are
/// skipped.
pub(crate) struct HeaderMetadata<'a>(pub(crate) &'a HeaderMap);

impl Metadata for HeaderMetadata<'_> {
    fn for_each_value<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str)) {
        for value in self.0.get_all(name) {
            if let Ok(value) = value.to_str() {
                f(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_round_trip_and_never_shrink() {
        let parse = |s: &str| parse_grpc_timeout(&HeaderValue::from_str(s).unwrap());
        assert_eq!(parse("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse("123456789n"), None, "more than 8 digits");
        assert_eq!(parse("10x"), None);
        assert_eq!(parse("m"), None);
        assert_eq!(parse("-1S"), None);
        for timeout in [
            Duration::from_nanos(1),
            Duration::from_millis(250),
            Duration::from_nanos(123_456_789_123),
            Duration::from_secs(86_400 * 3),
        ] {
            let back = parse_grpc_timeout(&encode_grpc_timeout(timeout)).unwrap();
            assert!(back >= timeout, "{timeout:?} came back as {back:?}");
            assert!(back - timeout <= timeout / 1000 + Duration::from_nanos(1));
        }
        assert_eq!(encode_grpc_timeout(Duration::from_millis(250)), "250000u");
    }

    #[test]
    fn statuses_and_pushback_are_read_from_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(status_code(&headers), None);
        assert_eq!(retry_pushback(&headers), None);
        headers.insert("grpc-status", HeaderValue::from_static("14"));
        headers.insert(RETRY_PUSHBACK, HeaderValue::from_static("30"));
        assert_eq!(status_code(&headers), Some(tonic::Code::Unavailable));
        assert_eq!(
            retry_pushback(&headers),
            Some(Some(Duration::from_millis(30)))
        );
        headers.insert(RETRY_PUSHBACK, HeaderValue::from_static("-1"));
        assert_eq!(retry_pushback(&headers), Some(None));
        assert_eq!(
            http_status_code(http::StatusCode::SERVICE_UNAVAILABLE),
            Some(tonic::Code::Unavailable)
        );
        assert_eq!(http_status_code(http::StatusCode::OK), None);
    }

    #[test]
    fn header_metadata_yields_every_text_value() {
        let mut headers = HeaderMap::new();
        headers.append("x-user", HeaderValue::from_static("alice"));
        headers.append("x-user", HeaderValue::from_static("bob"));
        headers.append("x-bin", HeaderValue::from_bytes(&[0xff, 0xfe]).unwrap());
        let mut seen = Vec::new();
        HeaderMetadata(&headers).for_each_value("x-user", &mut |v| seen.push(v.to_owned()));
        HeaderMetadata(&headers).for_each_value("x-bin", &mut |v| seen.push(v.to_owned()));
        assert_eq!(seen, ["alice", "bob"]);
    }
}
