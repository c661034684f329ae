//! A naive reference for how a client must judge one SotW `DiscoveryResponse`: whether
//! it is ACKed or NACKed, which names in it are valid (and with what bytes), which are
//! invalid, and which carry a server-reported error (TP3 `resource_errors`).
//!
//! It restates the rules of the design notes and the scenario tests in the plainest
//! way, independently of the engine's code, so the invariant checker can hold the
//! engine to them: a resource that fails to decode (or is not of the response's type,
//! or is a wrapper without a resource) is invalid; a name that appears twice is invalid;
//! a `resource_errors` entry with an empty name, no status, status OK, or a name that is
//! also a valid resource makes the response a NACK and is otherwise ignored.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use prost::Message;
use xds_proto_core::Code;
use xds_proto_core::pb::envoy::service::discovery::v3::{DiscoveryResponse, Resource};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::{DecodeContext, ResourceTypeInfo, type_url};

/// The reference judgement of one response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// True when the client must ACK (no error of any kind).
    pub accept: bool,
    /// Names that must be applied, with the serialized resource the cache must hold.
    pub valid: BTreeMap<String, Bytes>,
    /// Names that failed validation (or were duplicated).
    pub invalid: BTreeSet<String>,
    /// Well-formed TP3 errors, by name (a name may have several), in order.
    pub server_errors: BTreeMap<String, Vec<Code>>,
    /// Every name the response speaks of: valid, invalid or with a server error.
    pub present: BTreeSet<String>,
    /// Some resource failed before its name could be read.
    pub unnamed_error: bool,
}

/// Unwraps an `envoy.service.discovery.v3.Resource` and decodes one resource: the
/// name (when readable) and, when valid, the bytes the cache keeps. A wrapper's
/// non-empty name is the resource's name whatever its payload calls itself, and an
/// error in a named wrapper's payload goes to that name (C-core's and Envoy's rule,
/// the client's `decode_enveloped`). Decoded in `context`, the client's: a certificate
/// provider instance its bootstrap lacks makes a cluster or listener invalid (A29).
fn judge_one(
    ty: &ResourceTypeInfo,
    context: &DecodeContext<'_>,
    any: &Any,
) -> (Option<String>, Option<Bytes>) {
    let (envelope_name, inner) = if any.type_url == type_url::RESOURCE_WRAPPER {
        let Ok(wrapper) = Resource::decode(any.value.clone()) else {
            return (None, None);
        };
        (
            (!wrapper.name.is_empty()).then_some(wrapper.name),
            wrapper.resource,
        )
    } else {
        (None, Some(any.clone()))
    };
    let Some(inner) = inner else {
        return (envelope_name, None);
    };
    if inner.type_url != ty.type_url() {
        return (envelope_name, None);
    }
    match ty.decode_in(context, &inner.value) {
        Ok((name, _)) => (Some(envelope_name.unwrap_or(name)), Some(inner.value)),
        Err(e) => (envelope_name.or(e.name), None),
    }
}

/// Judges `response` as a response of type `ty` to a client whose decode context is
/// `context`.
pub fn judge(
    ty: &ResourceTypeInfo,
    context: &DecodeContext<'_>,
    response: &DiscoveryResponse,
) -> Verdict {
    let mut v = Verdict::default();
    let mut occurrences: BTreeMap<String, usize> = BTreeMap::new();
    let mut decoded: Vec<(String, Bytes)> = Vec::new();
    let mut errors = false;
    for any in &response.resources {
        match judge_one(ty, context, any) {
            (None, _) => {
                v.unnamed_error = true;
                errors = true;
            }
            (Some(name), bytes) => {
                *occurrences.entry(name.clone()).or_default() += 1;
                match bytes {
                    Some(b) => decoded.push((name, b)),
                    None => {
                        errors = true;
                        v.invalid.insert(name);
                    }
                }
            }
        }
    }
    for (name, count) in &occurrences {
        if *count > 1 {
            errors = true;
            v.invalid.insert(name.clone());
        }
    }
    for (name, bytes) in decoded {
        if !v.invalid.contains(&name) {
            v.valid.insert(name, bytes);
        }
    }
    v.present.extend(occurrences.into_keys());
    for re in &response.resource_errors {
        let name = re
            .resource_name
            .as_ref()
            .map(|n| n.name.clone())
            .unwrap_or_default();
        match &re.error_detail {
            _ if name.is_empty() => errors = true,
            None => errors = true,
            Some(s) if s.code == Code::OK.0 => errors = true,
            Some(_) if v.valid.contains_key(&name) => errors = true,
            Some(s) => {
                v.present.insert(name.clone());
                v.server_errors.entry(name).or_default().push(Code(s.code));
            }
        }
    }
    v.accept = !errors;
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use xds_proto_core::resource::Cds;

    #[test]
    fn garbage_and_wrong_types_are_unnamed_errors() {
        let garbage = Any {
            type_url: type_url::CLUSTER.to_string(),
            value: Bytes::from_static(&[0x0a, 0xff]),
        };
        let response = DiscoveryResponse {
            resources: vec![garbage, fixtures::listener("l", "r")],
            type_url: type_url::CLUSTER.to_string(),
            ..Default::default()
        };
        let v = judge(
            &ResourceTypeInfo::of::<Cds>(),
            &DecodeContext::default(),
            &response,
        );
        assert!(!v.accept && v.unnamed_error && v.valid.is_empty() && v.invalid.is_empty());
    }

    #[test]
    fn resource_errors_rules() {
        let mut response = crate::response(type_url::CLUSTER, "1", "n", vec![]);
        response.resource_errors = vec![
            crate::resource_error("a", Code::NOT_FOUND, "gone"),
            crate::resource_error("", Code::UNAVAILABLE, "no name"),
        ];
        let v = judge(
            &ResourceTypeInfo::of::<Cds>(),
            &DecodeContext::default(),
            &response,
        );
        assert!(!v.accept);
        assert_eq!(v.server_errors.get("a"), Some(&vec![Code::NOT_FOUND]));
        assert!(v.present.contains("a"));
        response.resource_errors.truncate(1);
        assert!(
            judge(
                &ResourceTypeInfo::of::<Cds>(),
                &DecodeContext::default(),
                &response
            )
            .accept
        );
    }
}
