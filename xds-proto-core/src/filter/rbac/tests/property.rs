//! A property: for arbitrary policies and requests over small domains (so that rules
//! do match), the engine decides as a naive evaluator that reads the protos directly,
//! with A41's mapping restated plainly (allocating, lower-casing, no shared code with
//! the engine beyond the protos).

use std::net::IpAddr;

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use route_pb::header_matcher::HeaderMatchSpecifier as Spec;

use super::*;
use matcher_pb::string_matcher::MatchPattern;

const PATHS: [&str; 3] = ["/a.S/M", "/a.S/N", "/b.T/M"];
const VALUES: [&str; 8] = ["", "1", "v", "V1", "a.S", "1,v", "v,1", "1,,v"];
/// Header values in requests: short, so that a header sent twice is often the joined
/// value some matcher names.
const REQUEST_VALUES: [&str; 3] = ["1", "v", ""];
const RULE_HEADERS: [&str; 11] = [
    "x-a",
    "x-a",
    "X-A",
    "X-B",
    ":path",
    "host",
    ":authority",
    "te",
    ":method",
    "content-type",
    ":other",
];
const REQUEST_HEADERS: [&str; 6] = ["x-a", "X-A", "x-b", "te", "content-type", "host"];
const LOCALS: [&str; 3] = ["10.0.0.1:80", "10.0.1.1:443", "[2001:db8::1]:8080"];
const PEERS: [&str; 3] = ["192.168.0.1:1", "[::ffff:192.168.0.1]:2", "[2001:db8::2]:3"];
const CIDRS: [(&str, u32); 7] = [
    ("10.0.0.0", 24),
    ("10.0.0.0", 16),
    ("192.168.0.0", 16),
    ("192.168.0.1", 32),
    ("2001:db8::", 32),
    ("::", 0),
    ("0.0.0.0", 0),
];
const IDENTITIES: [&str; 4] = ["spiffe://td/a", "spiffe://td/b", "a.example", "CN=a"];

fn pick<T: Clone>(g: &mut Gen, items: &[T]) -> T {
    g.choose(items).expect("non-empty").clone()
}

fn string_matcher(g: &mut Gen) -> matcher_pb::StringMatcher {
    let value = pick(g, &VALUES).to_owned();
    let pattern = match u8::arbitrary(g) % 4 {
        0 => MatchPattern::Exact(value),
        1 => MatchPattern::Prefix(value),
        2 => MatchPattern::Suffix(value),
        _ => MatchPattern::Contains(value),
    };
    matcher_pb::StringMatcher {
        match_pattern: Some(pattern),
        ignore_case: bool::arbitrary(g),
    }
}

fn header_matcher(g: &mut Gen) -> route_pb::HeaderMatcher {
    let spec = match u8::arbitrary(g) % 5 {
        0 => Spec::ExactMatch(pick(g, &VALUES).to_owned()),
        1 => Spec::PrefixMatch(pick(g, &VALUES).to_owned()),
        2 => Spec::PresentMatch(bool::arbitrary(g)),
        3 => Spec::RangeMatch(crate::pb::envoy::r#type::v3::Int64Range { start: 0, end: 2 }),
        _ => Spec::StringMatch(string_matcher(g)),
    };
    route_pb::HeaderMatcher {
        name: pick(g, &RULE_HEADERS).to_owned(),
        invert_match: bool::arbitrary(g),
        header_match_specifier: Some(spec),
        ..Default::default()
    }
}

fn cidr_range(g: &mut Gen) -> core_pb::CidrRange {
    let (address, len) = pick(g, &CIDRS);
    cidr(address, Some(len))
}

fn permission(g: &mut Gen, depth: usize) -> rbac_pb::Permission {
    let leaf = depth >= 3 || u8::arbitrary(g) % 3 != 0;
    let rule = if leaf {
        match u8::arbitrary(g) % 9 {
            0 => Rule::Any(true),
            1 => Rule::Header(header_matcher(g)),
            2 => Rule::UrlPath(url_path(string_matcher(g))),
            3 => Rule::DestinationIp(cidr_range(g)),
            4 => Rule::DestinationPort(pick(g, &[80, 443, 8080, 1])),
            5 => {
                let (start, end) = pick(g, &[(0, 81), (80, 443), (443, 444), (1000, 65536)]);
                Rule::DestinationPortRange(crate::pb::envoy::r#type::v3::Int32Range { start, end })
            }
            6 => Rule::Metadata(Default::default()),
            7 => Rule::RequestedServerName(string_matcher(g)),
            _ => Rule::Any(true),
        }
    } else {
        let n = usize::arbitrary(g) % 3 + 1;
        let rules = (0..n).map(|_| permission(g, depth + 1)).collect();
        match u8::arbitrary(g) % 3 {
            0 => Rule::AndRules(rbac_pb::permission::Set { rules }),
            1 => Rule::OrRules(rbac_pb::permission::Set { rules }),
            _ => Rule::NotRule(Box::new(permission(g, depth + 1))),
        }
    };
    perm(rule)
}

fn principal(g: &mut Gen, depth: usize) -> rbac_pb::Principal {
    let leaf = depth >= 3 || u8::arbitrary(g) % 3 != 0;
    let id = if leaf {
        match u8::arbitrary(g) % 9 {
            0 => Id::Any(true),
            1 => Id::Authenticated(rbac_pb::principal::Authenticated {
                principal_name: bool::arbitrary(g).then(|| {
                    let mut m = string_matcher(g);
                    if bool::arbitrary(g) {
                        m.match_pattern =
                            Some(MatchPattern::Exact(pick(g, &IDENTITIES).to_owned()));
                    }
                    m
                }),
            }),
            2 => Id::SourceIp(cidr_range(g)),
            3 => Id::DirectRemoteIp(cidr_range(g)),
            4 => Id::RemoteIp(cidr_range(g)),
            5 => Id::Header(header_matcher(g)),
            6 => Id::UrlPath(url_path(string_matcher(g))),
            7 => Id::Metadata(Default::default()),
            _ => Id::Any(true),
        }
    } else {
        let n = usize::arbitrary(g) % 3 + 1;
        let ids = (0..n).map(|_| principal(g, depth + 1)).collect();
        match u8::arbitrary(g) % 3 {
            0 => Id::AndIds(rbac_pb::principal::Set { ids }),
            1 => Id::OrIds(rbac_pb::principal::Set { ids }),
            _ => Id::NotId(Box::new(principal(g, depth + 1))),
        }
    };
    princ(id)
}

fn request(g: &mut Gen) -> Req {
    let n = usize::arbitrary(g) % 5;
    let headers = (0..n)
        .map(|_| {
            (
                pick(g, &REQUEST_HEADERS).to_owned(),
                pick(g, &REQUEST_VALUES).to_owned(),
            )
        })
        .collect();
    let tls = match u8::arbitrary(g) % 3 {
        0 => None,
        1 => Some(None),
        _ => {
            let sans = (0..usize::arbitrary(g) % 3)
                .map(|_| match pick(g, &IDENTITIES) {
                    id if id.starts_with("spiffe") => SubjectAltName::Uri(id.to_owned()),
                    id => SubjectAltName::Dns(id.to_owned()),
                })
                .collect();
            Some(Some((sans, pick(g, &["CN=a", "", "v"]).to_owned())))
        }
    };
    Req {
        path: pick(g, &PATHS).to_owned(),
        method: pick(g, &["POST", "GET"]).to_owned(),
        authority: pick(g, &[None, Some("v".to_owned()), Some("a.S".to_owned())]),
        headers,
        local: pick(g, &LOCALS).parse().unwrap(),
        peer: pick(g, &PEERS).parse().unwrap(),
        tls,
    }
}

#[derive(Clone, Debug)]
struct Case {
    rules: rbac_pb::Rbac,
    requests: Vec<Req>,
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let policies = (0..usize::arbitrary(g) % 4)
            .map(|i| {
                let permissions = (0..usize::arbitrary(g) % 3 + 1)
                    .map(|_| permission(g, 0))
                    .collect();
                let principals = (0..usize::arbitrary(g) % 3 + 1)
                    .map(|_| principal(g, 0))
                    .collect();
                (
                    format!("p{}", (i * 7 + 3) % 5),
                    policy(permissions, principals),
                )
            })
            .collect::<Vec<_>>();
        let action = pick(g, &[ALLOW, ALLOW, DENY, DENY, LOG]);
        let rules = rules(
            action,
            policies
                .iter()
                .map(|(n, p)| (n.as_str(), p.clone()))
                .collect(),
        );
        let requests = (0..8).map(|_| request(g)).collect();
        Case { rules, requests }
    }
}

// --- The naive evaluator -------------------------------------------------------------

fn naive_string(m: &matcher_pb::StringMatcher, value: &str) -> bool {
    let fold = |s: &str| {
        if m.ignore_case {
            s.to_lowercase()
        } else {
            s.to_owned()
        }
    };
    let value = fold(value);
    match m.match_pattern.as_ref().unwrap() {
        MatchPattern::Exact(v) => value == fold(v),
        MatchPattern::Prefix(v) => value.starts_with(&fold(v)),
        MatchPattern::Suffix(v) => value.ends_with(&fold(v)),
        MatchPattern::Contains(v) => value.contains(&fold(v)),
        other => panic!("not generated: {other:?}"),
    }
}

fn naive_header_value(req: &Req, name: &str) -> Option<String> {
    let name = name.to_lowercase();
    match name.as_str() {
        ":authority" | "host" => req.authority.clone(),
        ":path" => Some(req.path.clone()),
        ":method" => Some(req.method.clone()),
        "te" | "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding"
        | "upgrade" => None,
        n if n.starts_with(':') => None,
        n => {
            let values: Vec<&str> = req
                .headers
                .iter()
                .filter(|(k, _)| k.to_lowercase() == n)
                .map(|(_, v)| v.as_str())
                .collect();
            (!values.is_empty()).then(|| values.join(","))
        }
    }
}

fn naive_header(h: &route_pb::HeaderMatcher, req: &Req) -> bool {
    let value = naive_header_value(req, &h.name);
    let spec = h.header_match_specifier.as_ref().unwrap();
    if let Spec::PresentMatch(p) = spec {
        return (value.is_some() == *p) != h.invert_match;
    }
    let Some(value) = value else { return false };
    let matched = match spec {
        Spec::ExactMatch(v) => value == *v,
        Spec::PrefixMatch(v) => value.starts_with(v.as_str()),
        Spec::RangeMatch(r) => value
            .trim()
            .parse::<i64>()
            .is_ok_and(|n| r.start <= n && n < r.end),
        Spec::StringMatch(m) => naive_string(m, &value),
        other => panic!("not generated: {other:?}"),
    };
    matched != h.invert_match
}

fn naive_cidr(c: &core_pb::CidrRange, ip: IpAddr) -> bool {
    let base: IpAddr = c.address_prefix.parse().unwrap();
    let len = c.prefix_len.as_ref().map_or(0, |l| l.value);
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let bits = |a: IpAddr| match a {
        IpAddr::V4(v4) => (32u32, u128::from(u32::from(v4)) << 96),
        IpAddr::V6(v6) => (128u32, u128::from(v6)),
    };
    let ((w1, a), (w2, b)) = (bits(base), bits(ip));
    w1 == w2 && (len == 0 || (a >> (128 - len)) == (b >> (128 - len)))
}

fn naive_permission(p: &rbac_pb::Permission, req: &Req) -> bool {
    match p.rule.as_ref().unwrap() {
        Rule::Any(_) => true,
        Rule::AndRules(s) => s.rules.iter().all(|r| naive_permission(r, req)),
        Rule::OrRules(s) => s.rules.iter().any(|r| naive_permission(r, req)),
        Rule::NotRule(r) => !naive_permission(r, req),
        Rule::Header(h) => naive_header(h, req),
        Rule::UrlPath(u) => match u.rule.as_ref().unwrap() {
            matcher_pb::path_matcher::Rule::Path(m) => naive_string(m, &req.path),
        },
        Rule::DestinationIp(c) => naive_cidr(c, req.local.ip()),
        Rule::DestinationPort(port) => u32::from(req.local.port()) == *port,
        Rule::DestinationPortRange(r) => {
            let port = i32::from(req.local.port());
            r.start <= port && port < r.end
        }
        Rule::Metadata(_) => false,
        Rule::RequestedServerName(m) => naive_string(m, ""),
        other => panic!("not generated: {other:?}"),
    }
}

fn naive_principal(p: &rbac_pb::Principal, req: &Req) -> bool {
    match p.identifier.as_ref().unwrap() {
        Id::Any(_) => true,
        Id::AndIds(s) => s.ids.iter().all(|r| naive_principal(r, req)),
        Id::OrIds(s) => s.ids.iter().any(|r| naive_principal(r, req)),
        Id::NotId(r) => !naive_principal(r, req),
        Id::Authenticated(a) => match (&req.tls, &a.principal_name) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(None), Some(m)) => naive_string(m, ""),
            (Some(Some((sans, subject))), Some(m)) => {
                let uris = sans.iter().filter_map(|s| match s {
                    SubjectAltName::Uri(u) => Some(u.as_str()),
                    _ => None,
                });
                let dns = sans.iter().filter_map(|s| match s {
                    SubjectAltName::Dns(d) => Some(d.as_str()),
                    _ => None,
                });
                uris.chain(dns)
                    .chain([subject.as_str()])
                    .any(|id| naive_string(m, id))
            }
        },
        Id::SourceIp(c) | Id::DirectRemoteIp(c) | Id::RemoteIp(c) => naive_cidr(c, req.peer.ip()),
        Id::Header(h) => naive_header(h, req),
        Id::UrlPath(u) => match u.rule.as_ref().unwrap() {
            matcher_pb::path_matcher::Rule::Path(m) => naive_string(m, &req.path),
        },
        Id::Metadata(_) => false,
        other => panic!("not generated: {other:?}"),
    }
}

/// (allowed, matched policy) as A41 says, from the protos.
fn naive_decision(rules: &rbac_pb::Rbac, req: &Req) -> (bool, Option<String>) {
    if rules.action == LOG {
        return (true, None);
    }
    let mut names: Vec<&String> = rules.policies.keys().collect();
    names.sort();
    let matched = names.into_iter().find(|name| {
        let p = &rules.policies[*name];
        p.permissions.iter().any(|x| naive_permission(x, req))
            && p.principals.iter().any(|x| naive_principal(x, req))
    });
    let allowed = (rules.action == ALLOW) == matched.is_some();
    (allowed, matched.cloned())
}

fn engine_agrees_with_naive(case: Case) -> TestResult {
    let engine = config(case.rules.clone());
    for req in &case.requests {
        let decision = engine.evaluate(&req.view());
        let got = (decision.allowed, decision.matched_policy.map(str::to_owned));
        let want = naive_decision(&case.rules, req);
        if got != want {
            return TestResult::error(format!("engine {got:?}, naive {want:?} for {req:?}"));
        }
    }
    TestResult::passed()
}

#[test]
fn the_engine_decides_as_a_naive_evaluator_of_the_protos() {
    QuickCheck::new()
        .tests(2_000)
        .r#gen(Gen::new(8))
        .quickcheck(engine_agrees_with_naive as fn(Case) -> TestResult);
}

/// The generator reaches both outcomes often enough for the property to mean something.
#[test]
fn generated_cases_both_allow_and_deny() {
    let mut g = Gen::new(8);
    let (mut allowed, mut denied, mut matched) = (0, 0, 0);
    for _ in 0..300 {
        let case = Case::arbitrary(&mut g);
        for req in &case.requests {
            let (a, m) = naive_decision(&case.rules, req);
            if a {
                allowed += 1
            } else {
                denied += 1
            }
            matched += usize::from(m.is_some());
        }
    }
    assert!(
        allowed > 300 && denied > 300 && matched > 300,
        "{allowed} {denied} {matched}"
    );
}
