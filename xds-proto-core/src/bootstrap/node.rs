//! The node identity: parsing the bootstrap's `node` and building the `Node` message
//! sent to servers, with the client's user agent, features and metadata as a protobuf
//! `Struct`.

use serde_json::Value;

use super::json::{Object, child, opt_object, opt_string};
use super::{BootstrapError, CLIENT_FEATURES, LocalityConfig, NodeConfig};
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::google::protobuf as pbuf;

impl NodeConfig {
    /// The `Node` message sent on the first request of each stream: the bootstrap's
    /// identity plus the client's user agent and [`CLIENT_FEATURES`]. Metadata numbers
    /// become `f64`; empty metadata is left unset.
    #[must_use]
    pub fn to_proto(&self, user_agent_name: &str, user_agent_version: &str) -> core_pb::Node {
        core_pb::Node {
            id: self.id.clone(),
            cluster: self.cluster.clone(),
            metadata: if self.metadata.is_empty() {
                None
            } else {
                Some(json_object_to_struct(&self.metadata))
            },
            locality: self.locality.as_ref().map(|l| core_pb::Locality {
                region: l.region.clone(),
                zone: l.zone.clone(),
                sub_zone: l.sub_zone.clone(),
            }),
            user_agent_name: user_agent_name.to_owned(),
            user_agent_version_type: Some(core_pb::node::UserAgentVersionType::UserAgentVersion(
                user_agent_version.to_owned(),
            )),
            client_features: CLIENT_FEATURES.iter().map(|f| (*f).to_owned()).collect(),
            ..Default::default()
        }
    }
}

fn json_object_to_struct(obj: &Object) -> pbuf::Struct {
    pbuf::Struct {
        fields: obj
            .iter()
            .map(|(k, v)| (k.clone(), json_to_proto_value(v)))
            .collect(),
    }
}

fn json_to_proto_value(value: &Value) -> pbuf::Value {
    use pbuf::value::Kind;
    let kind = match value {
        Value::Null => Kind::NullValue(pbuf::NullValue::NullValue as i32),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(pbuf::ListValue {
            values: items.iter().map(json_to_proto_value).collect(),
        }),
        Value::Object(obj) => Kind::StructValue(json_object_to_struct(obj)),
    };
    pbuf::Value { kind: Some(kind) }
}

pub(super) fn parse_node(obj: &Object, path: &str) -> Result<NodeConfig, BootstrapError> {
    let id = opt_string(obj, path, "id")?.unwrap_or_default();
    let cluster = opt_string(obj, path, "cluster")?.unwrap_or_default();
    let locality_path = child(path, "locality");
    let locality = match opt_object(obj, path, "locality")? {
        None => None,
        Some(l) => Some(LocalityConfig {
            region: opt_string(l, &locality_path, "region")?.unwrap_or_default(),
            zone: opt_string(l, &locality_path, "zone")?.unwrap_or_default(),
            sub_zone: opt_string(l, &locality_path, "sub_zone")?.unwrap_or_default(),
        }),
    };
    let metadata = opt_object(obj, path, "metadata")?
        .cloned()
        .unwrap_or_default();
    Ok(NodeConfig {
        id,
        cluster,
        locality,
        metadata,
    })
}
