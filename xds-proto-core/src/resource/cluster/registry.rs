//! The LB policy registry (A52's "xDS LB policy registry"): which `typed_config` types
//! a `load_balancing_policy` list may select, and how each is validated into an
//! [`LbPolicy`]. The built-in policies are entries like any other (their converters in
//! `lb_policy`); an embedder adds its own with [`LbPolicyRegistry::register`], selected
//! by a `TypedStruct` (`xds.type.v3` or `udpa.type.v1`) whose `type_url` ends in the
//! registered name, its `Struct` given to the policy as its config.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use prost::Message;

use super::LbPolicy;
use super::lb_policy::{
    CSWRR_TYPE, LEAST_REQUEST_TYPE, PICK_FIRST_TYPE, RING_HASH_TYPE, ROUND_ROBIN_TYPE,
    WRR_LOCALITY_TYPE, parse_cswrr, parse_least_request, parse_pick_first, parse_ring_hash,
    parse_wrr_locality,
};
use crate::lb::{CustomLbPolicy, CustomPolicyConfig};
use crate::pb::google::protobuf::Struct;
use crate::resource::validate::{FieldError, decode_message};

/// A built-in policy's converter: the `typed_config` value, the nesting depth of its
/// list, and the registry (for policies that nest a list).
pub(super) type BuiltInParse = fn(&[u8], usize, &LbPolicyRegistry) -> Result<LbPolicy, FieldError>;

#[derive(Clone)]
enum Entry {
    BuiltIn(BuiltInParse),
    Custom(Arc<dyn CustomLbPolicy>),
}

/// The policies a CDS validator accepts in `load_balancing_policy`, by type name.
/// [`Default`] holds the built-in ones: `round_robin`, `ring_hash` (A42),
/// `least_request` (A48), `wrr_locality` (A52), client-side weighted round robin (A58)
/// and `pick_first`.
#[derive(Clone)]
pub struct LbPolicyRegistry {
    entries: BTreeMap<String, Entry>,
}

/// Why [`LbPolicyRegistry::register`] refused a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// The name is empty or holds a `/` (a `TypedStruct` names it by what follows
    /// the last `/` of its `type_url`).
    InvalidName(String),
    /// A policy, built in or registered before, has this name.
    AlreadyRegistered(String),
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::InvalidName(name) => write!(
                f,
                "invalid LB policy type name {name:?}: must be non-empty, without '/'"
            ),
            RegisterError::AlreadyRegistered(name) => {
                write!(f, "an LB policy is already registered as {name:?}")
            }
        }
    }
}

impl std::error::Error for RegisterError {}

impl Default for LbPolicyRegistry {
    fn default() -> LbPolicyRegistry {
        let built_in: [(&str, BuiltInParse); 6] = [
            (ROUND_ROBIN_TYPE, |_, _, _| Ok(LbPolicy::RoundRobin)),
            (RING_HASH_TYPE, |value, _, _| parse_ring_hash(value)),
            (LEAST_REQUEST_TYPE, |value, _, _| parse_least_request(value)),
            (WRR_LOCALITY_TYPE, parse_wrr_locality),
            (CSWRR_TYPE, |value, _, _| parse_cswrr(value)),
            (PICK_FIRST_TYPE, |value, _, _| parse_pick_first(value)),
        ];
        LbPolicyRegistry {
            entries: built_in
                .into_iter()
                .map(|(name, parse)| (name.to_owned(), Entry::BuiltIn(parse)))
                .collect(),
        }
    }
}

static BUILT_IN: LazyLock<LbPolicyRegistry> = LazyLock::new(LbPolicyRegistry::default);

impl LbPolicyRegistry {
    /// The built-in policies only, shared.
    pub fn built_in() -> &'static LbPolicyRegistry {
        &BUILT_IN
    }

    /// Registers a custom policy under `type_name` (A52: a protobuf-style name in your
    /// own package, e.g. `myorg.MyPolicy`).
    ///
    /// # Errors
    /// The name is invalid, or taken by a built-in or an earlier registration.
    pub fn register(
        &mut self,
        type_name: &str,
        policy: Arc<dyn CustomLbPolicy>,
    ) -> Result<(), RegisterError> {
        if type_name.is_empty() || type_name.contains('/') {
            return Err(RegisterError::InvalidName(type_name.to_owned()));
        }
        if self.entries.contains_key(type_name) {
            return Err(RegisterError::AlreadyRegistered(type_name.to_owned()));
        }
        self.entries
            .insert(type_name.to_owned(), Entry::Custom(policy));
        Ok(())
    }

    /// Whether a policy is known under this type name.
    pub fn contains(&self, type_name: &str) -> bool {
        self.entries.contains_key(type_name)
    }

    /// Converts one list entry, or `None` when the registry does not support it (the
    /// list walk then tries the next). `typed_struct`: the value is a `TypedStruct`
    /// naming `type_name`, which only a custom policy accepts.
    pub(super) fn convert(
        &self,
        type_name: &str,
        typed_struct: bool,
        value: &[u8],
        depth: usize,
    ) -> Option<Result<LbPolicy, FieldError>> {
        match (self.entries.get(type_name)?, typed_struct) {
            (Entry::BuiltIn(parse), false) => Some(parse(value, depth, self)),
            (Entry::Custom(policy), true) => Some(parse_custom(type_name, &**policy, value)),
            // A built-in policy's config is its own message, a custom one's a Struct.
            _ => None,
        }
    }
}

impl fmt::Debug for LbPolicyRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.entries.keys()).finish()
    }
}

/// `xds.type.v3.TypedStruct` (and `udpa.type.v1.TypedStruct`, the same fields).
#[derive(Clone, PartialEq, Message)]
struct TypedStruct {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(message, optional, tag = "2")]
    value: Option<Struct>,
}

fn parse_custom(
    type_name: &str,
    policy: &dyn CustomLbPolicy,
    value: &[u8],
) -> Result<LbPolicy, FieldError> {
    let typed: TypedStruct = decode_message(value, "value", "TypedStruct")?;
    let config = typed.value.unwrap_or_default();
    let validated = policy
        .parse_config(&config)
        .map_err(|e| FieldError::new("value.value", format!("{type_name}: {e}")))?;
    Ok(LbPolicy::Custom(CustomPolicyConfig::new(
        type_name.to_owned(),
        config,
        validated,
    )))
}
