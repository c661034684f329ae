//! STUB: to be replaced by the real decoder.
use super::DecodeError;

/// Placeholder.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteConfigResource {
    /// Resource name.
    pub name: String,
}

/// Placeholder decode.
pub fn decode(_bytes: &[u8]) -> Result<(String, RouteConfigResource), DecodeError> {
    Err(DecodeError::unnamed("not implemented"))
}
