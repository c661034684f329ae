//! Field-validation helpers every resource decoder shares: the error type that carries a
//! field path ([`FieldError`]), required and optional fields, decoding a nested message
//! or a whole resource with the error text the decoders use, `google.protobuf.Duration`
//! and `FractionalPercent` conversion, `Any` type-URL handling (with `TypedStruct`
//! unwrapping), and the one check of a `SocketAddress` port.

use std::fmt;
use std::time::Duration;

use prost::Message;

use super::DecodeError;
use super::route::TypedConfig;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::r#type::v3 as type_pb;
use crate::pb::google::protobuf as pbuf;

/// A validation error at a field path, built bottom-up: the innermost check names the
/// field, and each enclosing level prepends its own field (`FieldError::at`). Its
/// `Display` is `path: message` (or the message alone at the root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    path: String,
    message: String,
}

impl FieldError {
    /// An error at `path` (relative to the message being validated; may be empty).
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The error for a required field that is absent.
    pub(crate) fn missing(path: impl Into<String>) -> FieldError {
        FieldError::new(path, "field not present")
    }

    /// The same error seen from the enclosing message, whose field `parent` holds the
    /// message being validated.
    pub(crate) fn at(self, parent: impl fmt::Display) -> FieldError {
        let parent = parent.to_string();
        let path = if parent.is_empty() {
            self.path
        } else if self.path.is_empty() {
            parent
        } else if self.path.starts_with('[') {
            format!("{parent}{}", self.path)
        } else {
            format!("{parent}.{}", self.path)
        };
        FieldError {
            path,
            message: self.message,
        }
    }

    /// [`at`](Self::at) for element `index` of the repeated field `field`.
    pub(crate) fn at_index(self, field: &str, index: usize) -> FieldError {
        self.at(format_args!("{field}[{index}]"))
    }

    /// The error for the resource named `name`.
    pub(super) fn into_decode_error(self, name: &str) -> DecodeError {
        DecodeError::named(name, self.to_string())
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The largest valid `google.protobuf.Duration.seconds`.
pub(super) const MAX_DURATION_SECONDS: u64 = 315_576_000_000;

/// Converts a `google.protobuf.Duration`, rejecting negative or out-of-range values.
pub(crate) fn duration(d: &pbuf::Duration) -> Result<Duration, FieldError> {
    let seconds = u64::try_from(d.seconds)
        .ok()
        .filter(|s| *s <= MAX_DURATION_SECONDS)
        .ok_or_else(|| {
            FieldError::new(
                "seconds",
                format!(
                    "value {} must be in the range [0, {MAX_DURATION_SECONDS}]",
                    d.seconds
                ),
            )
        })?;
    let nanos = u32::try_from(d.nanos)
        .ok()
        .filter(|n| *n <= 999_999_999)
        .ok_or_else(|| {
            FieldError::new(
                "nanos",
                format!("value {} must be in the range [0, 999999999]", d.nanos),
            )
        })?;
    Ok(Duration::new(seconds, nanos))
}

/// A required message field: its value, or [`FieldError::missing`] at `field`.
pub(crate) fn required<T>(value: Option<&T>, field: impl Into<String>) -> Result<&T, FieldError> {
    value.ok_or_else(|| FieldError::missing(field))
}

/// Parses an optional field with `parse`, placing its error at `field`; `None` when the
/// field is absent.
pub(crate) fn optional<T, U>(
    value: Option<&T>,
    field: &str,
    parse: impl FnOnce(&T) -> Result<U, FieldError>,
) -> Result<Option<U>, FieldError> {
    value.map(parse).transpose().map_err(|e| e.at(field))
}

/// [`duration`] for an optional field.
pub(super) fn optional_duration(
    d: Option<&pbuf::Duration>,
) -> Result<Option<Duration>, FieldError> {
    d.map(duration).transpose()
}

/// Converts a `FractionalPercent` to parts per million; a numerator above the
/// denominator is clamped to it (so the result is at most 1,000,000).
pub(super) fn fraction_per_million(fp: &type_pb::FractionalPercent) -> Result<u32, FieldError> {
    use type_pb::fractional_percent::DenominatorType;
    let (denominator, scale) = match DenominatorType::try_from(fp.denominator) {
        Ok(DenominatorType::Hundred) => (100, 10_000),
        Ok(DenominatorType::TenThousand) => (10_000, 100),
        Ok(DenominatorType::Million) => (1_000_000, 1),
        Err(_) => {
            return Err(FieldError::new(
                "denominator",
                format!("unknown denominator type {}", fp.denominator),
            ));
        }
    };
    Ok(fp.numerator.min(denominator) * scale)
}

/// The type name in a type URL: the part after the last `/`.
pub(crate) fn type_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

/// Type names of the `TypedStruct` wrappers an extension config may arrive in.
const TYPED_STRUCT_TYPES: &[&str] = &["xds.type.v3.TypedStruct", "udpa.type.v1.TypedStruct"];

/// The part of `xds.type.v3.TypedStruct` / `udpa.type.v1.TypedStruct` needed to learn
/// the wrapped type (the `value` Struct is skipped).
#[derive(Clone, PartialEq, Message)]
struct TypedStructHeader {
    #[prost(string, tag = "1")]
    type_url: String,
}

/// Validates an extension's `Any` and unwraps a `TypedStruct` to learn its real type.
pub(crate) fn typed_config(any: &pbuf::Any) -> Result<TypedConfig, FieldError> {
    check_type_url(&any.type_url).map_err(|e| e.at("type_url"))?;
    if !TYPED_STRUCT_TYPES.contains(&type_name(&any.type_url)) {
        return Ok(TypedConfig {
            type_url: any.type_url.clone(),
            value: any.value.clone(),
            typed_struct: false,
        });
    }
    let header: TypedStructHeader = decode_message(&any.value, "value", "TypedStruct")?;
    check_type_url(&header.type_url).map_err(|e| e.at("value.type_url"))?;
    Ok(TypedConfig {
        type_url: header.type_url,
        value: any.value.clone(),
        typed_struct: true,
    })
}

/// A type URL must be non-empty and have a non-empty type name after its last `/`.
fn check_type_url(type_url: &str) -> Result<(), FieldError> {
    if type_url.is_empty() {
        return Err(FieldError::missing(""));
    }
    match type_url.rfind('/') {
        Some(pos) if pos + 1 < type_url.len() => Ok(()),
        _ => Err(FieldError::new(
            "",
            format!("invalid type URL {type_url:?}"),
        )),
    }
}

/// Calls `f` with many corrupted variants of `bytes` (bit flips, truncations, splices),
/// deterministically, for the decoders' no-panic tests.
#[cfg(test)]
pub(super) fn for_each_mutation(bytes: &[u8], mut f: impl FnMut(&[u8])) {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    if bytes.is_empty() {
        return;
    }
    for _ in 0..2_000 {
        let mut m = bytes.to_vec();
        for _ in 0..=(next() % 4) {
            let len = m.len().max(1) as u64;
            let pos = usize::try_from(next() % len).unwrap_or(0);
            match next() % 4 {
                0 => {
                    if let Some(b) = m.get_mut(pos) {
                        *b ^= 1 << (next() % 8);
                    }
                }
                1 => m.truncate(pos),
                2 => {
                    if let Some(b) = m.get_mut(pos) {
                        *b = next() as u8;
                    }
                }
                _ => {
                    let tail: Vec<u8> = bytes.iter().skip(pos).copied().collect();
                    m.extend_from_slice(&tail);
                }
            }
        }
        f(&m);
    }
}

/// Decodes one whole resource of the message type `message` (e.g. `Cluster`); a failure
/// is an unnamed error, since the name could not be read.
pub(super) fn decode_resource<M: Message + Default>(
    bytes: &[u8],
    message: &str,
) -> Result<M, DecodeError> {
    M::decode(bytes).map_err(|e| DecodeError::unnamed(format!("failed to decode {message}: {e}")))
}

/// Decodes the serialized message `bytes` (an `Any`'s value, usually) as `M`, named
/// `message` in the error, which is at `field`.
pub(crate) fn decode_message<M: Message + Default>(
    bytes: &[u8],
    field: &str,
    message: &str,
) -> Result<M, FieldError> {
    M::decode(bytes).map_err(|e| FieldError::new(field, format!("can't decode {message}: {e}")))
}

/// What a `SocketAddress`'s `port_specifier` holds.
pub(super) enum PortSpecifier {
    /// `port_value`.
    Value(u32),
    /// `named_port`, which gRPC does not support.
    Named,
    /// Neither.
    Unset,
}

impl From<Option<&core_pb::socket_address::PortSpecifier>> for PortSpecifier {
    fn from(port: Option<&core_pb::socket_address::PortSpecifier>) -> PortSpecifier {
        use core_pb::socket_address::PortSpecifier as Pb;
        match port {
            Some(Pb::PortValue(port)) => PortSpecifier::Value(*port),
            Some(Pb::NamedPort(_)) => PortSpecifier::Named,
            None => PortSpecifier::Unset,
        }
    }
}

/// Which `port_value`s an address accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PortRange {
    /// Any port that fits 16 bits, 0 included (endpoints, server listeners).
    Any,
    /// 1 to 65535 (a LOGICAL_DNS host, which must be dialled).
    NonZero,
}

/// The port of a `SocketAddress`: a `port_value` in `range`. Error paths are relative to
/// the `SocketAddress`.
pub(super) fn socket_port(port: PortSpecifier, range: PortRange) -> Result<u16, FieldError> {
    let port = match port {
        PortSpecifier::Value(port) => port,
        PortSpecifier::Named => {
            return Err(FieldError::new(
                "named_port",
                "not supported (use port_value)",
            ));
        }
        PortSpecifier::Unset => return Err(FieldError::missing("port_value")),
    };
    match (u16::try_from(port), range) {
        (Ok(port), PortRange::Any) => Ok(port),
        (Ok(port), PortRange::NonZero) if port != 0 => Ok(port),
        (_, PortRange::Any) => Err(FieldError::new(
            "port_value",
            format!("invalid port {port}"),
        )),
        (_, PortRange::NonZero) => Err(FieldError::new(
            "port_value",
            format!("invalid port {port} (must be in [1, 65535])"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(type_name: &str, msg: &impl Message) -> pbuf::Any {
        pbuf::Any {
            type_url: format!("type.googleapis.com/{type_name}"),
            value: msg.encode_to_vec().into(),
        }
    }

    #[test]
    fn typed_struct_is_unwrapped() {
        let inner = TypedStructHeader {
            type_url: "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"
                .to_owned(),
        };
        let wrapped = any("xds.type.v3.TypedStruct", &inner);
        let cfg = typed_config(&wrapped).unwrap();
        assert!(cfg.typed_struct);
        assert_eq!(
            cfg.type_name(),
            "envoy.extensions.filters.http.fault.v3.HTTPFault"
        );
        assert_eq!(cfg.value, wrapped.value);
        let bad = any("udpa.type.v1.TypedStruct", &TypedStructHeader::default());
        assert_eq!(
            typed_config(&bad).unwrap_err().to_string(),
            "value.type_url: field not present"
        );
    }

    #[test]
    fn socket_ports_keep_each_range_message() {
        let err = |port, range| socket_port(port, range).unwrap_err().to_string();
        assert_eq!(socket_port(PortSpecifier::Value(0), PortRange::Any), Ok(0));
        assert_eq!(
            socket_port(PortSpecifier::Value(65535), PortRange::NonZero),
            Ok(65535)
        );
        assert_eq!(
            err(PortSpecifier::Value(65536), PortRange::Any),
            "port_value: invalid port 65536"
        );
        assert_eq!(
            err(PortSpecifier::Value(0), PortRange::NonZero),
            "port_value: invalid port 0 (must be in [1, 65535])"
        );
        assert_eq!(
            err(PortSpecifier::Named, PortRange::Any),
            "named_port: not supported (use port_value)"
        );
        assert_eq!(
            err(PortSpecifier::Unset, PortRange::NonZero),
            "port_value: field not present"
        );
    }

    #[test]
    fn decode_errors_name_the_message_and_field() {
        let e = decode_message::<pbuf::Duration>(&[0xff], "value", "Duration").unwrap_err();
        assert!(
            e.to_string().starts_with("value: can't decode Duration: "),
            "{e}"
        );
        let e = decode_resource::<pbuf::Duration>(&[0xff], "Duration").unwrap_err();
        assert_eq!(e.name, None);
        assert!(
            e.message.starts_with("failed to decode Duration: "),
            "{e:?}"
        );
    }
}
