//! Server authorization (gRFC A29's "Subject-Alt-Name checks", A101's SNI check): a
//! certificate's subject alternative names against a list of string matchers.
//!
//! The rules, from A29: an empty matcher list accepts every certificate; a certificate
//! without SANs is refused; DNS, URI, email and IP SANs are considered, an IP as its
//! canonical text (RFC 5952 for IPv6: `2001:DB8:0::01` is `2001:db8::1`); an empty SAN
//! never matches; an `exact` matcher matches a DNS SAN by DNS rules (case-insensitive,
//! a trailing dot ignored, a `*.` wildcard in the SAN's left-most label matching one
//! label), and every other pairing by the matcher's own semantics (`ignore_case`
//! included).
//!
//! Where gRPC-Go and C-core differ: C-core's TLS layer does not keep the SAN types, so
//! it applies the DNS rules to an `exact` match of *every* SAN (an `exact` URI matcher
//! then ignores case); gRPC-Go applies them to DNS SANs only. This module follows
//! gRPC-Go: the adapter passes typed SANs, and a SPIFFE ID's path stays case-sensitive.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use crate::resource::route::StringMatcher;
use crate::selector::string_matches;

/// One subject alternative name of a certificate, typed as X.509 types it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SubjectAltName {
    /// `dNSName`, possibly a wildcard pattern (`*.example.com`).
    Dns(String),
    /// `uniformResourceIdentifier`, e.g. a SPIFFE ID.
    Uri(String),
    /// `rfc822Name`.
    Email(String),
    /// `iPAddress`.
    Ip(IpAddr),
}

impl SubjectAltName {
    /// The text the matchers see: the name itself, or an IP address in its canonical
    /// form (RFC 5952 for IPv6, as Rust's `Display` writes it).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            SubjectAltName::Dns(s) | SubjectAltName::Uri(s) | SubjectAltName::Email(s) => {
                Cow::Borrowed(s)
            }
            SubjectAltName::Ip(ip) => Cow::Owned(ip.to_string()),
        }
    }
}

impl fmt::Display for SubjectAltName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            SubjectAltName::Dns(_) => "DNS",
            SubjectAltName::Uri(_) => "URI",
            SubjectAltName::Email(_) => "email",
            SubjectAltName::Ip(_) => "IP",
        };
        write!(f, "{kind}:{}", self.text())
    }
}

/// Whether a certificate with these SANs passes A29's check against `matchers`.
pub fn sans_match(matchers: &[StringMatcher], sans: &[SubjectAltName]) -> bool {
    if matchers.is_empty() {
        return true;
    }
    sans.iter().any(|san| {
        let text = san.text();
        !text.is_empty() && matchers.iter().any(|m| san_matches(m, san, &text))
    })
}

/// One SAN (with its text) against one matcher.
fn san_matches(matcher: &StringMatcher, san: &SubjectAltName, text: &str) -> bool {
    match (matcher, san) {
        (StringMatcher::Exact { value, .. }, SubjectAltName::Dns(pattern)) => {
            dns_name_matches(pattern, value)
        }
        _ => string_matches(matcher, text),
    }
}

/// Whether the DNS SAN `pattern` (possibly `*.`-wildcarded) covers the name `name`, by
/// the rules A29 adopts from RFC 6125 (as gRPC-Go's `dnsMatch` and C-core's
/// `VerifySubjectAlternativeName` apply them): both are made absolute (a trailing dot)
/// and compared ASCII case-insensitively; a wildcard is allowed only as the whole
/// left-most label of a pattern with at least two labels, and matches exactly one
/// non-empty label. Empty names, and names or patterns starting with a dot, match
/// nothing.
pub fn dns_name_matches(pattern: &str, name: &str) -> bool {
    if pattern.is_empty() || name.is_empty() || pattern.starts_with('.') || name.starts_with('.') {
        return false;
    }
    let pattern = absolute_lowercase(pattern);
    let name = absolute_lowercase(name);
    if !pattern.contains('*') {
        return pattern == name;
    }
    // "*." followed by at least one more label, and no other '*'.
    let Some(suffix) = pattern.strip_prefix('*') else {
        return false;
    };
    if !suffix.starts_with('.') || suffix == "." || suffix.contains('*') {
        return false;
    }
    match name.strip_suffix(suffix) {
        Some(label) => !label.is_empty() && !label.contains('.'),
        None => false,
    }
}

/// `s` lowercased (ASCII) with a trailing dot.
fn absolute_lowercase(s: &str) -> String {
    let mut out = s.to_ascii_lowercase();
    if !out.ends_with('.') {
        out.push('.');
    }
    out
}

/// The SANs of a refused certificate and what they were checked against: the
/// "certificate check failure" of A29, with enough detail to fix the config or the
/// certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SanMismatch {
    /// The certificate's SANs (an empty list when it had none).
    pub sans: Vec<SubjectAltName>,
    /// What they had to match: the SNI (A101) or the configured matchers.
    pub expected: String,
}

impl fmt::Display for SanMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("certificate check failure: ")?;
        if self.sans.is_empty() {
            return write!(
                f,
                "the certificate has no subject alternative names (expected a match for {})",
                self.expected
            );
        }
        f.write_str("subject alternative names [")?;
        for (i, san) in self.sans.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{san}")?;
        }
        write!(f, "] match none of {}", self.expected)
    }
}

impl std::error::Error for SanMismatch {}

/// A short description of a matcher list for [`SanMismatch::expected`].
pub(super) fn describe_matchers(matchers: &[StringMatcher]) -> String {
    let parts: Vec<String> = matchers.iter().map(describe_matcher).collect();
    format!("[{}]", parts.join(", "))
}

/// One matcher as `exact "x"`, `prefix "x" (ignore_case)`, `safe_regex "x"`...
pub fn describe_matcher(matcher: &StringMatcher) -> String {
    let (kind, value, ignore_case) = match matcher {
        StringMatcher::Exact { value, ignore_case } => ("exact", value.as_str(), *ignore_case),
        StringMatcher::Prefix { value, ignore_case } => ("prefix", value.as_str(), *ignore_case),
        StringMatcher::Suffix { value, ignore_case } => ("suffix", value.as_str(), *ignore_case),
        StringMatcher::Contains { value, ignore_case } => {
            ("contains", value.as_str(), *ignore_case)
        }
        StringMatcher::SafeRegex(r) => ("safe_regex", r.pattern(), false),
    };
    if ignore_case {
        format!("{kind} {value:?} (ignore_case)")
    } else {
        format!("{kind} {value:?}")
    }
}
