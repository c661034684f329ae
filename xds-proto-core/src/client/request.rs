//! The request the client emits, [`AdsRequest`], and its wire encoding: written
//! straight from the shared subscription names, byte for byte what the generated
//! `DiscoveryRequest` would write.

use std::sync::Arc;

use crate::pb::envoy::service::discovery::v3 as discovery;

/// A SotW `envoy.service.discovery.v3.DiscoveryRequest` as the client emits it. The
/// resource names are shared with the client's subscription, so an ACK of a
/// 10,000-name subscription copies no names: [`encode`](Self::encode) writes the wire
/// form straight from them, byte for byte what [`to_proto`](Self::to_proto)`().encode()`
/// writes.
#[derive(Clone, Debug, PartialEq)]
pub struct AdsRequest {
    /// The last accepted version of this type from this server (empty at first).
    pub version_info: String,
    /// The node, on a stream's first request only.
    pub node: Option<crate::pb::envoy::config::core::v3::Node>,
    /// The subscribed names, sorted.
    pub resource_names: Arc<[Arc<str>]>,
    /// The resource type.
    pub type_url: &'static str,
    /// The nonce of the last response of this type on this stream (empty at first).
    pub response_nonce: String,
    /// Set on a NACK: why the last response was rejected.
    pub error_detail: Option<crate::pb::google::rpc::Status>,
}

impl AdsRequest {
    /// The generated message with the same content.
    pub fn to_proto(&self) -> discovery::DiscoveryRequest {
        discovery::DiscoveryRequest {
            version_info: self.version_info.clone(),
            node: self.node.clone(),
            resource_names: self.resource_names.iter().map(|n| n.to_string()).collect(),
            resource_locators: Vec::new(),
            type_url: self.type_url.to_string(),
            response_nonce: self.response_nonce.clone(),
            error_detail: self.error_detail.clone(),
        }
    }

    /// The wire form in a new buffer of exactly [`encoded_len`](Self::encoded_len) bytes.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(self.encoded_len());
        self.encode(&mut buf);
        buf
    }

    /// The length of the wire form.
    pub fn encoded_len(&self) -> usize {
        use prost::encoding::message;
        str_field_len(1, &self.version_info)
            + self.node.as_ref().map_or(0, |n| message::encoded_len(2, n))
            + self
                .resource_names
                .iter()
                .map(|n| {
                    prost::encoding::key_len(3)
                        + prost::encoding::encoded_len_varint(n.len() as u64)
                        + n.len()
                })
                .sum::<usize>()
            + str_field_len(4, self.type_url)
            + str_field_len(5, &self.response_nonce)
            + self
                .error_detail
                .as_ref()
                .map_or(0, |s| message::encoded_len(6, s))
    }

    /// Writes the wire form (fields in number order, as prost does).
    pub fn encode(&self, buf: &mut impl bytes::BufMut) {
        use prost::encoding::{WireType, encode_key, encode_varint, message};
        put_str_field(1, &self.version_info, buf);
        if let Some(node) = &self.node {
            message::encode(2, node, buf);
        }
        for name in self.resource_names.iter() {
            // Repeated strings are written even when empty.
            encode_key(3, WireType::LengthDelimited, buf);
            encode_varint(name.len() as u64, buf);
            buf.put_slice(name.as_bytes());
        }
        put_str_field(4, self.type_url, buf);
        put_str_field(5, &self.response_nonce, buf);
        if let Some(status) = &self.error_detail {
            message::encode(6, status, buf);
        }
    }
}

/// The wire length of a singular string field (omitted when empty, as proto3 does).
pub(super) fn str_field_len(tag: u32, value: &str) -> usize {
    use prost::encoding::{encoded_len_varint, key_len};
    if value.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(value.len() as u64) + value.len()
    }
}

/// Writes a singular string field (nothing when empty, as proto3 does).
pub(super) fn put_str_field(tag: u32, value: &str, buf: &mut impl bytes::BufMut) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    if !value.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(value.len() as u64, buf);
        buf.put_slice(value.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn ads_request_encodes_like_the_generated_message() {
        use crate::pb::envoy::config::core::v3::Node;
        let request = AdsRequest {
            version_info: "7".to_string(),
            node: Some(Node {
                id: "n".to_string(),
                ..Default::default()
            }),
            resource_names: ["", "a", &"x".repeat(300)]
                .iter()
                .map(|n| Arc::from(*n))
                .collect(),
            type_url: crate::resource::type_url::CLUSTER,
            response_nonce: "n7".to_string(),
            error_detail: Some(crate::pb::google::rpc::Status {
                code: 3,
                message: "bad".to_string(),
                details: Vec::new(),
            }),
        };
        let expected = request.to_proto().encode_to_vec();
        let mut wire = Vec::new();
        request.encode(&mut wire);
        assert_eq!(wire, expected);
        assert_eq!(request.encoded_len(), expected.len());
        let empty = AdsRequest {
            version_info: String::new(),
            node: None,
            resource_names: Arc::from([]),
            type_url: crate::resource::type_url::LISTENER,
            response_nonce: String::new(),
            error_detail: None,
        };
        let mut wire = Vec::new();
        empty.encode(&mut wire);
        assert_eq!(wire, empty.to_proto().encode_to_vec());
        assert_eq!(empty.encoded_len(), wire.len());
    }
}
