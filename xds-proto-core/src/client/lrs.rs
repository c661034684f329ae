//! The client's side of load reporting: the counters it hands out for a cluster (the
//! LRS server is the one the cluster's CDS resource came from, as gRPC takes
//! `lrs_server: self`), the LRS streams' events and timers routed to
//! [`crate::lrs::LoadReporting`], and the channel of a server nobody uses any more
//! dropped once neither ADS nor LRS needs it.

use super::{Action, Event, ServerId, XdsClient};
use crate::lrs::{ClusterLoadStats, Ctx};
use crate::resource::{Cds, XdsResourceType};
use crate::time::Instant;

impl XdsClient {
    /// The load counters of `cluster` (with its EDS service name, if its CDS resource
    /// sets one), which report to the server that sent the cluster: the server's LRS
    /// stream opens if it is not open. For a cluster whose `lrs_server` is `self`; the
    /// dependency manager calls it as it resolves such a cluster and puts the counters
    /// in the cluster's config, where the load balancer counts into them. While a
    /// copy of them is held the cluster is reported; after the last is dropped, its
    /// final counts go into the next report and it leaves the reports (and the stream
    /// closes when no cluster is left). The counted interval starts at the latest
    /// input the client was given.
    ///
    /// `None` when the cluster has no value cached (no server sent it).
    pub fn cluster_load_stats(
        &mut self,
        cluster: &str,
        eds_service_name: Option<&str>,
    ) -> Option<ClusterLoadStats> {
        let t = self.type_index(Cds::TYPE_URL)?;
        let server = self.resources[t].get(cluster)?.cached.as_ref()?.source;
        let config = self.servers[server].config.clone();
        let now = self.clock;
        let (lrs, mut ctx) = self.lrs_parts();
        let stats = lrs.cluster_stats(server, &config, cluster, eds_service_name, now, &mut ctx);
        Some(stats)
    }

    /// The load reporting state and what it needs of the client, borrowed apart.
    fn lrs_parts(
        &mut self,
    ) -> (
        &mut crate::lrs::LoadReporting,
        Ctx<'_, rand_xoshiro::Xoshiro256PlusPlus>,
    ) {
        let ctx = Ctx {
            actions: &mut self.actions,
            next_stream: &mut self.next_stream,
            rng: &mut self.rng,
            node: &self.node,
        };
        (&mut self.lrs, ctx)
    }

    /// The server of the LRS stream an event is about, if it is about one.
    pub(super) fn lrs_server_of(&self, event: &Event) -> Option<usize> {
        let stream = match event {
            Event::StreamStarted { stream }
            | Event::RequestSent { stream }
            | Event::ResponseReceived { stream, .. }
            | Event::StreamClosed { stream, .. } => *stream,
            _ => return None,
        };
        self.lrs.server_of_stream(stream)
    }

    pub(super) fn on_lrs_event(&mut self, server: usize, now: Instant, event: Event) {
        let (lrs, mut ctx) = self.lrs_parts();
        lrs.handle_event(server, now, event, &mut ctx);
        self.drop_unused_channels();
    }

    pub(super) fn on_lrs_timeout(&mut self, now: Instant) {
        let (lrs, mut ctx) = self.lrs_parts();
        lrs.handle_timeout(now, &mut ctx);
        self.drop_unused_channels();
    }

    /// The servers whose load reporting ended: their channel goes if ADS does not use
    /// them either.
    fn drop_unused_channels(&mut self) {
        for server in self.lrs.take_released() {
            let srv = &self.servers[server];
            if srv.stream.is_none() && !srv.has_subscriptions() {
                self.actions.push_back(Action::DropChannel {
                    server: ServerId(server),
                });
            }
        }
    }
}
