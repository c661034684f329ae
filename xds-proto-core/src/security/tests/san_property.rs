//! Property tests of the SAN check against a reference model written from A29's text:
//! random certificates (SAN sets) and matcher lists over a small alphabet, so that
//! matches, near-misses and wildcards are all common.

use std::net::IpAddr;

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

use super::*;
use crate::security::{SubjectAltName, sans_match};
use matcher_pb::string_matcher::MatchPattern;

const LABELS: &[&str] = &["a", "B", "xy", "*", "a*", ""];
const IPS: &[&str] = &[
    "10.0.0.1",
    "10.0.0.2",
    "2001:db8::1",
    "::1",
    "::ffff:10.0.0.1",
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Exact,
    Prefix,
    Suffix,
    Contains,
    Regex,
}

/// A matcher as the model sees it.
#[derive(Clone, Debug)]
struct Spec {
    kind: Kind,
    value: String,
    ignore_case: bool,
}

thread_local! {
    /// Matchers and model regexes already built: the value space is small, and a regex
    /// compiles slowly in a debug build.
    static MATCHERS: std::cell::RefCell<std::collections::HashMap<String, StringMatcher>> =
        Default::default();
    static REGEXES: std::cell::RefCell<std::collections::HashMap<String, regex::Regex>> =
        Default::default();
}

impl Spec {
    fn to_matcher(&self) -> StringMatcher {
        let key = format!("{:?}/{}/{}", self.kind, self.ignore_case, self.value);
        MATCHERS.with(|m| {
            m.borrow_mut()
                .entry(key)
                .or_insert_with(|| self.build_matcher())
                .clone()
        })
    }

    fn build_matcher(&self) -> StringMatcher {
        let v = self.value.clone();
        let pattern = match self.kind {
            Kind::Exact => MatchPattern::Exact(v),
            Kind::Prefix => MatchPattern::Prefix(v),
            Kind::Suffix => MatchPattern::Suffix(v),
            Kind::Contains => MatchPattern::Contains(v),
            Kind::Regex => MatchPattern::SafeRegex(matcher_pb::RegexMatcher {
                regex: v,
                ..Default::default()
            }),
        };
        matcher(pattern, self.ignore_case)
    }
}

fn pick<'a>(g: &mut Gen, items: &'a [&'a str]) -> &'a str {
    g.choose(items).copied().unwrap_or_default()
}

fn dns_name(g: &mut Gen) -> String {
    let n = 1 + usize::from(u8::arbitrary(g) % 3);
    let mut name: Vec<&str> = (0..n).map(|_| pick(g, LABELS)).collect();
    // Wildcard patterns often: they carry most of the DNS rules.
    if u8::arbitrary(g) % 3 == 0 {
        name[0] = "*";
    }
    if u8::arbitrary(g) % 8 == 0 {
        name.push("");
    }
    name.join(".")
}

fn san(g: &mut Gen) -> SubjectAltName {
    match u8::arbitrary(g) % 4 {
        0 | 1 => SubjectAltName::Dns(dns_name(g)),
        2 => SubjectAltName::Uri(format!("spiffe://td/{}", pick(g, LABELS))),
        _ => match bool::arbitrary(g) {
            true => SubjectAltName::Email(format!("{}@a.B", pick(g, LABELS))),
            false => SubjectAltName::Ip(pick(g, IPS).parse::<IpAddr>().unwrap()),
        },
    }
}

fn kind(g: &mut Gen) -> Kind {
    *g.choose(&[
        Kind::Exact,
        Kind::Exact,
        Kind::Prefix,
        Kind::Suffix,
        Kind::Contains,
        Kind::Regex,
    ])
    .unwrap()
}

/// A matcher whose value comes from the SAN vocabulary (or a piece of it).
fn spec(g: &mut Gen) -> Spec {
    let kind = kind(g);
    let text = san(g).text().into_owned();
    let value = match kind {
        Kind::Exact => text,
        Kind::Regex => {
            let escaped = regex::escape(&text);
            if bool::arbitrary(g) {
                escaped
            } else {
                format!(
                    "{}.*",
                    &escaped[..escaped.len().min(4)].trim_end_matches('\\')
                )
            }
        }
        _ => {
            let cut = usize::from(u8::arbitrary(g)) % (text.len() + 1);
            let piece = if bool::arbitrary(g) {
                &text[..cut]
            } else {
                &text[cut..]
            };
            piece.to_owned()
        }
    };
    Spec {
        kind,
        value,
        ignore_case: kind != Kind::Regex && bool::arbitrary(g),
    }
}

#[derive(Clone, Debug)]
struct Case {
    sans: Vec<SubjectAltName>,
    specs: Vec<Spec>,
}

/// A text near one of `sans`: the SAN's text with a label added in front, the first
/// label dropped or replaced (a wildcard filled in), or its case changed — the
/// near-misses and near-hits of the DNS rules.
fn related(g: &mut Gen, sans: &[SubjectAltName]) -> Option<String> {
    let text = g.choose(sans)?.text().into_owned();
    let label = pick(g, &["a", "xy", "q", ""]);
    if text.starts_with("*.") && bool::arbitrary(g) {
        // A name for the wildcard: one label (a hit), or two (a miss).
        let extra = if bool::arbitrary(g) { "a." } else { "" };
        return Some(text.replacen('*', &format!("{extra}{label}"), 1));
    }
    Some(match u8::arbitrary(g) % 5 {
        0 => format!("{label}.{text}"),
        1 => text
            .split_once('.')
            .map_or(text.clone(), |(_, rest)| rest.to_owned()),
        2 => text
            .split_once('.')
            .map_or(text.clone(), |(_, rest)| format!("{label}.{rest}")),
        3 => text.to_ascii_uppercase(),
        _ => text.replacen('*', label, 1),
    })
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let sans: Vec<SubjectAltName> = (0..u8::arbitrary(g) % 4).map(|_| san(g)).collect();
        let specs = (0..u8::arbitrary(g) % 4)
            .map(|_| {
                let mut spec = spec(g);
                if spec.kind != Kind::Regex
                    && bool::arbitrary(g)
                    && let Some(text) = related(g, &sans)
                {
                    spec.value = text;
                }
                spec
            })
            .collect();
        Case { sans, specs }
    }
}

// ----- the reference model -------------------------------------------------

/// A DNS name's labels, lowercased, one trailing dot dropped; `None` for a name that
/// is empty or starts with a dot.
fn labels(s: &str) -> Option<Vec<String>> {
    if s.is_empty() || s.starts_with('.') {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let trimmed = lower.strip_suffix('.').unwrap_or(&lower);
    Some(trimmed.split('.').map(str::to_owned).collect())
}

/// RFC 6125 as A29 adopts it, label by label.
fn model_dns(pattern: &str, name: &str) -> bool {
    let (Some(p), Some(n)) = (labels(pattern), labels(name)) else {
        return false;
    };
    if !pattern.contains('*') {
        return p == n;
    }
    p.len() >= 2
        && p[0] == "*"
        && p[1..].iter().all(|l| !l.contains('*'))
        && p.len() == n.len()
        && !n[0].is_empty()
        && p[1..] == n[1..]
}

fn model_string(spec: &Spec, text: &str) -> bool {
    let (t, v) = if spec.ignore_case {
        (text.to_ascii_lowercase(), spec.value.to_ascii_lowercase())
    } else {
        (text.to_owned(), spec.value.clone())
    };
    match spec.kind {
        Kind::Exact => t == v,
        Kind::Prefix => t.starts_with(&v),
        Kind::Suffix => t.ends_with(&v),
        Kind::Contains => t.contains(&v),
        Kind::Regex => REGEXES.with(|r| {
            r.borrow_mut()
                .entry(spec.value.clone())
                .or_insert_with(|| regex::Regex::new(&format!("^(?:{})$", spec.value)).unwrap())
                .is_match(text)
        }),
    }
}

fn model_accepts(specs: &[Spec], sans: &[SubjectAltName]) -> bool {
    if specs.is_empty() {
        return true;
    }
    for san in sans {
        let text = match san {
            SubjectAltName::Ip(ip) => ip.to_string(),
            SubjectAltName::Dns(s) | SubjectAltName::Uri(s) | SubjectAltName::Email(s) => s.clone(),
        };
        if text.is_empty() {
            continue;
        }
        for spec in specs {
            let hit = match (spec.kind, san) {
                (Kind::Exact, SubjectAltName::Dns(pattern)) => model_dns(pattern, &spec.value),
                _ => model_string(spec, &text),
            };
            if hit {
                return true;
            }
        }
    }
    false
}

fn matchers(specs: &[Spec]) -> Vec<StringMatcher> {
    specs.iter().map(Spec::to_matcher).collect()
}

// ----- properties ----------------------------------------------------------

#[test]
fn the_san_check_agrees_with_the_model() {
    fn prop(case: Case) -> bool {
        let got = sans_match(&matchers(&case.specs), &case.sans);
        let want = model_accepts(&case.specs, &case.sans);
        assert_eq!(got, want, "{case:?}");
        true
    }
    QuickCheck::new()
        .tests(1000)
        .quickcheck(prop as fn(Case) -> bool);
}

/// A matcher derived from one of the certificate's SANs so that it matches it: the
/// certificate is accepted, whatever the other matchers.
#[test]
fn a_certificate_whose_sans_satisfy_a_matcher_is_accepted() {
    fn prop(case: Case, index: u8, kind_pick: u8) -> TestResult {
        let candidates: Vec<&SubjectAltName> =
            case.sans.iter().filter(|s| !s.text().is_empty()).collect();
        if candidates.is_empty() {
            return TestResult::discard();
        }
        let san = candidates[usize::from(index) % candidates.len()];
        let text = san.text().into_owned();
        let derived = match (kind_pick % 5, san) {
            // An exact DNS match: a concrete name the SAN (maybe a wildcard) covers.
            (0, SubjectAltName::Dns(pattern)) => Spec {
                kind: Kind::Exact,
                value: pattern.replacen('*', "host", 1).to_ascii_uppercase(),
                ignore_case: false,
            },
            (0, _) => Spec {
                kind: Kind::Exact,
                value: text.clone(),
                ignore_case: false,
            },
            (1, _) => Spec {
                kind: Kind::Prefix,
                value: text[..text.len() / 2].to_owned(),
                ignore_case: false,
            },
            (2, _) => Spec {
                kind: Kind::Suffix,
                value: text[text.len() / 2..].to_ascii_uppercase(),
                ignore_case: true,
            },
            (3, _) => Spec {
                kind: Kind::Contains,
                value: text[text.len() / 3..(2 * text.len()).div_ceil(3)].to_owned(),
                ignore_case: false,
            },
            _ => Spec {
                kind: Kind::Regex,
                value: regex::escape(&text),
                ignore_case: false,
            },
        };
        if !model_accepts(std::slice::from_ref(&derived), std::slice::from_ref(san)) {
            // A DNS pattern that is no valid wildcard covers no concrete name.
            return TestResult::discard();
        }
        let mut specs = case.specs.clone();
        let at = usize::from(index) % (specs.len() + 1);
        specs.insert(at, derived);
        TestResult::from_bool(sans_match(&matchers(&specs), &case.sans))
    }
    QuickCheck::new()
        .tests(1000)
        .quickcheck(prop as fn(Case, u8, u8) -> TestResult);
}

/// Matchers built from text no SAN can contain (`zq` is outside the alphabet, and a
/// single label covers no multi-label wildcard): the certificate is refused.
#[test]
fn a_certificate_whose_sans_satisfy_no_matcher_is_refused() {
    fn prop(case: Case, kinds: Vec<u8>) -> TestResult {
        if kinds.is_empty() {
            return TestResult::discard();
        }
        let specs: Vec<Spec> = kinds
            .iter()
            .take(4)
            .map(|k| {
                let kind = [
                    Kind::Exact,
                    Kind::Prefix,
                    Kind::Suffix,
                    Kind::Contains,
                    Kind::Regex,
                ][usize::from(*k) % 5];
                Spec {
                    kind,
                    value: if kind == Kind::Regex {
                        "zq.*".into()
                    } else {
                        "zq".into()
                    },
                    ignore_case: kind != Kind::Regex && k % 2 == 0,
                }
            })
            .collect();
        assert!(!model_accepts(&specs, &case.sans), "{case:?} {specs:?}");
        TestResult::from_bool(!sans_match(&matchers(&specs), &case.sans))
    }
    QuickCheck::new()
        .tests(500)
        .quickcheck(prop as fn(Case, Vec<u8>) -> TestResult);
}
