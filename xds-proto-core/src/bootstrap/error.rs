//! The error a bootstrap fails with: [`BootstrapError`], the JSON path of the offending
//! field and a [`BootstrapErrorKind`] saying what is wrong with it.

use std::fmt;

use super::json::quote;
use super::{BOOTSTRAP_CONFIG_ENV, BOOTSTRAP_FILE_ENV};

/// Why a bootstrap could not be loaded.
///
/// `path` says where: a JSON path into the document such as
/// `xds_servers[1].server_uri` or `authorities["a.example"].xds_servers`; the empty
/// string for the document as a whole; the file name for [`BootstrapErrorKind::Io`].
/// `Display` prints `<path>: <reason>`, or just the reason when the path is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapError {
    /// Where the problem is.
    pub path: String,
    /// What the problem is.
    pub kind: BootstrapErrorKind,
}

/// The kinds of [`BootstrapError`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BootstrapErrorKind {
    /// A required field is absent.
    Missing,
    /// A field has the wrong JSON type.
    WrongType {
        /// The JSON type the field must have.
        expected: &'static str,
        /// The JSON type it has.
        found: &'static str,
    },
    /// A string or array that must not be empty is empty.
    Empty,
    /// A value is malformed; the string says how.
    Invalid(String),
    /// No entry of a `channel_creds` list has a supported type.
    NoSupportedChannelCreds {
        /// The types the list named, in order.
        seen: Vec<String>,
    },
    /// The document is not valid JSON; the message carries the line and column.
    Syntax(String),
    /// [`Bootstrap::servers_for_authority`](super::Bootstrap::servers_for_authority) was asked for an authority the bootstrap
    /// does not define.
    UnknownAuthority,
    /// Neither `GRPC_XDS_BOOTSTRAP` nor `GRPC_XDS_BOOTSTRAP_CONFIG` is set.
    NotConfigured,
    /// The bootstrap file could not be read.
    Io(String),
}

impl BootstrapError {
    pub(super) fn new(path: impl Into<String>, kind: BootstrapErrorKind) -> BootstrapError {
        BootstrapError {
            path: path.into(),
            kind,
        }
    }
}

impl fmt::Display for BootstrapErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapErrorKind::Missing => f.write_str("missing"),
            BootstrapErrorKind::WrongType { expected, found } => {
                write!(f, "expected {expected}, got {found}")
            }
            BootstrapErrorKind::Empty => f.write_str("must not be empty"),
            BootstrapErrorKind::Invalid(reason) => f.write_str(reason),
            BootstrapErrorKind::NoSupportedChannelCreds { seen } => {
                f.write_str("no supported channel credentials type (saw: ")?;
                for (i, ty) in seen.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&quote(ty))?;
                }
                f.write_str(")")
            }
            BootstrapErrorKind::Syntax(message) => write!(f, "invalid JSON: {message}"),
            BootstrapErrorKind::UnknownAuthority => f.write_str("unknown authority"),
            BootstrapErrorKind::NotConfigured => write!(
                f,
                "xDS bootstrap not configured: neither {BOOTSTRAP_FILE_ENV} nor \
                 {BOOTSTRAP_CONFIG_ENV} is set"
            ),
            BootstrapErrorKind::Io(message) => {
                write!(f, "cannot read bootstrap file: {message}")
            }
        }
    }
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}: {}", self.path, self.kind)
        }
    }
}

impl std::error::Error for BootstrapError {}
