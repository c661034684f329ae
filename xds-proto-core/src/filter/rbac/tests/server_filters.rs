//! The server's RBAC filters (`filter::server`): the A39 merge of a chain's RBAC filters
//! with route and virtual host overrides (an `RBACPerRoute` without `rbac` disables
//! the filter, `FilterConfig.disabled` too), filters that enforce nothing left out,
//! and the chain run in order with the first refusal's PERMISSION_DENIED message and
//! audit events named after the filter instance.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::parse::{STDOUT, logger};
use super::*;
use crate::filter::server::{ServerFilter, ServerFilters};
use crate::filter::{FilterOverride, HttpFilterConfig};
use crate::resource::listener::HttpFilter;
use crate::resource::route::FilterConfigOverride;

fn path_policy(p: &str) -> rbac_pb::Policy {
    policy(
        vec![perm(Rule::UrlPath(url_path(exact(p))))],
        vec![any_princ()],
    )
}

/// An RBAC config that allows (ALLOW) or denies (DENY) exactly `path`.
fn on_path(action: i32, path: &str) -> RbacConfig {
    config(rules(action, vec![(path, path_policy(path))]))
}

fn rbac_filter(name: &str, config: RbacConfig) -> HttpFilter {
    HttpFilter {
        name: name.to_owned(),
        config: HttpFilterConfig::Rbac(Arc::new(config)),
        is_optional: false,
    }
}

fn router() -> HttpFilter {
    HttpFilter {
        name: "router".to_owned(),
        config: HttpFilterConfig::Router,
        is_optional: false,
    }
}

fn per_route(config: Option<RbacConfig>) -> FilterConfigOverride {
    let per_route = match config {
        Some(config) => RbacPerRoute::replacing(config),
        None => RbacPerRoute::parse(&[]).expect("an empty RBACPerRoute"),
    };
    FilterConfigOverride {
        config: Some(FilterOverride::Rbac(Arc::new(per_route))),
        is_optional: false,
        disabled: false,
    }
}

fn scope(entries: Vec<(&str, FilterConfigOverride)>) -> BTreeMap<String, FilterConfigOverride> {
    entries
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
}

/// What the built chain decides for an RPC to each path: `Ok` or the denial message.
fn decide(filters: &Option<Arc<ServerFilters>>, path: &str) -> Result<(), String> {
    match filters {
        None => Ok(()),
        Some(filters) => filters.authorize(&Req::path(path).view(), &mut ()),
    }
}

#[test]
fn the_route_override_wins_over_the_virtual_host_over_the_filter() {
    let http = [rbac_filter("authz", on_path(ALLOW, "/a")), router()];
    let vh = scope(vec![("authz", per_route(Some(on_path(ALLOW, "/b"))))]);
    let route = scope(vec![("authz", per_route(Some(on_path(ALLOW, "/c"))))]);
    let build = |r, v| ServerFilters::build(&http, [None, r, v]);
    let allowed = |filters: &Option<Arc<ServerFilters>>| {
        ["/a", "/b", "/c"]
            .into_iter()
            .filter(|p| decide(filters, p).is_ok())
            .collect::<Vec<_>>()
    };
    assert_eq!(allowed(&build(None, None)), ["/a"]);
    assert_eq!(allowed(&build(None, Some(&vh))), ["/b"]);
    assert_eq!(allowed(&build(Some(&route), Some(&vh))), ["/c"]);
    assert_eq!(allowed(&build(Some(&route), None)), ["/c"]);
    // An override for another filter instance changes nothing.
    let stray = scope(vec![("other", per_route(Some(on_path(ALLOW, "/c"))))]);
    assert_eq!(allowed(&build(Some(&stray), None)), ["/a"]);
}

#[test]
fn an_rbac_per_route_without_rbac_or_a_disabled_override_turns_the_filter_off() {
    let http = [rbac_filter("authz", on_path(ALLOW, "/a")), router()];
    let off = scope(vec![("authz", per_route(None))]);
    let on = scope(vec![("authz", per_route(Some(on_path(ALLOW, "/b"))))]);
    assert!(ServerFilters::build(&http, [None, Some(&off), None]).is_none());
    assert!(ServerFilters::build(&http, [None, None, Some(&off)]).is_none());
    // A route's config brings back a filter its virtual host disabled.
    let back = ServerFilters::build(&http, [None, Some(&on), Some(&off)]);
    assert!(decide(&back, "/b").is_ok() && decide(&back, "/a").is_err());
    let disabled = FilterConfigOverride {
        config: None,
        is_optional: false,
        disabled: true,
    };
    let disabled = scope(vec![("authz", disabled)]);
    assert!(ServerFilters::build(&http, [None, Some(&disabled), Some(&on)]).is_none());
}

#[test]
fn chains_and_configs_that_enforce_nothing_build_nothing() {
    assert!(ServerFilters::build(&[router()], [None, None, None]).is_none());
    let log = config(rules(LOG, vec![("a", path_policy("/a"))]));
    let no_rules = RbacConfig::parse(&filter_bytes(None)).unwrap();
    let http = [
        rbac_filter("log", log),
        rbac_filter("none", no_rules),
        router(),
    ];
    assert!(ServerFilters::build(&http, [None, None, None]).is_none());
    // An override that enforces nothing leaves the route unfiltered too.
    let http = [rbac_filter("authz", on_path(ALLOW, "/a")), router()];
    let log = config(rules(LOG, vec![]));
    let relaxed = scope(vec![("authz", per_route(Some(log)))]);
    assert!(ServerFilters::build(&http, [None, Some(&relaxed), None]).is_none());
}

#[test]
fn filters_run_in_order_and_the_first_refusal_decides() {
    let http = [
        rbac_filter("deny-b", on_path(DENY, "/b")),
        rbac_filter(
            "allow-a-b",
            config(rules(
                ALLOW,
                vec![("a", path_policy("/a")), ("b", path_policy("/b"))],
            )),
        ),
        router(),
    ];
    let filters = ServerFilters::build(&http, [None, None, None]);
    let names: Vec<&str> = filters
        .as_ref()
        .unwrap()
        .filters()
        .iter()
        .map(|f| match f {
            ServerFilter::Rbac(r) => r.name(),
        })
        .collect();
    assert_eq!(names, ["deny-b", "allow-a-b"]);
    assert_eq!(decide(&filters, "/a"), Ok(()));
    assert_eq!(
        decide(&filters, "/b"),
        Err("incoming RPC matched a deny policy \"/b\"".to_owned())
    );
    assert_eq!(
        decide(&filters, "/c"),
        Err("incoming RPC did not match an allow policy".to_owned())
    );
}

#[derive(Default)]
struct Lines(Vec<String>);

impl AuditLogger for Lines {
    fn log(&mut self, _config: &AuditLoggerConfig, event: &AuditEvent<'_>) {
        self.0.push(event.stdout_line("T"));
    }
}

#[test]
fn audit_events_name_the_filter_instance_and_stop_at_the_refusal() {
    let audited = |action, path: &str| {
        let mut r = rules(action, vec![("p", path_policy(path))]);
        r.audit_logging_options = Some(rbac_pb::rbac::AuditLoggingOptions {
            audit_condition: 3,
            logger_configs: vec![logger(STDOUT, "out", false)],
        });
        config(r)
    };
    let http = [
        rbac_filter("first", audited(DENY, "/x")),
        rbac_filter("second", audited(ALLOW, "/a")),
        router(),
    ];
    let filters = ServerFilters::build(&http, [None, None, None]).unwrap();
    let mut lines = Lines::default();
    assert!(
        filters
            .authorize(&Req::path("/a").view(), &mut lines)
            .is_ok()
    );
    assert_eq!(lines.0.len(), 2);
    assert!(
        lines.0[0].contains("\"policy_name\":\"first\""),
        "{:?}",
        lines.0
    );
    assert!(
        lines.0[1]
            .contains("\"policy_name\":\"second\",\"matched_rule\":\"p\",\"authorized\":true")
    );
    // Denied by the first filter: the second never runs, nor audits.
    let mut lines = Lines::default();
    assert!(
        filters
            .authorize(&Req::path("/x").view(), &mut lines)
            .is_err()
    );
    assert_eq!(lines.0.len(), 1);
    assert!(
        lines.0[0]
            .contains("\"policy_name\":\"first\",\"matched_rule\":\"p\",\"authorized\":false")
    );
}
