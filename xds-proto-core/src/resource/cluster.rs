//! STUB: to be replaced by the real decoder.
use super::DecodeError;

/// Placeholder.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterResource {
    /// Resource name.
    pub name: String,
}

/// Placeholder decode.
pub fn decode(_bytes: &[u8]) -> Result<(String, ClusterResource), DecodeError> {
    Err(DecodeError::unnamed("not implemented"))
}
/// Placeholder.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterType { /// x
 Eds }
