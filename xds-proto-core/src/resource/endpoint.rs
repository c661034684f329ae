//! STUB: to be replaced by the real decoder.
use super::DecodeError;

/// Placeholder.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointsResource {
    /// Resource name.
    pub name: String,
}

/// Placeholder decode.
pub fn decode(_bytes: &[u8]) -> Result<(String, EndpointsResource), DecodeError> {
    Err(DecodeError::unnamed("not implemented"))
}
