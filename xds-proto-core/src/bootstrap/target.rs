//! Data-plane targets (gRFC A47): how `xds:///foo.example` or `xds://authority/foo`
//! becomes the listener name to watch, through the bootstrap's listener name templates,
//! and the data-plane authority that chooses virtual hosts.

use std::fmt;

use super::Bootstrap;

/// What a data-plane target resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedTarget {
    /// The listener to watch: the template with `%s` replaced by the target's path
    /// (percent-encoded when the template is an `xdstp:` name).
    pub listener_name: String,
    /// The target's path, which picks virtual hosts by domain (e.g. `foo.example:8443`).
    pub data_plane_authority: String,
}

/// Why a target names no listener.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TargetError {
    /// The target's scheme is not `xds` (the string is what it has instead, empty for
    /// none).
    NotXds(String),
    /// The target's path, the service it names, is empty (`xds:///`).
    EmptyPath,
    /// A `%` in the path starts no valid `%XX` escape.
    BadPercentEscape,
    /// The target names an authority the bootstrap's `authorities` does not define.
    UnknownAuthority(String),
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::NotXds(scheme) if scheme.is_empty() => {
                f.write_str("not an xds: target (no scheme)")
            }
            TargetError::NotXds(scheme) => write!(f, "not an xds: target (scheme {scheme:?})"),
            TargetError::EmptyPath => f.write_str("the target names no service (empty path)"),
            TargetError::BadPercentEscape => {
                f.write_str("the target's path has a % that starts no %XX escape")
            }
            TargetError::UnknownAuthority(name) => {
                write!(
                    f,
                    "authority {name:?} is not in the bootstrap's authorities"
                )
            }
        }
    }
}

impl std::error::Error for TargetError {}

impl Bootstrap {
    /// The listener name and data-plane authority of `target` (gRFC A47).
    ///
    /// `xds:///foo` (or `xds:foo`) uses `client_default_listener_resource_name_template`;
    /// `xds://authority/foo` uses that authority's
    /// `client_listener_resource_name_template`. `%s` is replaced by the target's path
    /// (its `%XX` escapes decoded, without the leading `/`), percent-encoded again when
    /// the template starts with `xdstp:`.
    ///
    /// # Errors
    /// A [`TargetError`] naming the problem.
    pub fn resolve_target(&self, target: &str) -> Result<ResolvedTarget, TargetError> {
        let (authority, path) = split_target(target)?;
        let path = percent_decode(path)?;
        if path.is_empty() {
            return Err(TargetError::EmptyPath);
        }
        let template = match authority {
            None => &self.client_default_listener_resource_name_template,
            Some(name) => {
                let config = self
                    .authorities
                    .get(name)
                    .ok_or_else(|| TargetError::UnknownAuthority(name.to_owned()))?;
                &config.client_listener_resource_name_template
            }
        };
        let replacement = if template.starts_with("xdstp:") {
            crate::names::percent_encode_path(&path)
        } else {
            path.clone()
        };
        Ok(ResolvedTarget {
            listener_name: template.replace("%s", &replacement),
            data_plane_authority: path,
        })
    }

    /// The listener name of `target`; see [`resolve_target`](Self::resolve_target).
    ///
    /// # Errors
    /// As for [`resolve_target`](Self::resolve_target).
    pub fn listener_name_for_target(&self, target: &str) -> Result<String, TargetError> {
        self.resolve_target(target).map(|r| r.listener_name)
    }
}

/// The authority (`None` when absent or empty) and the path (without its leading `/`,
/// query or fragment) of an `xds:` target.
fn split_target(target: &str) -> Result<(Option<&str>, &str), TargetError> {
    let Some(rest) = target.strip_prefix("xds:") else {
        let scheme = target.split_once(':').map_or("", |(s, _)| s);
        return Err(TargetError::NotXds(scheme.to_owned()));
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let Some(hierarchical) = rest.strip_prefix("//") else {
        return Ok((None, rest.strip_prefix('/').unwrap_or(rest)));
    };
    let (authority, path) = hierarchical.split_once('/').unwrap_or((hierarchical, ""));
    Ok(((!authority.is_empty()).then_some(authority), path))
}

/// `path` with its `%XX` escapes decoded.
fn percent_decode(path: &str) -> Result<String, TargetError> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = path
                .get(i + 1..i + 3)
                .ok_or(TargetError::BadPercentEscape)?;
            let byte = u8::from_str_radix(hex, 16).map_err(|_| TargetError::BadPercentEscape)?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| TargetError::BadPercentEscape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bootstrap(extra: &str) -> Bootstrap {
        Bootstrap::from_json_str(&format!(
            r#"{{"xds_servers": [{{"server_uri": "xds.example:443", "channel_creds": [{{"type": "insecure"}}]}}]{extra}}}"#
        ))
        .unwrap()
    }

    fn listener(b: &Bootstrap, target: &str) -> String {
        b.listener_name_for_target(target)
            .unwrap_or_else(|e| panic!("{target}: {e}"))
    }

    #[test]
    fn a_target_without_authority_uses_the_default_template() {
        let b = bootstrap("");
        assert_eq!(listener(&b, "xds:///foo.example"), "foo.example");
        assert_eq!(listener(&b, "xds:///foo.example:8443"), "foo.example:8443");
        assert_eq!(listener(&b, "xds:foo.example"), "foo.example");
        assert_eq!(listener(&b, "xds:///foo%20bar"), "foo bar", "decoded");
        assert_eq!(listener(&b, "xds:///foo?x=1"), "foo", "no query");
        let resolved = b.resolve_target("xds:///foo.example:8443").unwrap();
        assert_eq!(resolved.data_plane_authority, "foo.example:8443");

        let b =
            bootstrap(r#", "client_default_listener_resource_name_template": "prefix/%s/suffix""#);
        assert_eq!(listener(&b, "xds:///svc"), "prefix/svc/suffix");
    }

    #[test]
    fn an_xdstp_default_template_percent_encodes_the_path() {
        let b = bootstrap(
            r#", "client_default_listener_resource_name_template": "xdstp://auth.example/envoy.config.listener.v3.Listener/%s""#,
        );
        assert_eq!(
            listener(&b, "xds:///foo.example:8443/a b~_-"),
            "xdstp://auth.example/envoy.config.listener.v3.Listener/foo.example:8443/a%20b~_-"
        );
    }

    #[test]
    fn an_xdstp_name_keeps_what_a_path_allows_as_grpc_does() {
        // RFC 3986 §3.3: `:` and `@` and the sub-delims stay; brackets, spaces and
        // non-ASCII bytes are escaped. gRPC-Go (`url.PathEscape` per segment) and
        // C-core request `foo.example:8443` for the first: a `%3A` would name another
        // resource.
        let b = bootstrap(
            r#", "client_default_listener_resource_name_template": "xdstp://auth.example/envoy.config.listener.v3.Listener/%s""#,
        );
        let name = |t| listener(&b, t).rsplit('/').next().unwrap().to_owned();
        assert_eq!(name("xds:///foo.example:8443"), "foo.example:8443");
        assert_eq!(name("xds:///user@host=1+2&$"), "user@host=1+2&$");
        assert_eq!(name("xds:///%5B::1%5D:80"), "%5B::1%5D:80");
        assert_eq!(name("xds:///caf%C3%A9"), "caf%C3%A9");
    }

    #[test]
    fn a_target_with_authority_uses_that_authoritys_template() {
        let b = bootstrap(
            r#", "authorities": {
                "a.example": {},
                "b.example": {"client_listener_resource_name_template": "xdstp://b.example/custom/%s?k=v"}
            }"#,
        );
        assert_eq!(
            listener(&b, "xds://a.example/foo.example:8080"),
            "xdstp://a.example/envoy.config.listener.v3.Listener/foo.example:8080"
        );
        assert_eq!(
            listener(&b, "xds://b.example/svc/v1"),
            "xdstp://b.example/custom/svc/v1?k=v"
        );
        let resolved = b
            .resolve_target("xds://a.example/foo.example:8080")
            .unwrap();
        assert_eq!(resolved.data_plane_authority, "foo.example:8080");
    }

    #[test]
    fn targets_that_name_no_listener_are_typed_errors() {
        let b = bootstrap(r#", "authorities": {"a.example": {}}"#);
        let cases = [
            ("dns:///foo", TargetError::NotXds("dns".into())),
            ("foo.example", TargetError::NotXds(String::new())),
            ("xds:///", TargetError::EmptyPath),
            ("xds://a.example", TargetError::EmptyPath),
            ("xds:///foo%zz", TargetError::BadPercentEscape),
            ("xds:///foo%4", TargetError::BadPercentEscape),
            (
                "xds://nope.example/foo",
                TargetError::UnknownAuthority("nope.example".into()),
            ),
        ];
        for (target, expected) in cases {
            assert_eq!(
                b.listener_name_for_target(target),
                Err(expected),
                "{target}"
            );
        }
        assert_eq!(
            TargetError::UnknownAuthority("nope.example".into()).to_string(),
            r#"authority "nope.example" is not in the bootstrap's authorities"#
        );
    }
}
