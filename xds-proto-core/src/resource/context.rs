//! What a decoder may consult beyond a resource's bytes: [`DecodeContext`]. Today that
//! is the client's bootstrap, whose `certificate_providers` every security config of a
//! cluster or a server listener must name (A29); C-core's decoders take the same from
//! their `DecodeContext`, gRPC-Go's from their `DecodeOptions`.

use std::sync::Arc;

use crate::bootstrap::Bootstrap;
use crate::resource::cluster::LbPolicyRegistry;

/// The context of one decode. The client decodes every response with its bootstrap;
/// tools and tests that decode a resource on its own may pass
/// [`DecodeContext::default`], which knows no bootstrap and so cannot check provider
/// instance names (everything else is validated the same).
#[derive(Clone, Copy, Default)]
pub struct DecodeContext<'a> {
    bootstrap: Option<&'a Bootstrap>,
    /// The LB policies CDS accepts (A52); `None`: the built-in ones.
    lb_policies: Option<&'a LbPolicyRegistry>,
}

impl std::fmt::Debug for DecodeContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeContext")
            .field("bootstrap", &self.bootstrap.is_some())
            .field("custom_lb_policies", &self.lb_policies.is_some())
            .finish()
    }
}

impl<'a> DecodeContext<'a> {
    /// The context of a client with this bootstrap.
    pub fn new(bootstrap: &'a Bootstrap) -> DecodeContext<'a> {
        DecodeContext {
            bootstrap: Some(bootstrap),
            lb_policies: None,
        }
    }

    /// This context, accepting in CDS `load_balancing_policy` the policies of
    /// `registry` (the built-in ones and an embedder's own, A52).
    pub fn with_lb_policies(self, registry: &'a LbPolicyRegistry) -> DecodeContext<'a> {
        DecodeContext {
            lb_policies: Some(registry),
            ..self
        }
    }

    /// The LB policies CDS accepts: the registry given, else the built-in one.
    pub fn lb_policies(&self) -> &'a LbPolicyRegistry {
        self.lb_policies
            .unwrap_or_else(|| LbPolicyRegistry::built_in())
    }

    /// The bootstrap, when decoding for a client.
    pub fn bootstrap(&self) -> Option<&'a Bootstrap> {
        self.bootstrap
    }

    /// Checks a certificate provider instance name from a resource: it must be
    /// non-empty and, when the bootstrap is known, one of its `certificate_providers`.
    /// Returns the name to keep: the bootstrap's own key, shared, so that a config
    /// decoded for a client allocates nothing for it (a copy only without a bootstrap).
    ///
    /// # Errors
    /// Why the name is refused, for a NACK.
    pub(crate) fn certificate_provider(&self, instance_name: &str) -> Result<Arc<str>, String> {
        if instance_name.is_empty() {
            return Err("must be non-empty".into());
        }
        let Some(bootstrap) = self.bootstrap else {
            return Ok(instance_name.into());
        };
        match bootstrap.certificate_providers.get_key_value(instance_name) {
            Some((name, _)) => Ok(Arc::clone(name)),
            None => Err(format!(
                "unrecognized certificate provider instance name {instance_name:?} (the \
                 bootstrap's certificate_providers has no such instance)"
            )),
        }
    }
}
