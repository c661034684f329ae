//! The `DiscoveryResponse` envelope as the client reads it: the same fields, types and
//! strictness as the generated message, except that each resource's `type_url` stays a
//! slice of the received buffer (checked for UTF-8 as it is read, as the generated
//! decoder does) instead of a new `String`: a 10,000-cluster response makes no
//! per-resource allocation before its bytes are compared with the cache. The same for
//! the delta variant, `DeltaDiscoveryResponse` and its `Resource`s. And how a resource
//! in a `Resource` envelope is named: by the envelope ([`decode_enveloped`]).

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{self, DecodeContext, WireType};

use crate::pb::envoy::config::core::v3::{ControlPlane, Metadata};
use crate::pb::envoy::service::discovery::v3::resource::CacheControl;
use crate::pb::envoy::service::discovery::v3::{self as discovery, ResourceError, ResourceName};
use crate::resource::{self, ResourceTypeInfo, ResourceValue, type_url};

/// `google.protobuf.Any` with its type URL kept as bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Any {
    pub type_url: Bytes,
    pub value: Bytes,
}

/// Type URLs known to be UTF-8, compared before running the UTF-8 check.
const KNOWN_URLS: [&str; 5] = [
    type_url::CLUSTER,
    type_url::CLUSTER_LOAD_ASSIGNMENT,
    type_url::LISTENER,
    type_url::ROUTE_CONFIGURATION,
    type_url::RESOURCE_WRAPPER,
];

impl prost::Message for Any {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.type_url.is_empty() {
            encoding::bytes::encode(1, &self.type_url, buf);
        }
        if !self.value.is_empty() {
            encoding::bytes::encode(2, &self.value, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        match tag {
            1 => {
                encoding::bytes::merge(wire_type, &mut self.type_url, buf, ctx.clone())?;
                let url = &self.type_url[..];
                if KNOWN_URLS.iter().any(|k| k.as_bytes() == url)
                    || std::str::from_utf8(url).is_ok()
                {
                    return Ok(());
                }
                // Not UTF-8: fail exactly as the generated decoder does, by reading
                // the same bytes as a string.
                let mut again = Vec::with_capacity(url.len() + 10);
                encoding::encode_varint(url.len() as u64, &mut again);
                again.extend_from_slice(url);
                encoding::string::merge(
                    WireType::LengthDelimited,
                    &mut String::new(),
                    &mut again.as_slice(),
                    ctx,
                )
            }
            2 => encoding::bytes::merge(wire_type, &mut self.value, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        (if self.type_url.is_empty() {
            0
        } else {
            encoding::bytes::encoded_len(1, &self.type_url)
        }) + if self.value.is_empty() {
            0
        } else {
            encoding::bytes::encoded_len(2, &self.value)
        }
    }

    fn clear(&mut self) {
        self.type_url.clear();
        self.value.clear();
    }
}

/// `envoy.service.discovery.v3.DiscoveryResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct DiscoveryResponse {
    #[prost(string, tag = "1")]
    pub version_info: String,
    #[prost(message, repeated, tag = "2")]
    pub resources: Vec<Any>,
    #[prost(bool, tag = "3")]
    pub canary: bool,
    #[prost(string, tag = "4")]
    pub type_url: String,
    #[prost(string, tag = "5")]
    pub nonce: String,
    #[prost(message, optional, tag = "6")]
    pub control_plane: Option<ControlPlane>,
    #[prost(message, repeated, tag = "7")]
    pub resource_errors: Vec<ResourceError>,
}

/// Decodes a response, rejecting exactly what the generated message rejects; the
/// error is the reason.
pub(super) fn decode(bytes: Bytes) -> Result<DiscoveryResponse, String> {
    <DiscoveryResponse as prost::Message>::decode(bytes).map_err(|e| e.to_string())
}

/// `envoy.service.discovery.v3.Resource`, as a delta response carries each resource.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct DeltaResource {
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(message, optional, tag = "8")]
    pub resource_name: Option<ResourceName>,
    #[prost(string, repeated, tag = "4")]
    pub aliases: Vec<String>,
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(message, optional, tag = "2")]
    pub resource: Option<Any>,
    #[prost(message, optional, tag = "6")]
    pub ttl: Option<crate::pb::google::protobuf::Duration>,
    #[prost(message, optional, tag = "7")]
    pub cache_control: Option<CacheControl>,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<Metadata>,
}

/// `envoy.service.discovery.v3.DeltaDiscoveryResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct DeltaDiscoveryResponse {
    #[prost(string, tag = "1")]
    pub system_version_info: String,
    #[prost(message, repeated, tag = "2")]
    pub resources: Vec<DeltaResource>,
    #[prost(string, tag = "4")]
    pub type_url: String,
    #[prost(string, repeated, tag = "6")]
    pub removed_resources: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub removed_resource_names: Vec<ResourceName>,
    #[prost(string, tag = "5")]
    pub nonce: String,
    #[prost(message, optional, tag = "7")]
    pub control_plane: Option<ControlPlane>,
    #[prost(message, repeated, tag = "9")]
    pub resource_errors: Vec<ResourceError>,
}

/// Decodes a delta response, rejecting exactly what the generated message rejects.
pub(super) fn decode_delta(bytes: Bytes) -> Result<DeltaDiscoveryResponse, String> {
    <DeltaDiscoveryResponse as prost::Message>::decode(bytes).map_err(|e| e.to_string())
}

/// Unwraps an optional `envoy.service.discovery.v3.Resource` and decodes one resource.
/// `type_matches`: whether `any.type_url` is the type's URL (the caller compared them).
/// A wrapped resource is named by its wrapper ([`decode_enveloped`]).
pub(super) fn decode_one(
    ty: &ResourceTypeInfo,
    context: &resource::DecodeContext<'_>,
    any: Any,
    type_matches: bool,
) -> Result<(String, ResourceValue, Bytes), resource::DecodeError> {
    if any.type_url != resource::type_url::RESOURCE_WRAPPER.as_bytes() {
        return decode_payload(ty, context, any, type_matches);
    }
    let wrapper = <discovery::Resource as prost::Message>::decode(any.value).map_err(|e| {
        resource::DecodeError::unnamed(format!("failed to decode Resource wrapper: {e}"))
    })?;
    let inner = wrapper.resource.map(|inner| Any {
        type_url: Bytes::from(inner.type_url.into_bytes()),
        value: inner.value,
    });
    decode_enveloped(ty, context, wrapper.name, inner)
}

/// Decodes a resource that came in a `Resource` envelope: a SotW `Resource` wrapper or
/// a delta response's `Resource`, whose `name` is `envelope_name` (empty when unset).
///
/// The one naming rule of both variants: a non-empty envelope name IS the resource's
/// name, whatever name the payload gives itself (C-core files a wrapped resource under
/// the wrapper's name and never reads the payload's; Envoy does the same for SotW and
/// delta alike). So the value is filed, ACKed and told under that name, and when the
/// payload is missing, does not decode or fails validation, the error goes to that name
/// too: its watchers hear of it and the NACK names it. Only an unnamed envelope takes
/// the payload's name.
pub(super) fn decode_enveloped(
    ty: &ResourceTypeInfo,
    context: &resource::DecodeContext<'_>,
    envelope_name: String,
    payload: Option<Any>,
) -> Result<(String, ResourceValue, Bytes), resource::DecodeError> {
    let name = (!envelope_name.is_empty()).then_some(envelope_name);
    let Some(any) = payload else {
        return Err(resource::DecodeError {
            name,
            message: "Resource has no resource".to_string(),
        });
    };
    let matches = any.type_url == ty.type_url().as_bytes();
    match decode_payload(ty, context, any, matches) {
        Ok((inner, value, raw)) => match name {
            Some(name) => {
                if inner != name {
                    tracing::debug!(
                        name = %name,
                        payload_name = %inner,
                        "resource named by its Resource envelope, not by its payload"
                    );
                }
                Ok((name, value, raw))
            }
            None => Ok((inner, value, raw)),
        },
        Err(e) => Err(resource::DecodeError {
            name: name.or(e.name),
            message: e.message,
        }),
    }
}

/// Decodes one unwrapped resource whose type URL was checked (`type_matches`).
pub(super) fn decode_payload(
    ty: &ResourceTypeInfo,
    context: &resource::DecodeContext<'_>,
    any: Any,
    type_matches: bool,
) -> Result<(String, ResourceValue, Bytes), resource::DecodeError> {
    if !type_matches {
        return Err(resource::DecodeError::unnamed(format!(
            "type URL {:?} does not match the response's {:?}",
            String::from_utf8_lossy(&any.type_url),
            ty.type_url()
        )));
    }
    let (name, value) = ty.decode_in(context, &any.value)?;
    Ok((name, value, any.value))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost::Message;

    use crate::pb::envoy::service::discovery::v3::DiscoveryResponse;

    /// An `Any` whose type_url occurs twice, first as invalid UTF-8: the generated
    /// decoder rejects it even though the last occurrence is valid (found by the
    /// `decode_response` fuzzer).
    #[test]
    fn an_invalid_type_url_occurrence_fails_like_the_generated_decoder() {
        let any = [
            &[0x0a, 0x02, 0xff, 0xfe][..],
            &[0x0a, 0x01, b'a'],
            &[0x12, 0x01, 0x00],
        ]
        .concat();
        let mut response = vec![0x12, any.len() as u8];
        response.extend_from_slice(&any);
        let full = DiscoveryResponse::decode(response.as_slice());
        assert!(full.is_err());
        let lite = super::decode(Bytes::from(response)).unwrap_err();
        assert!(
            lite.contains("DiscoveryResponse.resources")
                && lite.contains("data is not UTF-8 encoded"),
            "{lite}"
        );
    }

    #[test]
    fn a_valid_envelope_reads_the_same_as_the_generated_one() {
        let full = DiscoveryResponse {
            version_info: "1".into(),
            resources: vec![crate::pb::google::protobuf::Any {
                type_url: "type.googleapis.com/x.Y".into(),
                value: Bytes::from_static(b"abc"),
            }],
            canary: true,
            type_url: "type.googleapis.com/x.Y".into(),
            nonce: "n".into(),
            ..Default::default()
        };
        let lite = super::decode(Bytes::from(full.encode_to_vec())).unwrap();
        assert_eq!(lite.version_info, "1");
        assert_eq!(lite.nonce, "n");
        assert!(lite.canary);
        assert_eq!(&lite.resources[0].type_url[..], b"type.googleapis.com/x.Y");
        assert_eq!(&lite.resources[0].value[..], b"abc");
    }

    #[test]
    fn a_delta_envelope_reads_the_same_as_the_generated_one() {
        use crate::pb::envoy::service::discovery::v3::{
            DeltaDiscoveryResponse, Resource, ResourceName,
        };
        let full = DeltaDiscoveryResponse {
            system_version_info: "7".into(),
            resources: vec![Resource {
                name: "a".into(),
                version: "v1".into(),
                aliases: vec!["b".into()],
                resource: Some(crate::pb::google::protobuf::Any {
                    type_url: "type.googleapis.com/x.Y".into(),
                    value: Bytes::from_static(b"abc"),
                }),
                ..Default::default()
            }],
            type_url: "type.googleapis.com/x.Y".into(),
            removed_resources: vec!["gone".into()],
            removed_resource_names: vec![ResourceName {
                name: "gone2".into(),
                dynamic_parameter_constraints: None,
            }],
            nonce: "n".into(),
            ..Default::default()
        };
        let bytes = full.encode_to_vec();
        let lite = super::decode_delta(Bytes::from(bytes.clone())).unwrap();
        assert_eq!(lite.system_version_info, "7");
        assert_eq!(
            (&*lite.resources[0].name, &*lite.resources[0].version),
            ("a", "v1")
        );
        let any = lite.resources[0].resource.as_ref().unwrap();
        assert_eq!(&any.value[..], b"abc");
        assert_eq!(lite.removed_resources, ["gone"]);
        assert_eq!(lite.removed_resource_names[0].name, "gone2");
        assert_eq!(
            lite.encode_to_vec(),
            bytes,
            "the lite message keeps every field"
        );
        // Truncated input fails in both decoders, never panics.
        for cut in 0..bytes.len() {
            let part = &bytes[..cut];
            assert_eq!(
                DeltaDiscoveryResponse::decode(part).is_ok(),
                super::decode_delta(Bytes::copy_from_slice(part)).is_ok()
            );
        }
    }
}
