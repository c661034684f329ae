//! The delta request the client emits, [`DeltaRequest`], and its wire encoding: the
//! subscription changes, the versions of the resources the client holds (on a new
//! stream) and the ACK or NACK, written straight from the shared names.

use std::sync::Arc;

use super::request::{put_str_field, str_field_len};
use crate::pb::envoy::service::discovery::v3 as discovery;

/// An `envoy.service.discovery.v3.DeltaDiscoveryRequest` as the client emits it on a
/// delta (incremental) ADS stream. Names and versions are shared with the client's
/// subscription and cache; [`encode`](Self::encode) writes the wire form from them,
/// the same message [`to_proto`](Self::to_proto) builds (map entries in name order).
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaRequest {
    /// The node, on a stream's first request only.
    pub node: Option<crate::pb::envoy::config::core::v3::Node>,
    /// The resource type.
    pub type_url: &'static str,
    /// Names to add to the stream's subscription, sorted. Never empty on a type's
    /// first request of a stream (that would be a wildcard subscription).
    pub resource_names_subscribe: Vec<Arc<str>>,
    /// Names to remove from the stream's subscription, sorted.
    pub resource_names_unsubscribe: Vec<Arc<str>>,
    /// On a type's first request of a new stream: the version of every resource the
    /// client holds from this server, sorted by name, so that the server can skip
    /// what the client has.
    pub initial_resource_versions: Vec<(Arc<str>, Arc<str>)>,
    /// The nonce of the response this request ACKs or NACKs; empty otherwise.
    pub response_nonce: String,
    /// Set on a NACK: why the response was rejected (every rejected resource).
    pub error_detail: Option<crate::pb::google::rpc::Status>,
}

impl DeltaRequest {
    /// The generated message with the same content.
    pub fn to_proto(&self) -> discovery::DeltaDiscoveryRequest {
        let strings = |names: &[Arc<str>]| names.iter().map(|n| n.to_string()).collect();
        discovery::DeltaDiscoveryRequest {
            node: self.node.clone(),
            type_url: self.type_url.to_string(),
            resource_names_subscribe: strings(&self.resource_names_subscribe),
            resource_names_unsubscribe: strings(&self.resource_names_unsubscribe),
            initial_resource_versions: self
                .initial_resource_versions
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            response_nonce: self.response_nonce.clone(),
            error_detail: self.error_detail.clone(),
            ..Default::default()
        }
    }

    /// Whether it is a NACK.
    pub fn is_nack(&self) -> bool {
        self.error_detail.is_some()
    }

    /// The wire form in a new buffer of exactly [`encoded_len`](Self::encoded_len) bytes.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(self.encoded_len());
        self.encode(&mut buf);
        buf
    }

    /// The length of the wire form.
    pub fn encoded_len(&self) -> usize {
        use prost::encoding::{encoded_len_varint, key_len, message};
        let names = |tag: u32, names: &[Arc<str>]| {
            names
                .iter()
                .map(|n| key_len(tag) + encoded_len_varint(n.len() as u64) + n.len())
                .sum::<usize>()
        };
        self.node.as_ref().map_or(0, |n| message::encoded_len(1, n))
            + str_field_len(2, self.type_url)
            + names(3, &self.resource_names_subscribe)
            + names(4, &self.resource_names_unsubscribe)
            + self
                .initial_resource_versions
                .iter()
                .map(|(n, v)| {
                    let entry = entry_len(n, v);
                    key_len(5) + encoded_len_varint(entry as u64) + entry
                })
                .sum::<usize>()
            + str_field_len(6, &self.response_nonce)
            + self
                .error_detail
                .as_ref()
                .map_or(0, |s| message::encoded_len(7, s))
    }

    /// Writes the wire form (fields in number order, as prost does).
    pub fn encode(&self, buf: &mut impl bytes::BufMut) {
        use prost::encoding::{WireType, encode_key, encode_varint, message};
        let put_names = |tag: u32, names: &[Arc<str>], buf: &mut _| {
            for name in names {
                // Repeated strings are written even when empty.
                encode_key(tag, WireType::LengthDelimited, buf);
                encode_varint(name.len() as u64, buf);
                bytes::BufMut::put_slice(buf, name.as_bytes());
            }
        };
        if let Some(node) = &self.node {
            message::encode(1, node, buf);
        }
        put_str_field(2, self.type_url, buf);
        put_names(3, &self.resource_names_subscribe, buf);
        put_names(4, &self.resource_names_unsubscribe, buf);
        for (name, version) in &self.initial_resource_versions {
            encode_key(5, WireType::LengthDelimited, buf);
            encode_varint(entry_len(name, version) as u64, buf);
            // A map entry skips a default key or value, as prost writes it.
            put_str_field(1, name, buf);
            put_str_field(2, version, buf);
        }
        put_str_field(6, &self.response_nonce, buf);
        if let Some(status) = &self.error_detail {
            message::encode(7, status, buf);
        }
    }
}

/// The length of one `initial_resource_versions` map entry's body.
fn entry_len(name: &str, version: &str) -> usize {
    str_field_len(1, name) + str_field_len(2, version)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

    #[test]
    fn delta_request_encodes_the_generated_message() {
        use crate::pb::envoy::config::core::v3::Node;
        let names = |list: &[&str]| list.iter().map(|n| Arc::from(*n)).collect::<Vec<_>>();
        let request = DeltaRequest {
            node: Some(Node {
                id: "n".to_string(),
                ..Default::default()
            }),
            type_url: crate::resource::type_url::CLUSTER,
            resource_names_subscribe: names(&["", "a", &"x".repeat(300)]),
            resource_names_unsubscribe: names(&["gone"]),
            initial_resource_versions: vec![
                (Arc::from("a"), Arc::from("v1")),
                (Arc::from("b"), Arc::from("")),
                (Arc::from(""), Arc::from("v0")),
            ],
            response_nonce: "n7".to_string(),
            error_detail: Some(crate::pb::google::rpc::Status {
                code: 3,
                message: "bad".to_string(),
                details: Vec::new(),
            }),
        };
        let wire = request.encode_to_vec();
        assert_eq!(request.encoded_len(), wire.len());
        let decoded = DeltaDiscoveryRequest::decode(wire.as_slice()).unwrap();
        assert_eq!(decoded, request.to_proto());
        assert_eq!(decoded.initial_resource_versions.len(), 3);
        // One map entry: the generated encoder writes the same bytes.
        let one = DeltaRequest {
            initial_resource_versions: vec![(Arc::from("a"), Arc::from("v1"))],
            ..request.clone()
        };
        assert_eq!(one.encode_to_vec(), one.to_proto().encode_to_vec());
        let empty = DeltaRequest {
            node: None,
            type_url: crate::resource::type_url::LISTENER,
            resource_names_subscribe: Vec::new(),
            resource_names_unsubscribe: Vec::new(),
            initial_resource_versions: Vec::new(),
            response_nonce: String::new(),
            error_detail: None,
        };
        assert_eq!(empty.encode_to_vec(), empty.to_proto().encode_to_vec());
        assert!(!empty.is_nack() && request.is_nack());
    }
}
