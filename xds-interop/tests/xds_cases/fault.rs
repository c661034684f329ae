//! psm-interop's fault_injection test: routes chosen by the `fi_testcase` header, each
//! with an HTTPFault `typed_per_filter_config` (gRFC A33), the fault filter before the
//! router in the listener. Its 20 s delay is scaled down to 3 s, still longer than the
//! 1 s client timeout of the delay sub-tests.

use std::time::Duration;

use tonic::Code;
use xds_adapter_tokio::xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_adapter_tokio::xds_proto_core::pb::envoy::extensions::filters::common::fault::v3 as common;
use xds_adapter_tokio::xds_proto_core::pb::envoy::extensions::filters::http::fault::v3 as fault;
use xds_adapter_tokio::xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_adapter_tokio::xds_proto_core::pb::envoy::r#type::v3::FractionalPercent;
use xds_interop::pb::testing::ClientConfigureRequest;
use xds_interop::pb::testing::client_configure_request::{Metadata, RpcType};
use xds_test_server::resources::{
    any, cluster, hcm_rds, header, listener_of, path, pb_duration, prefix, router_filter,
    to_cluster, with_header,
};

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);
const FAULT_FILTER: &str = "envoy.filters.http.fault";
const HTTP_FAULT_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault";
const DELAY: Duration = Duration::from_secs(3);

fn percent(numerator: u32) -> Option<FractionalPercent> {
    // The denominator's default (0) is HUNDRED.
    Some(FractionalPercent {
        numerator,
        denominator: 0,
    })
}

/// An HTTPFault delaying `delay_percent` % of the RPCs by [`DELAY`] and aborting
/// `abort_percent` % with HTTP 401.
fn http_fault(delay_percent: u32, abort_percent: u32) -> fault::HttpFault {
    fault::HttpFault {
        delay: Some(common::FaultDelay {
            fault_delay_secifier: Some(common::fault_delay::FaultDelaySecifier::FixedDelay(
                pb_duration(DELAY),
            )),
            percentage: percent(delay_percent),
        }),
        abort: Some(fault::FaultAbort {
            error_type: Some(fault::fault_abort::ErrorType::HttpStatus(401)),
            percentage: percent(abort_percent),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A route for the RPCs whose `fi_testcase` is `case` (and that `m` matches), with
/// `fault` as its fault filter's override.
fn case_route(m: route::RouteMatch, case: &str, fault: Option<fault::HttpFault>) -> route::Route {
    #[allow(deprecated)]
    let spec = route::header_matcher::HeaderMatchSpecifier::ExactMatch(case.to_string());
    let mut r = to_cluster(with_header(m, header("fi_testcase", spec, false)), "c");
    if let Some(fault) = fault {
        r.typed_per_filter_config
            .insert(FAULT_FILTER.to_string(), any(HTTP_FAULT_TYPE_URL, &fault));
    }
    r
}

fn fault_routes() -> Vec<route::Route> {
    vec![
        case_route(
            prefix(""),
            "zero_percent_fault_injection",
            Some(http_fault(0, 0)),
        ),
        // The fault is on EmptyCall's route; the UnaryCalls take the next one.
        case_route(
            path(EMPTY),
            "non_matching_fault_injection",
            Some(http_fault(100, 100)),
        ),
        case_route(prefix(""), "non_matching_fault_injection", None),
        case_route(prefix(""), "always_delay", Some(http_fault(100, 0))),
        case_route(prefix(""), "always_abort", Some(http_fault(0, 100))),
        case_route(prefix(""), "delay_half", Some(http_fault(50, 0))),
        case_route(prefix(""), "abort_half", Some(http_fault(0, 50))),
        to_cluster(prefix(""), "c"),
    ]
}

fn select(case: &str, timeout_sec: i32) -> ClientConfigureRequest {
    let unary = RpcType::UnaryCall as i32;
    ClientConfigureRequest {
        types: vec![unary],
        metadata: vec![Metadata {
            r#type: unary,
            key: "fi_testcase".into(),
            value: case.into(),
        }],
        timeout_sec,
    }
}

/// What a sub-test expects of the UnaryCalls that end in a second.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// At least 20, all with this code.
    All(Code),
    /// About half with this code, the others OK.
    Half(Code),
}

impl Expect {
    fn holds(self, w: &Window) -> bool {
        match self {
            Expect::All(code) => all_ended_with(w, "UNARY_CALL", code, 20),
            Expect::Half(code) => about_half(w, code),
        }
    }
}

/// Whether about half (35 % to 65 %) of at least 40 UnaryCalls ended with `code`
/// and the others succeeded.
fn about_half(w: &Window, code: Code) -> bool {
    let (with, total) = count(w, "UNARY_CALL", code);
    let (ok, _) = count(w, "UNARY_CALL", Code::Ok);
    total >= 40
        && with + ok == total
        && (0.35..=0.65).contains(&(f64::from(with) / f64::from(total)))
}

pub async fn fault_injection(binary: ClientBinary) {
    let _timer = Timer::start("fault_injection", &binary);
    let plane = ControlPlane::start();
    let fault_filter = hcm::HttpFilter {
        name: FAULT_FILTER.to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(
            HTTP_FAULT_TYPE_URL,
            &fault::HttpFault::default(),
        ))),
        ..Default::default()
    };
    let mut manager = hcm_rds(ROUTES);
    manager.http_filters = vec![fault_filter, router_filter()];
    plane.set_listener(listener_of(LISTENER, &manager));
    let backend = Backend::start("backend-0").await;
    plane.set(
        vec![cluster("c")],
        vec![assignment("c", &[&backend])],
        fault_routes(),
    );
    let mut client = InteropClient::start(
        &binary,
        &plane.bootstrap(),
        &[&format!("--server={TARGET}"), "--qps=50"],
    )
    .await;
    use Expect::{All, Half};
    let cases = [
        ("zero_percent_fault_injection", 0, All(Code::Ok)),
        ("non_matching_fault_injection", 0, All(Code::Ok)),
        ("always_delay", 1, All(Code::DeadlineExceeded)),
        ("always_abort", 0, All(Code::Unauthenticated)),
        ("delay_half", 1, Half(Code::DeadlineExceeded)),
        ("abort_half", 0, Half(Code::Unauthenticated)),
    ];
    for (case, timeout_sec, done) in cases {
        client.configure(select(case, timeout_sec)).await;
        wait_for_windows(&mut client, LIMIT, case, |w| done.holds(w)).await;
    }
}
