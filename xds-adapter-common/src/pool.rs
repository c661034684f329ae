//! Per-target clients (gRFC A71): a [`ClientPool`] hands out one shared [`Client`] per
//! data-plane target, so that fallback triggered for one target never changes the data
//! another target uses, and builds the CSDS `ClientStatusResponse` across them.
//!
//! Every client of a pool runs its own driver and core but shares the pool's one parsed
//! bootstrap (an `Arc`). The pool holds its clients weakly: a client lives as long as a
//! handle or a watch stream of it does, and the next request for its target after that
//! starts a fresh one.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use xds_proto_core::Bootstrap;
use xds_proto_core::pb::envoy::service::status::v3::ClientStatusResponse;

use crate::client::{Client, ClientBuilder, Error, Inner};
use crate::runtime::Runtime;

/// The target key xDS-enabled gRPC servers share their client under (gRFC A71).
pub use xds_proto_core::pool::SERVER_TARGET;

/// A pool of xDS clients keyed by data-plane target. Cheap to clone, `Send + Sync`;
/// every clone is the same pool.
///
/// Build one with [`ClientBuilder::build_pool`] (every setting of the builder applies
/// to each client the pool starts) or [`ClientPool::from_bootstrap_json`].
pub struct ClientPool<R> {
    shared: Arc<PoolShared<R>>,
}

struct PoolShared<R> {
    builder: ClientBuilder<R>,
    rt: R,
    seed: u64,
    clients: Mutex<BTreeMap<String, Weak<Inner>>>,
}

impl<R> Clone for ClientPool<R> {
    fn clone(&self) -> Self {
        ClientPool {
            shared: self.shared.clone(),
        }
    }
}

impl<R: Runtime> fmt::Debug for ClientPool<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientPool")
            .field("targets", &self.targets())
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> ClientPool<R> {
    pub(crate) fn new(builder: ClientBuilder<R>, rt: R, seed: u64) -> ClientPool<R> {
        ClientPool {
            shared: Arc::new(PoolShared {
                builder,
                rt,
                seed,
                clients: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// A builder for a pool on this bootstrap; finish it with
    /// [`ClientBuilder::build_pool`].
    pub fn builder(bootstrap: impl Into<Arc<Bootstrap>>) -> ClientBuilder<R> {
        ClientBuilder::new(bootstrap)
    }

    /// A pool with default settings on this bootstrap JSON (parsed once, here),
    /// running its clients on the calling context's runtime.
    ///
    /// # Errors
    /// An invalid bootstrap, or no runtime.
    pub fn from_bootstrap_json(json: &str) -> Result<ClientPool<R>, Error> {
        ClientBuilder::new(Bootstrap::from_json_str(json)?).build_pool()
    }

    /// The bootstrap every client of the pool shares.
    pub fn bootstrap(&self) -> &Arc<Bootstrap> {
        &self.shared.builder.config_ref().bootstrap
    }

    /// The client for `target` (a channel's data-plane target, or [`SERVER_TARGET`]
    /// for xDS-enabled servers): the running one if the target has one, else a new
    /// one, started now. Every caller with the same target gets the same client.
    pub fn get_or_create(&self, target: &str) -> Client<R> {
        let mut clients = self.lock();
        clients.retain(|_, client| client.strong_count() > 0);
        if let Some(inner) = clients.get(target).and_then(Weak::upgrade)
            && !inner.commands.is_closed()
        {
            return Client::from_inner(inner);
        }
        let client = self
            .shared
            .builder
            .spawn(
                &self.shared.rt,
                self.shared.seed ^ fnv1a(target.as_bytes()),
                Some(Arc::from(target)),
            )
            .expect("the registered types were checked when the pool was built");
        clients.insert(target.to_string(), Arc::downgrade(client.inner()));
        client
    }

    /// The client xDS-enabled servers share: `get_or_create(SERVER_TARGET)`.
    pub fn server_client(&self) -> Client<R> {
        self.get_or_create(SERVER_TARGET)
    }

    /// The running client of `target`, if it has one (none is started).
    pub fn get(&self, target: &str) -> Option<Client<R>> {
        let inner = self.lock().get(target)?.upgrade()?;
        (!inner.commands.is_closed()).then(|| Client::from_inner(inner))
    }

    /// The running clients, ordered by target.
    pub fn clients(&self) -> Vec<Client<R>> {
        self.lock()
            .values()
            .filter_map(Weak::upgrade)
            .filter(|inner| !inner.commands.is_closed())
            .map(Client::from_inner)
            .collect()
    }

    /// The targets that have a running client, in order.
    pub fn targets(&self) -> Vec<String> {
        self.clients()
            .iter()
            .filter_map(|c| c.target().map(str::to_string))
            .collect()
    }

    /// The CSDS response: one `ClientConfig` per running client, ordered by target,
    /// with `client_scope` set to the target and the client's node and resources.
    ///
    /// Each client answers through its own driver, as one more input between the
    /// others: no driver waits for another, or for the caller. A client that stops
    /// meanwhile is left out.
    pub async fn csds_response(&self) -> ClientStatusResponse {
        let clients = self.clients();
        let configs =
            futures::future::join_all(clients.iter().map(Client::csds_client_config)).await;
        ClientStatusResponse {
            config: configs.into_iter().filter_map(Result::ok).collect(),
        }
    }

    /// Shuts down every running client (see [`Client::shutdown`]). The pool stays
    /// usable: the next [`get_or_create`](Self::get_or_create) starts a new client.
    pub async fn shutdown(&self) {
        let clients = self.clients();
        futures::future::join_all(clients.iter().map(Client::shutdown)).await;
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Weak<Inner>>> {
        self.shared
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// FNV-1a, to derive per-target seeds (as the core's pool does).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
