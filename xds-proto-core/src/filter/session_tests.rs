//! Stateful session affinity (A55, A60): the configs parsed with their NACK paths, the
//! per-route override, the cookie path match, the RPC's cookie (valid, invalid, absent,
//! A60's cluster), the response's cookie, and A60's cluster through the selector.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use prost::Message;

use super::stateful_session::*;
use super::*;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::extensions::filters::http::stateful_session::v3 as session_pb;
use crate::pb::envoy::extensions::http::stateful_session::cookie::v3 as cookie_pb;
use crate::pb::envoy::r#type::http::v3 as http_pb;
use crate::pb::google::protobuf as pbuf;

fn session(name: &str, path: &str, ttl: Option<i64>) -> session_pb::StatefulSession {
    let state = cookie_pb::CookieBasedSessionState {
        cookie: Some(http_pb::Cookie {
            name: name.to_owned(),
            path: path.to_owned(),
            ttl: ttl.map(|seconds| pbuf::Duration { seconds, nanos: 0 }),
            ..Default::default()
        }),
    };
    session_pb::StatefulSession {
        session_state: Some(core_pb::TypedExtensionConfig {
            name: "envoy.http.stateful_session.cookie".to_owned(),
            typed_config: Some(pbuf::Any {
                type_url: format!("type.googleapis.com/{COOKIE_SESSION_STATE_TYPE}"),
                value: state.encode_to_vec().into(),
            }),
        }),
        ..Default::default()
    }
}

fn parse(config: &session_pb::StatefulSession) -> Result<StatefulSessionConfig, String> {
    StatefulSessionConfig::parse(&config.encode_to_vec()).map_err(|e| e.to_string())
}

fn cookie_of(config: &session_pb::StatefulSession) -> Arc<SessionCookie> {
    parse(config).unwrap().cookie.unwrap()
}

#[test]
fn the_cookie_config_is_parsed_once() {
    assert_eq!(
        *cookie_of(&session("s", "/pkg.Svc", Some(120))),
        SessionCookie {
            name: "s".to_owned(),
            path: "/pkg.Svc".to_owned(),
            ttl: Duration::from_secs(120),
        }
    );
    // No path is every path; no ttl is zero; no session_state does nothing.
    let cookie = cookie_of(&session("s", "", None));
    assert_eq!((cookie.path.as_str(), cookie.ttl), ("/", Duration::ZERO));
    assert_eq!(parse(&Default::default()).unwrap().cookie, None);
}

#[test]
fn bad_session_configs_nack_with_the_field() {
    assert_eq!(
        parse(&session("", "/", None)).unwrap_err(),
        "session_state.typed_config.value.cookie.name: must be non-empty"
    );
    assert_eq!(
        parse(&session("s", "/", Some(-1))).unwrap_err(),
        "session_state.typed_config.value.cookie.ttl.seconds: value -1 must be in the range \
         [0, 315576000000]"
    );
    let mut other = session("s", "/", None);
    other
        .session_state
        .as_mut()
        .unwrap()
        .typed_config
        .as_mut()
        .unwrap()
        .type_url = "type.googleapis.com/example.HeaderState".to_owned();
    assert_eq!(
        parse(&other).unwrap_err(),
        "session_state.typed_config: unsupported session state \
         \"type.googleapis.com/example.HeaderState\" (expected \
         envoy.extensions.http.stateful_session.cookie.v3.CookieBasedSessionState)"
    );
    let per_route = |o| {
        let m = session_pb::StatefulSessionPerRoute { r#override: o };
        StatefulSessionOverride::parse(&m.encode_to_vec()).map_err(|e| e.to_string())
    };
    use session_pb::stateful_session_per_route::Override;
    assert_eq!(
        per_route(Some(Override::Disabled(true))),
        Ok(StatefulSessionOverride::Disabled)
    );
    assert_eq!(per_route(None).unwrap_err(), "override: field not present");
    assert_eq!(
        per_route(Some(Override::StatefulSession(session("", "/", None)))).unwrap_err(),
        "stateful_session.session_state.typed_config.value.cookie.name: must be non-empty"
    );
}

#[test]
fn the_cookie_path_matches_as_rfc_6265_says() {
    let cookie = |path: &str| SessionCookie {
        name: "s".into(),
        path: path.into(),
        ttl: Duration::ZERO,
    };
    for (path, rpc, matches) in [
        ("/", "/pkg.Svc/M", true),
        ("/pkg.Svc", "/pkg.Svc/M", true),
        ("/pkg.Svc/", "/pkg.Svc/M", true),
        ("/pkg.Svc/M", "/pkg.Svc/M", true),
        ("/pkg.Svc", "/pkg.Svc2/M", false),
        ("/pkg.Svc/M", "/pkg.Svc/", false),
        ("/other", "/pkg.Svc/M", false),
    ] {
        assert_eq!(cookie(path).path_matches(rpc), matches, "{path} vs {rpc}");
    }
}

fn b64(s: &str) -> String {
    STANDARD.encode(s)
}

#[test]
fn the_rpcs_cookie_names_the_host_and_cluster() {
    let cookie = cookie_of(&session("s", "/pkg.Svc", Some(60)));
    let host: SocketAddr = "10.0.0.1:8080".parse().unwrap();
    let of = |headers: &[(&str, &str)]| cookie.session("/pkg.Svc/M", headers);
    // A valid cookie, among others, in one of several headers.
    let value = format!("a=1; s={}; b=2", b64("10.0.0.1:8080"));
    let found = of(&[("cookie", "x=y"), ("cookie", &value)]).unwrap();
    assert_eq!(
        (found.override_host, found.cluster.as_deref()),
        (Some(host), None)
    );
    // A60: with the cluster; quoted values are unquoted.
    let value = format!("s=\"{}\"", b64("10.0.0.1:8080;cluster:blue"));
    let found = of(&[("cookie", &value)]).unwrap();
    assert_eq!(
        (found.override_host, found.cluster.as_deref()),
        (Some(host), Some("blue"))
    );
    // IPv6.
    let value = format!("s={}", b64("[::1]:443"));
    assert_eq!(
        of(&[("cookie", &value)]).unwrap().override_host,
        "[::1]:443".parse().ok()
    );
    // Invalid (not base64, not ip:port) or absent: the session has no host, and the
    // response will set the cookie.
    for headers in [
        vec![("cookie", "s=%%%".to_owned())],
        vec![("cookie", format!("s={}", b64("backend.example.com:80")))],
        vec![("cookie", "other=1".to_owned())],
        vec![],
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let found = of(&headers).unwrap();
        assert_eq!(found.override_host, None, "{headers:?}");
    }
    // Another path: the filter passes the RPC through (no session at all).
    assert_eq!(
        cookie.session("/other.Svc/M", &[("cookie", value.as_str())]),
        None
    );
}

#[test]
fn the_response_sets_the_cookie_when_the_rpc_went_elsewhere() {
    let cookie = cookie_of(&session("s", "/pkg.Svc", Some(60)));
    let host: SocketAddr = "10.0.0.1:8080".parse().unwrap();
    let other: SocketAddr = "10.0.0.2:8080".parse().unwrap();
    let value = format!("s={}", b64("10.0.0.1:8080;cluster:blue"));
    let affinity = cookie
        .session("/pkg.Svc/M", &[("cookie", value.as_str())])
        .unwrap();
    assert_eq!(
        affinity.set_cookie(host, "blue"),
        None,
        "where the cookie said"
    );
    let expected = format!(
        "s={}; Path=/pkg.Svc; Max-Age=60; HttpOnly",
        b64("10.0.0.2:8080;cluster:blue")
    );
    assert_eq!(
        affinity.set_cookie(other, "blue").as_deref(),
        Some(expected.as_str())
    );
    // Another cluster (A60) sets it too; no cookie, and no ttl, sets one without Max-Age.
    assert!(affinity.set_cookie(host, "green").is_some());
    let no_ttl = cookie_of(&session("s", "", None));
    let fresh = no_ttl.session("/pkg.Svc/M", &[("a", "b")]).unwrap();
    assert_eq!(
        fresh.set_cookie(host, "blue").as_deref(),
        Some(format!("s={}; Path=/; HttpOnly", b64("10.0.0.1:8080;cluster:blue")).as_str())
    );
}

mod through_the_selector {
    use super::*;
    use crate::pb::envoy::config::route::v3 as route_pb;
    use crate::selector::{ClusterRegistry, ConfigSelector};

    const PER_ROUTE_TYPE: &str = STATEFUL_SESSION_PER_ROUTE_TYPE_URL;

    fn per_route(o: session_pb::stateful_session_per_route::Override) -> pbuf::Any {
        let m = session_pb::StatefulSessionPerRoute {
            r#override: Some(o),
        };
        pbuf::Any {
            type_url: PER_ROUTE_TYPE.to_owned(),
            value: m.encode_to_vec().into(),
        }
    }

    /// `/split.` splits between `blue` and `green`; `/off.` disables the filter;
    /// `/renamed.` uses cookie `r`.
    fn selector() -> ConfigSelector {
        use route_pb::route_action::ClusterSpecifier as Spec;
        use session_pb::stateful_session_per_route::Override;
        let weighted = |name: &str| route_pb::weighted_cluster::ClusterWeight {
            name: name.to_owned(),
            weight: Some(pbuf::UInt32Value { value: 1 }),
            ..Default::default()
        };
        let route = |prefix: &str, spec, over: Option<pbuf::Any>| {
            let overrides = over.map(|a| ("session".to_owned(), a));
            super::tests::prefix_route(prefix, spec, overrides)
        };
        let split = Spec::WeightedClusters(route_pb::WeightedCluster {
            clusters: vec![weighted("blue"), weighted("green")],
            ..Default::default()
        });
        let rc = route_pb::RouteConfiguration {
            name: "rc".to_owned(),
            virtual_hosts: vec![route_pb::VirtualHost {
                name: "vh".to_owned(),
                domains: vec!["*".to_owned()],
                routes: vec![
                    route("/split.", split, None),
                    route(
                        "/off.",
                        Spec::Cluster("blue".into()),
                        Some(per_route(Override::Disabled(true))),
                    ),
                    route(
                        "/renamed.",
                        Spec::Cluster("blue".into()),
                        Some(per_route(Override::StatefulSession(session("r", "", None)))),
                    ),
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        let (_, routes) = crate::resource::route::decode(&rc.encode_to_vec()).unwrap();
        let top =
            HttpFilterConfig::StatefulSession(Arc::new(parse(&session("s", "", None)).unwrap()));
        let http = vec![
            HttpFilter {
                name: "session".into(),
                config: top,
                is_optional: false,
            },
            HttpFilter {
                name: "router".into(),
                config: HttpFilterConfig::Router,
                is_optional: false,
            },
        ];
        ConfigSelector::from_virtual_host_with_filters(
            &routes.virtual_hosts[0],
            &[],
            None,
            &http,
            &mut ClusterRegistry::new(),
        )
    }

    fn run(
        selector: &ConfigSelector,
        path: &str,
        cookie: &str,
        draw: u32,
    ) -> (Option<SessionAffinity>, String) {
        let headers = [("cookie", cookie)];
        let mut selection = selector.select(path, &headers, &mut || draw).unwrap();
        let active = fault::ActiveFaults::new();
        let rpc = selection.run_filters(path, &headers, &mut || 0, &active);
        if let Some(cluster) = rpc.session.as_ref().and_then(|s| s.cluster.as_deref()) {
            selection.stick_to_cluster(cluster);
        }
        (
            rpc.session,
            selection.cluster().cluster().unwrap().to_owned(),
        )
    }

    #[test]
    fn a60_keeps_the_rpc_on_the_cookies_cluster_and_overrides_apply() {
        let selector = selector();
        let green = format!("s={}", b64("10.0.0.1:80;cluster:green"));
        // The draw would pick blue; the cookie keeps the RPC on green.
        assert_eq!(run(&selector, "/split.S/M", "x=1", 0).1, "blue");
        let (session, cluster) = run(&selector, "/split.S/M", &green, 0);
        assert_eq!(cluster, "green");
        assert_eq!(session.unwrap().override_host, "10.0.0.1:80".parse().ok());
        // A cluster the route does not have: the draw stands.
        let gone = format!("s={}", b64("10.0.0.1:80;cluster:red"));
        assert_eq!(run(&selector, "/split.S/M", &gone, 0).1, "blue");
        // Disabled on /off.; cookie `r` on /renamed.
        assert_eq!(run(&selector, "/off.S/M", &green, 0).0, None);
        let renamed = format!("r={}", b64("10.0.0.9:80"));
        let (session, _) = run(&selector, "/renamed.S/M", &renamed, 0);
        assert_eq!(session.unwrap().override_host, "10.0.0.9:80".parse().ok());
        let (session, _) = run(&selector, "/renamed.S/M", &green, 0);
        assert_eq!(session.unwrap().override_host, None, "cookie s is not r's");
    }
}
