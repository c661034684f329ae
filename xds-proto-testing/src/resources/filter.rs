//! HTTP filter builders (A39): the fault injection filter (A33) for an HCM's
//! `http_filters` or a route's `typed_per_filter_config`, and an HCM with filters.

use std::time::Duration;

use xds_proto_core::pb::envoy::extensions::filters::common::fault::v3 as common_fault;
use xds_proto_core::pb::envoy::extensions::filters::http::fault::v3 as fault;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::envoy::r#type::v3::{FractionalPercent, fractional_percent};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::listener::FAULT_FILTER_TYPE_URL;

use super::{any, hcm_rds, pb_duration, router_filter};

/// `numerator` per million (`FractionalPercent` with denominator MILLION).
pub fn per_million(numerator: u32) -> FractionalPercent {
    FractionalPercent {
        numerator,
        denominator: fractional_percent::DenominatorType::Million as i32,
    }
}

/// An `HTTPFault` that aborts `percentage` of RPCs with gRPC status `code`.
pub fn fault_abort(code: u32, percentage: FractionalPercent) -> fault::HttpFault {
    fault::HttpFault {
        abort: Some(fault::FaultAbort {
            error_type: Some(fault::fault_abort::ErrorType::GrpcStatus(code)),
            percentage: Some(percentage),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An `HTTPFault` that delays `percentage` of RPCs by `delay`.
pub fn fault_delay(delay: Duration, percentage: FractionalPercent) -> fault::HttpFault {
    fault::HttpFault {
        delay: Some(common_fault::FaultDelay {
            fault_delay_secifier: Some(common_fault::fault_delay::FaultDelaySecifier::FixedDelay(
                pb_duration(delay),
            )),
            percentage: Some(percentage),
        }),
        ..Default::default()
    }
}

/// An `HTTPFault` whose delay and abort come from the RPC's `x-envoy-fault-*` headers,
/// of at most `percentage` of RPCs.
pub fn fault_from_headers(percentage: FractionalPercent) -> fault::HttpFault {
    fault::HttpFault {
        delay: Some(common_fault::FaultDelay {
            fault_delay_secifier: Some(common_fault::fault_delay::FaultDelaySecifier::HeaderDelay(
                Default::default(),
            )),
            percentage: Some(percentage),
        }),
        abort: Some(fault::FaultAbort {
            error_type: Some(fault::fault_abort::ErrorType::HeaderAbort(
                Default::default(),
            )),
            percentage: Some(percentage),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The config as an `Any`, for `http_filters` or `typed_per_filter_config`.
pub fn fault_any(config: &fault::HttpFault) -> Any {
    any(FAULT_FILTER_TYPE_URL, config)
}

/// A fault injection filter named `name` with `config`.
pub fn fault_filter(name: &str, config: &fault::HttpFault) -> hcm::HttpFilter {
    hcm::HttpFilter {
        name: name.to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(fault_any(config))),
        ..Default::default()
    }
}

/// [`hcm_rds`] with `filters` before the router.
pub fn hcm_rds_with_filters(
    route_config_name: &str,
    filters: Vec<hcm::HttpFilter>,
) -> hcm::HttpConnectionManager {
    let mut manager = hcm_rds(route_config_name);
    manager.http_filters = filters;
    manager.http_filters.push(router_filter());
    manager
}

/// A stateful session filter (A55) named `name`: cookie `cookie` on `path` with `ttl`.
pub fn stateful_session_filter(
    name: &str,
    cookie: &str,
    path: &str,
    ttl: Option<Duration>,
) -> hcm::HttpFilter {
    use xds_proto_core::pb::envoy::config::core::v3::TypedExtensionConfig;
    use xds_proto_core::pb::envoy::extensions::filters::http::stateful_session::v3::StatefulSession;
    use xds_proto_core::pb::envoy::extensions::http::stateful_session::cookie::v3::CookieBasedSessionState;
    use xds_proto_core::pb::envoy::r#type::http::v3::Cookie;
    let state = CookieBasedSessionState {
        cookie: Some(Cookie {
            name: cookie.to_string(),
            path: path.to_string(),
            ttl: ttl.map(pb_duration),
            ..Default::default()
        }),
    };
    let config = StatefulSession {
        session_state: Some(TypedExtensionConfig {
            name: "envoy.http.stateful_session.cookie".to_string(),
            typed_config: Some(any(
                "type.googleapis.com/envoy.extensions.http.stateful_session.cookie.v3.CookieBasedSessionState",
                &state,
            )),
        }),
        ..Default::default()
    };
    hcm::HttpFilter {
        name: name.to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(
            xds_proto_core::resource::listener::STATEFUL_SESSION_FILTER_TYPE_URL,
            &config,
        ))),
        ..Default::default()
    }
}
