//! Custom endpoint-picking policies (A52): what an embedder implements to plug its own
//! policy in ([`CustomLbPolicy`] validates the `TypedStruct` config a cluster names it
//! with, [`CustomLbConfig`] is the validated config and builds one [`CustomPicker`]
//! per endpoint set), and how the load balancer runs one: like `round_robin`, every
//! endpoint is kept connected (one `pick_first` each, A61) and the picker chooses among
//! the READY ones. Registering a policy is the CDS validator's business:
//! [`LbPolicyRegistry`](crate::resource::LbPolicyRegistry).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use super::api::{ConnectivityState, SubchannelId};
use super::endpoint_list::EndpointList;
use super::policy::{Ctx, EndpointSpec, PickRng, Picked};
use crate::pb::google::protobuf::Struct;

/// A policy an embedder registers under a type name (A52: a protobuf-style name in
/// the embedder's own package, e.g. `myorg.MyPolicy`). A cluster selects it with a
/// `TypedStruct` whose `type_url` ends in that name; its `value` is the config.
pub trait CustomLbPolicy: Send + Sync + 'static {
    /// Validates the policy's config (the `TypedStruct`'s `value`; empty when unset).
    ///
    /// # Errors
    /// Why the config is refused; the cluster is NACKed with this message.
    fn parse_config(&self, config: &Struct) -> Result<Arc<dyn CustomLbConfig>, String>;
}

/// A custom policy's validated config, as one cluster names it.
pub trait CustomLbConfig: Send + Sync + fmt::Debug + 'static {
    /// A picker for one set of endpoints: a locality's under `wrr_locality`, else a
    /// priority's. Built when the endpoints change, never on a pick.
    fn new_picker(&self) -> Box<dyn CustomPicker>;
}

/// Chooses among the READY endpoints of one set, for one pick.
pub trait CustomPicker: Send + fmt::Debug {
    /// The position in `ready` (never empty; in the order EDS lists the endpoints) of
    /// the endpoint to use; `random` is this pick's random value (from
    /// [`PickArgs::random`](super::PickArgs), so replayable). A position past the end
    /// picks the first endpoint.
    fn pick(&mut self, ready: &[ReadyEndpoint], random: u64) -> usize;
}

/// A READY endpoint as a [`CustomPicker`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyEndpoint {
    /// The subchannel a pick of this endpoint uses.
    pub subchannel: SubchannelId,
    /// The endpoint's first address.
    pub address: SocketAddr,
    /// Its EDS weight (times its locality's weight when the policy runs over a whole
    /// priority).
    pub weight: u64,
}

/// A custom policy selected by a cluster: its registered type name, its config as
/// the cluster gave it (two clusters are equal when these are), and the validated
/// config that builds its pickers.
#[derive(Clone)]
pub struct CustomPolicyConfig {
    /// The registered type name.
    pub type_name: String,
    /// The `TypedStruct`'s `value`.
    pub config: Struct,
    validated: Arc<dyn CustomLbConfig>,
}

impl CustomPolicyConfig {
    pub(crate) fn new(
        type_name: String,
        config: Struct,
        validated: Arc<dyn CustomLbConfig>,
    ) -> CustomPolicyConfig {
        CustomPolicyConfig {
            type_name,
            config,
            validated,
        }
    }

    /// The config the policy's [`CustomLbPolicy::parse_config`] returned.
    pub fn validated(&self) -> &Arc<dyn CustomLbConfig> {
        &self.validated
    }
}

impl PartialEq for CustomPolicyConfig {
    fn eq(&self, other: &CustomPolicyConfig) -> bool {
        self.type_name == other.type_name && self.config == other.config
    }
}

impl fmt::Debug for CustomPolicyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomPolicyConfig")
            .field("type_name", &self.type_name)
            .field("config", &self.config)
            .field("validated", &self.validated)
            .finish()
    }
}

/// A custom policy over one set of endpoints.
#[derive(Debug)]
pub(super) struct Custom {
    endpoints: EndpointList,
    picker: Box<dyn CustomPicker>,
    /// Each subchannel's endpoint, as [`ReadyEndpoint`]s.
    by_subchannel: BTreeMap<SubchannelId, ReadyEndpoint>,
    /// The READY endpoints, in endpoint order: refreshed on state changes only.
    ready: Vec<ReadyEndpoint>,
}

impl Custom {
    pub(super) fn new(
        ctx: &mut Ctx,
        config: &Arc<dyn CustomLbConfig>,
        specs: &[EndpointSpec],
    ) -> Custom {
        let mut by_subchannel = BTreeMap::new();
        for spec in specs {
            for &subchannel in &spec.subchannels {
                by_subchannel.entry(subchannel).or_insert(ReadyEndpoint {
                    subchannel,
                    address: spec.address,
                    weight: spec.weight,
                });
            }
        }
        let mut custom = Custom {
            endpoints: EndpointList::new(ctx, specs),
            picker: config.new_picker(),
            by_subchannel,
            ready: Vec::with_capacity(specs.len()),
        };
        custom.refresh();
        custom
    }

    pub(super) fn state(&self) -> ConnectivityState {
        self.endpoints.state()
    }

    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        self.endpoints.on_state(ctx, id);
        self.refresh();
    }

    fn refresh(&mut self) {
        self.ready.clear();
        for id in self.endpoints.ready() {
            if let Some(endpoint) = self.by_subchannel.get(id) {
                // The pick goes to the subchannel the endpoint selected.
                self.ready.push(ReadyEndpoint {
                    subchannel: *id,
                    ..*endpoint
                });
            }
        }
    }

    pub(super) fn pick(&mut self, rng: &mut PickRng) -> Picked {
        if self.ready.is_empty() {
            return Picked::not_ready(self.state());
        }
        let i = self.picker.pick(&self.ready, rng.next());
        Picked::Subchannel(self.ready.get(i).unwrap_or(&self.ready[0]).subchannel)
    }
}
