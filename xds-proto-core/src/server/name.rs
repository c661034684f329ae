//! The name of the Listener an xDS-enabled server watches (gRFC A36, A47): the
//! bootstrap's `server_listener_resource_name_template` with `%s` replaced by the
//! listening address, `IP:port` with IPv6 in brackets as gRPC writes it.

use std::fmt;
use std::net::SocketAddr;

use crate::Bootstrap;
use crate::names::parse_xdstp;

/// Why a server has no listener name. A startup error naming the bootstrap field.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListenerNameError {
    /// The bootstrap has no `server_listener_resource_name_template` (A36: no default).
    MissingTemplate,
    /// The template is an `xdstp:` name the core cannot parse (the reason).
    InvalidXdstp(String),
    /// The template is an `xdstp:` name whose authority is not in `authorities` (A47).
    UnknownAuthority(String),
}

impl fmt::Display for ListenerNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const FIELD: &str = "server_listener_resource_name_template";
        match self {
            ListenerNameError::MissingTemplate => write!(
                f,
                "{FIELD}: not set in the bootstrap; an xDS-enabled server needs it"
            ),
            ListenerNameError::InvalidXdstp(reason) => {
                write!(f, "{FIELD}: invalid xdstp: name: {reason}")
            }
            ListenerNameError::UnknownAuthority(name) => write!(
                f,
                "{FIELD}: authority {name:?} is not in the bootstrap's authorities"
            ),
        }
    }
}

impl std::error::Error for ListenerNameError {}

/// The Listener name for a server listening on `listening`, from `bootstrap`.
///
/// # Errors
/// [`ListenerNameError`] when the template is missing, or is an `xdstp:` name that is
/// invalid or names an authority the bootstrap does not define.
pub fn server_listener_name(
    bootstrap: &Bootstrap,
    listening: SocketAddr,
) -> Result<String, ListenerNameError> {
    let template = bootstrap
        .server_listener_resource_name_template
        .as_deref()
        .ok_or(ListenerNameError::MissingTemplate)?;
    let name = listener_name_from_template(template, listening);
    if name.starts_with("xdstp:") {
        let parsed = parse_xdstp(&name)
            .map_err(|e| ListenerNameError::InvalidXdstp(e.to_string()))?
            .ok_or_else(|| ListenerNameError::InvalidXdstp("not an xdstp:// name".into()))?;
        if !bootstrap.authorities.contains_key(parsed.authority) {
            return Err(ListenerNameError::UnknownAuthority(
                parsed.authority.to_owned(),
            ));
        }
    }
    Ok(name)
}

/// `template` with every `%s` replaced by `listening` (`0.0.0.0:8080`, `[::]:8080`).
/// No escaping for an old-style template (A36); for an `xdstp:` template the address is
/// percent-encoded, keeping only the characters RFC 3986 allows in a path (A47), so
/// `[::]:8080` becomes `%5B::%5D:8080`.
pub fn listener_name_from_template(template: &str, listening: SocketAddr) -> String {
    let address = listening.to_string();
    if template.starts_with("xdstp:") {
        template.replace("%s", &crate::names::percent_encode_path(&address))
    } else {
        template.replace("%s", &address)
    }
}
