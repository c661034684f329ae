//! The cluster's load-balancing policy: the legacy `lb_policy` enum with its
//! `lb_config`, or the `load_balancing_policy` list (gRFC A52), whose first entry the
//! [`LbPolicyRegistry`] supports wins. Here are the built-in converters it holds: round
//! robin, ring hash (A42), least request (A48), `wrr_locality` (which nests a list),
//! client-side weighted round robin (A58) and pick first.

use super::registry::LbPolicyRegistry;
use super::*;
use crate::pb::envoy::config::cluster::v3 as cluster_pb;
use crate::pb::envoy::extensions::load_balancing_policies as lb_pb;
use crate::resource::validate::{
    FieldError, decode_message, optional_duration, required, typed_config,
};

pub(super) const ROUND_ROBIN_TYPE: &str =
    "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin";
pub(super) const RING_HASH_TYPE: &str =
    "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash";
pub(super) const LEAST_REQUEST_TYPE: &str =
    "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest";
pub(super) const WRR_LOCALITY_TYPE: &str =
    "envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality";
pub(super) const CSWRR_TYPE: &str = "envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin";
pub(super) const PICK_FIRST_TYPE: &str =
    "envoy.extensions.load_balancing_policies.pick_first.v3.PickFirst";

/// The legacy `lb_policy` enum with its `lb_config`.
pub(super) fn parse_legacy_lb_policy(cluster: &lite::Cluster) -> Result<LbPolicy, FieldError> {
    use cluster_pb::cluster::{LbPolicy as Legacy, ring_hash_lb_config::HashFunction};
    use lite::cluster::LbConfig;
    match Legacy::try_from(cluster.lb_policy) {
        Ok(Legacy::RoundRobin) => Ok(LbPolicy::RoundRobin),
        Ok(Legacy::RingHash) => {
            let Some(LbConfig::RingHashLbConfig(config)) = &cluster.lb_config else {
                return Ok(LbPolicy::RingHash {
                    min_ring_size: DEFAULT_MIN_RING_SIZE,
                    max_ring_size: MAX_RING_SIZE,
                });
            };
            if config.hash_function != HashFunction::XxHash as i32 {
                return Err(FieldError::new(
                    "ring_hash_lb_config.hash_function",
                    "unsupported hash function (must be XX_HASH)",
                ));
            }
            ring_hash_sizes(config.minimum_ring_size, config.maximum_ring_size)
                .map_err(|e| e.at("ring_hash_lb_config"))
        }
        Ok(Legacy::LeastRequest) => {
            let choice_count = match &cluster.lb_config {
                Some(LbConfig::LeastRequestLbConfig(config)) => config.choice_count,
                _ => None,
            };
            least_request(choice_count).map_err(|e| e.at("least_request_lb_config"))
        }
        Ok(other) => Err(FieldError::new(
            "lb_policy",
            format!("unsupported LB policy {}", other.as_str_name()),
        )),
        Err(_) => Err(FieldError::new(
            "lb_policy",
            format!("unsupported LB policy {}", cluster.lb_policy),
        )),
    }
}

fn ring_hash_sizes(
    min: Option<crate::pb::google::protobuf::UInt64Value>,
    max: Option<crate::pb::google::protobuf::UInt64Value>,
) -> Result<LbPolicy, FieldError> {
    let in_range = |field: &str, size: u64| {
        if size == 0 || size > MAX_RING_SIZE {
            Err(FieldError::new(
                field,
                format!("value {size} must be in the range [1, {MAX_RING_SIZE}]"),
            ))
        } else {
            Ok(size)
        }
    };
    let max_ring_size = match max {
        Some(v) => in_range("maximum_ring_size", v.value)?,
        None => MAX_RING_SIZE,
    };
    let min_ring_size = match min {
        Some(v) => in_range("minimum_ring_size", v.value)?,
        None => DEFAULT_MIN_RING_SIZE,
    };
    if min_ring_size > max_ring_size {
        return Err(FieldError::new(
            "minimum_ring_size",
            format!(
                "value {min_ring_size} must not be greater than maximum_ring_size \
                 ({max_ring_size})"
            ),
        ));
    }
    Ok(LbPolicy::RingHash {
        min_ring_size,
        max_ring_size,
    })
}

fn least_request(
    choice_count: Option<crate::pb::google::protobuf::UInt32Value>,
) -> Result<LbPolicy, FieldError> {
    let choice_count = choice_count.map_or(DEFAULT_CHOICE_COUNT, |c| c.value);
    if choice_count < 2 {
        return Err(FieldError::new(
            "choice_count",
            format!("value {choice_count} must be at least 2"),
        ));
    }
    Ok(LbPolicy::LeastRequest { choice_count })
}

/// How many unsupported type names the NACK of a list without a supported one lists.
const LISTED_UNSUPPORTED: usize = 8;

/// Walks a `LoadBalancingPolicy` list and takes the first policy `registry` supports.
/// Paths are relative to the `LoadBalancingPolicy`.
pub(super) fn parse_lb_policy_list(
    list: &cluster_pb::LoadBalancingPolicy,
    depth: usize,
    registry: &LbPolicyRegistry,
) -> Result<LbPolicy, FieldError> {
    if depth >= MAX_LB_POLICY_DEPTH {
        return Err(FieldError::new(
            "",
            format!("exceeds the maximum nesting depth of {MAX_LB_POLICY_DEPTH}"),
        ));
    }
    for (i, policy) in list.policies.iter().enumerate() {
        let at = |e: FieldError| e.at_index("policies", i);
        let ext = required(
            policy.typed_extension_config.as_ref(),
            "typed_extension_config",
        )
        .map_err(at)?;
        let any = required(
            ext.typed_config.as_ref(),
            "typed_extension_config.typed_config",
        )
        .map_err(at)?;
        let config =
            typed_config(any).map_err(|e| at(e.at("typed_extension_config.typed_config")))?;
        let Some(parsed) = registry.convert(
            config.type_name(),
            config.typed_struct,
            &config.value,
            depth,
        ) else {
            continue;
        };
        return parsed.map_err(|e| at(e.at("typed_extension_config.typed_config")));
    }
    Err(FieldError::new("", no_supported_policy(list)))
}

/// The NACK of a list without a supported policy: the types it named (the first few).
fn no_supported_policy(list: &cluster_pb::LoadBalancingPolicy) -> String {
    let named: Vec<String> = list
        .policies
        .iter()
        .take(LISTED_UNSUPPORTED)
        .map(|p| {
            let any = p
                .typed_extension_config
                .as_ref()
                .and_then(|e| e.typed_config.as_ref());
            match any.map(typed_config) {
                Some(Ok(c)) if c.typed_struct => format!("TypedStruct {}", c.type_name()),
                Some(Ok(c)) => c.type_name().to_owned(),
                _ => "?".to_owned(),
            }
        })
        .collect();
    let more = list.policies.len().saturating_sub(LISTED_UNSUPPORTED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "no supported load balancing policy found among [{}]{more} (a custom policy \
         must be registered under the TypedStruct's type name)",
        named.join(", ")
    )
}

pub(super) fn parse_least_request(value: &[u8]) -> Result<LbPolicy, FieldError> {
    let lr: lb_pb::least_request::v3::LeastRequest =
        decode_message(value, "value", "LeastRequest")?;
    least_request(lr.choice_count)
}

pub(super) fn parse_pick_first(value: &[u8]) -> Result<LbPolicy, FieldError> {
    let pf: lb_pb::pick_first::v3::PickFirst = decode_message(value, "value", "PickFirst")?;
    Ok(LbPolicy::PickFirst {
        shuffle_address_list: pf.shuffle_address_list,
    })
}

pub(super) fn parse_ring_hash(value: &[u8]) -> Result<LbPolicy, FieldError> {
    use lb_pb::ring_hash::v3::{RingHash, ring_hash::HashFunction};
    let rh: RingHash = decode_message(value, "value", "RingHash")?;
    if rh.hash_function != HashFunction::DefaultHash as i32
        && rh.hash_function != HashFunction::XxHash as i32
    {
        return Err(FieldError::new(
            "value.hash_function",
            "unsupported hash function (must be XX_HASH)",
        ));
    }
    ring_hash_sizes(rh.minimum_ring_size, rh.maximum_ring_size).map_err(|e| e.at("value"))
}

pub(super) fn parse_wrr_locality(
    value: &[u8],
    depth: usize,
    registry: &LbPolicyRegistry,
) -> Result<LbPolicy, FieldError> {
    let wrr: lb_pb::wrr_locality::v3::WrrLocality = decode_message(value, "value", "WrrLocality")?;
    let child = required(
        wrr.endpoint_picking_policy.as_ref(),
        "value.endpoint_picking_policy",
    )?;
    let child = parse_lb_policy_list(child, depth + 1, registry)
        .map_err(|e| e.at("value.endpoint_picking_policy"))?;
    Ok(LbPolicy::WrrLocality(Box::new(child)))
}

pub(super) fn parse_cswrr(value: &[u8]) -> Result<LbPolicy, FieldError> {
    let c: lb_pb::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin =
        decode_message(value, "value", "ClientSideWeightedRoundRobin")?;
    let defaults = WeightedRoundRobinConfig::default();
    let period = |d: Option<&crate::pb::google::protobuf::Duration>, field: &str, default| {
        optional_duration(d)
            .map(|d| d.unwrap_or(default))
            .map_err(|e| e.at(format_args!("value.{field}")))
    };
    let error_utilization_penalty = match &c.error_utilization_penalty {
        None => defaults.error_utilization_penalty,
        Some(v) if v.value.is_finite() && v.value >= 0.0 => v.value,
        Some(v) => {
            return Err(FieldError::new(
                "value.error_utilization_penalty",
                format!("value {} must be finite and non-negative", v.value),
            ));
        }
    };
    Ok(LbPolicy::WeightedRoundRobin(WeightedRoundRobinConfig {
        enable_oob_load_report: c.enable_oob_load_report.is_some_and(|b| b.value),
        oob_reporting_period: period(
            c.oob_reporting_period.as_ref(),
            "oob_reporting_period",
            defaults.oob_reporting_period,
        )?,
        blackout_period: period(
            c.blackout_period.as_ref(),
            "blackout_period",
            defaults.blackout_period,
        )?,
        weight_expiration_period: period(
            c.weight_expiration_period.as_ref(),
            "weight_expiration_period",
            defaults.weight_expiration_period,
        )?,
        weight_update_period: period(
            c.weight_update_period.as_ref(),
            "weight_update_period",
            defaults.weight_update_period,
        )?,
        error_utilization_penalty,
    }))
}
