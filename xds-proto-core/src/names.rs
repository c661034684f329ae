//! Resource names (gRFC A47): old-style names, and `xdstp://` names of the form
//! `xdstp://AUTHORITY/RESOURCE_TYPE/ID?CONTEXT_PARAMS`, which pick the authority (and
//! so the ordered server list) that serves them. This module parses them and puts them
//! in canonical form (context parameters sorted by key), so that the same resource
//! spelled two ways is one cache entry and one subscription.

use std::fmt;

/// The parsed form of an `xdstp://` resource name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdstpName<'a> {
    /// The authority, which may be empty.
    pub authority: &'a str,
    /// The resource type, e.g. `envoy.config.listener.v3.Listener`.
    pub resource_type: &'a str,
    /// The resource id: the path after the type, without the query.
    pub id: &'a str,
    /// The context parameters, sorted by key, then value.
    pub context_params: Vec<(&'a str, &'a str)>,
}

impl XdstpName<'_> {
    /// The canonical spelling: context parameters sorted, none when empty.
    pub fn canonical(&self) -> String {
        let mut out = format!(
            "xdstp://{}/{}/{}",
            self.authority, self.resource_type, self.id
        );
        for (i, (k, v)) in self.context_params.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
        out
    }
}

/// Why an `xdstp://` name was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameError {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid xdstp resource name {:?}: {}",
            self.name, self.reason
        )
    }
}

impl std::error::Error for NameError {}

/// Parses an `xdstp://` name. Returns `Ok(None)` for an old-style name.
pub fn parse_xdstp(name: &str) -> Result<Option<XdstpName<'_>>, NameError> {
    let Some(rest) = name.strip_prefix("xdstp://") else {
        return Ok(None);
    };
    let fail = |reason| NameError {
        name: name.to_string(),
        reason,
    };
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let path = path.split_once('#').map_or(path, |(p, _)| p);
    let (authority, after_authority) = path
        .split_once('/')
        .ok_or_else(|| fail("missing resource type"))?;
    let (resource_type, id) = after_authority
        .split_once('/')
        .unwrap_or((after_authority, ""));
    if resource_type.is_empty() {
        return Err(fail("missing resource type"));
    }
    let mut context_params = Vec::new();
    if let Some(query) = query {
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if k.is_empty() {
                return Err(fail("empty context parameter key"));
            }
            context_params.push((k, v));
        }
    }
    context_params.sort_unstable();
    Ok(Some(XdstpName {
        authority,
        resource_type,
        id,
        context_params,
    }))
}

/// The canonical form of a resource name: old-style names are returned as they are,
/// `xdstp://` names with their context parameters sorted.
pub fn canonicalize(name: &str) -> Result<std::borrow::Cow<'_, str>, NameError> {
    match parse_xdstp(name)? {
        None => Ok(std::borrow::Cow::Borrowed(name)),
        Some(parsed) => {
            let canonical = parsed.canonical();
            if canonical == name {
                Ok(std::borrow::Cow::Borrowed(name))
            } else {
                Ok(std::borrow::Cow::Owned(canonical))
            }
        }
    }
}

/// The message type a type URL names: `type.googleapis.com/a.b.C` → `a.b.C`.
pub fn message_type(type_url: &str) -> &str {
    type_url.rsplit_once('/').map_or(type_url, |(_, t)| t)
}

/// `s` as the `%s` of an `xdstp:` template (A47, for client targets and server
/// listening addresses alike): every byte RFC 3986 does not allow in a path (section
/// 3.3: unreserved, sub-delims, `:`, `@`, and `/`) as `%XX`, so `foo.example:8443`
/// stays as it is and `[::]:8080` becomes `%5B::%5D:8080`, as in gRPC-Go and C-core.
pub(crate) fn percent_encode_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let allowed = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
                    | b'/'
            );
        if allowed {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_style_names_are_left_alone() {
        assert_eq!(parse_xdstp("listener.example.com:443").unwrap(), None);
        assert_eq!(canonicalize("a?b=c").unwrap(), "a?b=c");
    }

    #[test]
    fn xdstp_names_are_parsed_and_context_params_sorted() {
        let n = parse_xdstp("xdstp://auth.example/envoy.config.listener.v3.Listener/svc/a?z=1&a=2")
            .unwrap()
            .unwrap();
        assert_eq!(n.authority, "auth.example");
        assert_eq!(n.resource_type, "envoy.config.listener.v3.Listener");
        assert_eq!(n.id, "svc/a");
        assert_eq!(n.context_params, vec![("a", "2"), ("z", "1")]);
        assert_eq!(
            n.canonical(),
            "xdstp://auth.example/envoy.config.listener.v3.Listener/svc/a?a=2&z=1"
        );
        assert_eq!(
            canonicalize("xdstp://auth.example/envoy.config.listener.v3.Listener/svc/a?z=1&a=2")
                .unwrap(),
            "xdstp://auth.example/envoy.config.listener.v3.Listener/svc/a?a=2&z=1"
        );
        let empty_authority = parse_xdstp("xdstp:///t.T/id").unwrap().unwrap();
        assert_eq!((empty_authority.authority, empty_authority.id), ("", "id"));
    }

    #[test]
    fn malformed_xdstp_names_are_rejected_with_a_reason() {
        for (name, reason) in [
            ("xdstp://auth", "missing resource type"),
            ("xdstp://auth/", "missing resource type"),
            ("xdstp://auth/t.T/id?=v", "empty context parameter key"),
        ] {
            let err = parse_xdstp(name).unwrap_err();
            assert_eq!(err.reason, reason, "{name}");
            assert_eq!(
                err.to_string(),
                format!("invalid xdstp resource name {name:?}: {reason}")
            );
        }
    }

    quickcheck::quickcheck! {
        fn canonical_form_is_a_fixed_point_and_ignores_param_order(params: Vec<(u8, u8)>) -> bool {
            let pairs: Vec<String> = params.iter().map(|(k, v)| format!("k{k}=v{v}")).collect();
            let mut reversed = pairs.clone();
            reversed.reverse();
            let a = format!("xdstp://auth/t.T/id?{}", pairs.join("&"));
            let b = format!("xdstp://auth/t.T/id?{}", reversed.join("&"));
            let ca = canonicalize(&a).unwrap().into_owned();
            ca == canonicalize(&b).unwrap() && canonicalize(&ca).unwrap() == ca
        }
    }
}
