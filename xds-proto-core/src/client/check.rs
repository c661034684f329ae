//! The rules a watch must meet before the client takes it (a registered type, a valid
//! name, an authority the bootstrap knows, with a server), owned here so that
//! [`XdsClient::watch`] and a [`WatchChecker`] away from the client refuse the same
//! watches with the same errors.

use std::any::TypeId;
use std::sync::Arc;

use super::{WatchError, XdsClient};
use crate::bootstrap::{Bootstrap, ServerConfig};
use crate::names;
use crate::resource::{ResourceTypeInfo, XdsResourceType};

/// Answers, without the client, whether [`XdsClient::watch`] would refuse a watch, and
/// with which error. It holds the bootstrap and the types registered when it was made
/// ([`XdsClient::watch_checker`]); cheap to clone and `Send + Sync`. An adapter gives it
/// to its handles so that `watch()` can answer at once and leave the registration to
/// the task that owns the client.
#[derive(Clone, Debug)]
pub struct WatchChecker {
    bootstrap: Arc<Bootstrap>,
    types: Arc<[(&'static str, TypeId)]>,
}

impl WatchChecker {
    /// `Err` exactly when [`XdsClient::watch::<T>`](XdsClient::watch) refuses `name`
    /// on the client this checker was made from (and its types are still the same).
    ///
    /// # Errors
    /// The [`WatchError`] that `watch` returns.
    pub fn check<T: XdsResourceType>(&self, name: &str) -> Result<(), WatchError> {
        self.check_type(&ResourceTypeInfo::of::<T>(), name)
    }

    /// As [`check`](Self::check), for [`XdsClient::watch_type`].
    ///
    /// # Errors
    /// As for [`check`](Self::check).
    pub fn check_type(&self, ty: &ResourceTypeInfo, name: &str) -> Result<(), WatchError> {
        let url = ty.type_url();
        let registered = (self.types.iter()).any(|&(u, id)| u == url && id == ty.type_id);
        if !registered {
            return Err(WatchError::UnknownType(url.to_string()));
        }
        let canonical = names::canonicalize(name).map_err(WatchError::InvalidName)?;
        checked_authority(&self.bootstrap, url, &canonical).map(|_| ())
    }
}

impl XdsClient {
    /// A [`WatchChecker`] for this client's bootstrap and its types registered so far.
    pub fn watch_checker(&self) -> WatchChecker {
        WatchChecker {
            bootstrap: self.config.bootstrap.clone(),
            types: self
                .types
                .iter()
                .map(|t| (t.type_url(), t.type_id))
                .collect(),
        }
    }
}

/// The authority of the canonical name `name` watched as `type_url` (`None` for an
/// old-style name) and its servers in the bootstrap. Refused: a malformed `xdstp:`
/// name, one that names another type, an authority not in the bootstrap, no server.
pub(super) fn checked_authority<'b, 'n>(
    bootstrap: &'b Bootstrap,
    type_url: &str,
    name: &'n str,
) -> Result<(Option<&'n str>, &'b [ServerConfig]), WatchError> {
    let parsed = names::parse_xdstp(name).map_err(WatchError::InvalidName)?;
    if let Some(p) = &parsed
        && p.resource_type != names::message_type(type_url)
    {
        return Err(WatchError::InvalidName(names::NameError {
            name: name.to_string(),
            reason: "the resource type in the name is not the watched type",
        }));
    }
    let authority = parsed.map(|p| p.authority);
    let servers =
        bootstrap
            .servers_for_authority(authority)
            .map_err(|_| WatchError::UnknownAuthority {
                authority: authority.unwrap_or("").to_string(),
                name: name.to_string(),
            })?;
    if servers.is_empty() {
        return Err(WatchError::NoServer(name.to_string()));
    }
    Ok((authority, servers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::XdsClientConfig;
    use crate::resource::{Cds, DecodeError, Eds, Lds};

    /// A type the client does not register.
    struct Unregistered;

    impl XdsResourceType for Unregistered {
        type Value = ();
        const TYPE_URL: &'static str = "type.googleapis.com/example.Unregistered";
        const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
        fn decode(_: &[u8]) -> Result<(String, ()), DecodeError> {
            Err(DecodeError::unnamed("never decoded"))
        }
    }

    /// What the checker and `watch` say of a name.
    type Outcomes = (Result<(), WatchError>, Result<(), WatchError>);

    /// `outcomes` for one type.
    type Outcome = fn(&mut XdsClient, &WatchChecker, &str) -> Outcomes;

    fn outcomes<T: XdsResourceType>(
        client: &mut XdsClient,
        checker: &WatchChecker,
        name: &str,
    ) -> Outcomes {
        (
            checker.check::<T>(name),
            client.watch::<T>(name).map(|_| ()),
        )
    }

    #[test]
    fn the_checker_refuses_exactly_what_watch_refuses() {
        let bootstrap = Bootstrap::from_json_str(
            r#"{"xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
                "node": {"id": "n"},
                "authorities": {"known.example": {}}}"#,
        )
        .unwrap();
        let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 1);
        let checker = client.watch_checker();
        let cds = "xdstp://known.example/envoy.config.cluster.v3.Cluster/c1";
        let cases: [(&str, Outcome, bool); 8] = [
            ("c1", outcomes::<Cds>, true),
            ("l1", outcomes::<Lds>, true),
            (cds, outcomes::<Cds>, true),
            // The same name again: its authority now exists in the client.
            (cds, outcomes::<Cds>, true),
            (cds, outcomes::<Eds>, false),
            (
                "xdstp://unknown.example/envoy.config.cluster.v3.Cluster/c1",
                outcomes::<Cds>,
                false,
            ),
            ("xdstp://known.example", outcomes::<Cds>, false),
            ("c1", outcomes::<Unregistered>, false),
        ];
        for (name, outcomes, accepted) in cases {
            let (checked, watched) = outcomes(&mut client, &checker, name);
            assert_eq!(checked, watched, "{name}");
            assert_eq!(checked.is_ok(), accepted, "{name}: {checked:?}");
        }
    }
}
