//! The request hash of gRFC A42: what a ring-hash pick hashes ([`PickArgs::hash`]),
//! from the selected route's hash policies and the RPC's headers. Each policy hashes
//! its own part of the request ([`HashPolicy::request_hash`]); [`request_hash`]
//! combines them as Envoy does, so a custom runtime computes the same hash as the
//! adapters.
//!
//! [`PickArgs::hash`]: crate::lb::PickArgs::hash

use super::{Metadata, Selection, header_value};
use crate::resource::route::HashPolicy;

impl HashPolicy {
    /// This policy's hash of one RPC, `None` when it produces none:
    /// - a header policy hashes the header's value as route matchers see it (A42 points
    ///   to A28: binary `-bin` and gRPC-reserved headers are absent, `content-type` is
    ///   `application/grpc`, repeated values are joined with `,`; see
    ///   [`header_value`]), after its `regex_rewrite`, with XXH64
    ///   ([`hash_header_value`](crate::lb::hash_header_value)); no header, no hash;
    /// - a `filter_state` policy on `io.grpc.channel_id` gives `channel_id`, the
    ///   channel's random identity.
    pub fn request_hash<M: Metadata + ?Sized>(&self, metadata: &M, channel_id: u64) -> Option<u64> {
        match self {
            HashPolicy::Header { header_name, .. } => {
                let value = header_value(metadata, header_name);
                value
                    .as_str()
                    .and_then(|v| self.header_value_hash(v.as_bytes()))
            }
            HashPolicy::ChannelId { .. } => Some(channel_id),
        }
    }

    /// Whether a hash from this policy ends the evaluation (`terminal`).
    pub fn is_terminal(&self) -> bool {
        match self {
            HashPolicy::Header { terminal, .. } | HashPolicy::ChannelId { terminal } => *terminal,
        }
    }
}

/// The request hash of an RPC under `policies` (A42): each policy's hash in order,
/// combined as Envoy combines them (`hash = hash.rotate_left(1) ^ policy_hash`), up
/// to the first terminal policy that produced one. `None` when no policy produced a
/// hash: the ring-hash pick then takes a random point, as A42 says.
pub fn request_hash<M: Metadata + ?Sized>(
    policies: &[HashPolicy],
    metadata: &M,
    channel_id: u64,
) -> Option<u64> {
    let mut hash: Option<u64> = None;
    for policy in policies {
        if let Some(value) = policy.request_hash(metadata, channel_id) {
            hash = Some(hash.map_or(value, |h| h.rotate_left(1) ^ value));
        }
        // Envoy and gRPC-Go stop at a terminal policy once any hash exists, whether
        // or not this policy produced it.
        if policy.is_terminal() && hash.is_some() {
            break;
        }
    }
    hash
}

impl Selection {
    /// The request hash of this RPC under the route's hash policies ([`request_hash`]),
    /// for [`PickArgs::hash`](crate::lb::PickArgs::hash). `metadata` is the request's
    /// headers and `channel_id` the channel's random identity (A42's
    /// `io.grpc.channel_id`).
    pub fn request_hash<M: Metadata + ?Sized>(&self, metadata: &M, channel_id: u64) -> Option<u64> {
        request_hash(self.hash_policies(), metadata, channel_id)
    }
}
