//! Checking a route's `route` action: its cluster specifier (a cluster, weighted
//! clusters or a declared plugin), timeouts, retry policy (A44), hash policies (A42) and
//! the per-filter config overrides (A39) that routes, virtual hosts and weighted
//! clusters carry.

use std::collections::{BTreeMap, HashMap};

use super::decode::{PluginState, find_plugin};
use super::*;
use crate::filter::FilterOverride;
use crate::pb::envoy::config::route::v3 as route_pb;
use crate::pb::google::protobuf as pbuf;
use crate::resource::validate::{
    FieldError, decode_message, duration, optional, optional_duration, required, typed_config,
};

/// Validates a `route` action; `Ok(None)` means gRPC ignores the route.
pub(super) fn parse_forward_action(
    ra: &route_pb::RouteAction,
    plugins: &[(String, PluginState)],
) -> Result<Option<ForwardAction>, FieldError> {
    use route_pb::route_action::ClusterSpecifier as Spec;
    let cluster = match &ra.cluster_specifier {
        Some(Spec::Cluster(name)) => {
            if name.is_empty() {
                return Err(FieldError::new("cluster", "must be non-empty"));
            }
            ClusterSpecifier::Cluster(name.clone())
        }
        Some(Spec::WeightedClusters(wc)) => ClusterSpecifier::WeightedClusters(
            parse_weighted_clusters(wc).map_err(|e| e.at("weighted_clusters"))?,
        ),
        Some(Spec::ClusterSpecifierPlugin(name)) => {
            if name.is_empty() {
                return Err(FieldError::new(
                    "cluster_specifier_plugin",
                    "must be non-empty",
                ));
            }
            match find_plugin(plugins, name) {
                None => {
                    return Err(FieldError::new(
                        "cluster_specifier_plugin",
                        format!(
                            "unknown cluster specifier plugin {name:?} (not in \
                             cluster_specifier_plugins)"
                        ),
                    ));
                }
                Some(PluginState::OptionalUnsupported) => return Ok(None),
                Some(PluginState::Supported(_)) => {
                    ClusterSpecifier::ClusterSpecifierPlugin(name.clone())
                }
            }
        }
        // cluster_header, inline plugins or nothing: gRPC ignores the route (A28).
        Some(Spec::ClusterHeader(_) | Spec::InlineClusterSpecifierPlugin(_)) | None => {
            return Ok(None);
        }
    };
    let timeout = optional_duration(ra.timeout.as_ref()).map_err(|e| e.at("timeout"))?;
    let (max_stream_duration, grpc_timeout_header_max) = match &ra.max_stream_duration {
        Some(msd) => (
            optional_duration(msd.max_stream_duration.as_ref())
                .map_err(|e| e.at("max_stream_duration.max_stream_duration"))?,
            optional_duration(msd.grpc_timeout_header_max.as_ref())
                .map_err(|e| e.at("max_stream_duration.grpc_timeout_header_max"))?,
        ),
        None => (None, None),
    };
    let retry_policy = optional(ra.retry_policy.as_ref(), "retry_policy", parse_retry_policy)?;
    let mut hash_policies = Vec::new();
    for (i, hp) in ra.hash_policy.iter().enumerate() {
        if let Some(policy) = parse_hash_policy(hp).map_err(|e| e.at_index("hash_policy", i))? {
            hash_policies.push(policy);
        }
    }
    Ok(Some(ForwardAction {
        cluster,
        timeout,
        max_stream_duration,
        grpc_timeout_header_max,
        retry_policy,
        hash_policies,
    }))
}

fn parse_weighted_clusters(
    wc: &route_pb::WeightedCluster,
) -> Result<Vec<WeightedCluster>, FieldError> {
    let mut out = Vec::with_capacity(wc.clusters.len());
    let mut total: u64 = 0;
    for (i, c) in wc.clusters.iter().enumerate() {
        let at = |e: FieldError| e.at_index("clusters", i);
        if c.name.is_empty() {
            return Err(at(FieldError::new("name", "must be non-empty")));
        }
        let typed_per_filter_config = parse_filter_overrides(&c.typed_per_filter_config)
            .map_err(|e| at(e.at("typed_per_filter_config")))?;
        // A missing weight counts as 0; clusters with weight 0 are skipped.
        let weight = c.weight.as_ref().map_or(0, |w| w.value);
        if weight == 0 {
            continue;
        }
        total = total.saturating_add(u64::from(weight));
        out.push(WeightedCluster {
            name: c.name.clone(),
            weight,
            typed_per_filter_config,
        });
    }
    if total == 0 {
        return Err(FieldError::new("", "sum of weights is 0"));
    }
    if total > u64::from(u32::MAX) {
        return Err(FieldError::new(
            "",
            format!("sum of weights ({total}) exceeds {}", u32::MAX),
        ));
    }
    Ok(out)
}

fn parse_hash_policy(
    hp: &route_pb::route_action::HashPolicy,
) -> Result<Option<HashPolicy>, FieldError> {
    use route_pb::route_action::hash_policy::PolicySpecifier;
    match &hp.policy_specifier {
        Some(PolicySpecifier::Header(h)) => {
            if h.header_name.is_empty() {
                return Err(FieldError::new("header.header_name", "must be non-empty"));
            }
            let regex_rewrite = match &h.regex_rewrite {
                None => None,
                Some(rr) => {
                    let pattern = required(rr.pattern.as_ref(), "header.regex_rewrite.pattern")?;
                    if pattern.regex.is_empty() {
                        return Err(FieldError::new(
                            "header.regex_rewrite.pattern.regex",
                            "must be non-empty",
                        ));
                    }
                    Some(RegexRewrite {
                        pattern: compile_regex(&pattern.regex, false)
                            .map_err(|e| e.at("header.regex_rewrite.pattern"))?,
                        substitution: rr.substitution.clone(),
                    })
                }
            };
            Ok(Some(HashPolicy::Header {
                header_name: h.header_name.clone(),
                regex_rewrite,
                terminal: hp.terminal,
            }))
        }
        Some(PolicySpecifier::FilterState(fs)) if fs.key == CHANNEL_ID_HASH_KEY => {
            Ok(Some(HashPolicy::ChannelId {
                terminal: hp.terminal,
            }))
        }
        // Other hash policies are ignored, as gRPC does.
        _ => Ok(None),
    }
}

pub(super) fn parse_retry_policy(rp: &route_pb::RetryPolicy) -> Result<RetryPolicy, FieldError> {
    let (retryable_codes, http_conditions) = parse_retry_on(&rp.retry_on);
    let num_retries = rp.num_retries.as_ref().map_or(1, |n| n.value);
    if num_retries == 0 {
        return Err(FieldError::new("num_retries", "must be greater than 0"));
    }
    let per_try_timeout =
        optional_duration(rp.per_try_timeout.as_ref()).map_err(|e| e.at("per_try_timeout"))?;
    let (base_interval, max_interval) = match &rp.retry_back_off {
        None => (
            DEFAULT_RETRY_BASE_INTERVAL,
            DEFAULT_RETRY_BASE_INTERVAL.saturating_mul(10),
        ),
        Some(backoff) => parse_retry_back_off(backoff).map_err(|e| e.at("retry_back_off"))?,
    };
    Ok(RetryPolicy {
        retryable_codes,
        http_conditions,
        retriable_status_codes: rp.retriable_status_codes.clone(),
        num_retries,
        max_attempts: num_retries.saturating_add(1).min(MAX_RETRY_ATTEMPTS),
        per_try_timeout,
        base_interval,
        max_interval,
    })
}

/// The gRPC status codes and HTTP conditions of a `retry_on` list, each sorted and
/// deduplicated. Unknown conditions are ignored.
fn parse_retry_on(retry_on: &str) -> (Vec<RetryableCode>, Vec<HttpRetryCondition>) {
    let mut retryable_codes = Vec::new();
    let mut http_conditions = Vec::new();
    for condition in retry_on.split(',').map(str::trim) {
        if let Some((_, code)) = GRPC_RETRY_ON
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(condition))
        {
            retryable_codes.push(*code);
        } else if let Some((_, cond)) = HTTP_RETRY_ON
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(condition))
        {
            http_conditions.push(*cond);
        }
    }
    retryable_codes.sort_unstable();
    retryable_codes.dedup();
    http_conditions.sort_unstable();
    http_conditions.dedup();
    (retryable_codes, http_conditions)
}

/// The back-off's base and maximum intervals. Paths are relative to `retry_back_off`.
fn parse_retry_back_off(
    backoff: &route_pb::retry_policy::RetryBackOff,
) -> Result<(Duration, Duration), FieldError> {
    let base = required(backoff.base_interval.as_ref(), "base_interval")?;
    let base = duration(base).map_err(|e| e.at("base_interval"))?;
    if base.is_zero() {
        return Err(FieldError::new("base_interval", "must be greater than 0"));
    }
    let max = match &backoff.max_interval {
        None => base.saturating_mul(10),
        Some(max) => {
            let max = duration(max).map_err(|e| e.at("max_interval"))?;
            if max.is_zero() {
                return Err(FieldError::new("max_interval", "must be greater than 0"));
            }
            if max < base {
                return Err(FieldError::new(
                    "max_interval",
                    format!("must not be less than base_interval ({max:?} < {base:?})"),
                ));
            }
            max
        }
    };
    Ok((base, max))
}

/// The type of the wrapper `typed_per_filter_config` values may use.
pub(super) const FILTER_CONFIG_TYPE: &str = "envoy.config.route.v3.FilterConfig";

/// Validates a `typed_per_filter_config` map. Keys are visited in sorted order so that
/// the reported error does not depend on hash-map iteration order.
pub(super) fn parse_filter_overrides(
    map: &HashMap<String, pbuf::Any>,
) -> Result<BTreeMap<String, FilterConfigOverride>, FieldError> {
    let mut entries: Vec<(&String, &pbuf::Any)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = BTreeMap::new();
    for (key, any) in entries {
        let at = |e: FieldError| e.at(format_args!("[{key:?}]"));
        if key.is_empty() {
            return Err(at(FieldError::new("", "filter name must be non-empty")));
        }
        let outer = typed_config(any).map_err(at)?;
        let (config, is_optional, disabled) = if outer.type_name() == FILTER_CONFIG_TYPE {
            let fc: route_pb::FilterConfig =
                decode_message(&outer.value, "value", "FilterConfig").map_err(at)?;
            match &fc.config {
                Some(inner) => (
                    Some((
                        typed_config(inner).map_err(|e| at(e.at("config")))?,
                        "config",
                    )),
                    fc.is_optional,
                    fc.disabled,
                ),
                None if fc.disabled => (None, fc.is_optional, true),
                None => return Err(at(FieldError::missing("config"))),
            }
        } else {
            (Some((outer, "")), false, false)
        };
        // The filter parses its override once, here (A39); an unknown type is skipped
        // when optional.
        let config = match config {
            None => None,
            Some((cfg, field)) => match FilterOverride::parse(&cfg).map_err(|e| at(e.at(field)))? {
                Some(parsed) => Some(parsed),
                None if is_optional => continue,
                None => {
                    return Err(at(FieldError::new(
                        "",
                        format!("unsupported filter type {:?}", cfg.type_url),
                    )));
                }
            },
        };
        out.insert(
            key.clone(),
            FilterConfigOverride {
                config,
                is_optional,
                disabled,
            },
        );
    }
    Ok(out)
}
