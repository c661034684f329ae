//! What the test client counts, and LoadBalancerStatsService, which reports it:
//! - `GetClientStats`: the peers of the next `num_rpcs` RPCs *sent* after the request
//!   (a block of consecutive RPC numbers, whatever order they complete in), returned
//!   when all of them completed or after `timeout_sec` (then partial);
//! - `GetClientAccumulatedStats`: per method, RPCs started and completed by status.
//!
//! [`Stats::start`] numbers an RPC as it is sent; [`Stats::finish`] records how it
//! ended, in every watcher whose block holds its number.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tonic::{Request, Response, Status};

use crate::pb::testing::client_configure_request::RpcType;
use crate::pb::testing::load_balancer_accumulated_stats_response::MethodStats;
use crate::pb::testing::load_balancer_stats_service_server::{
    LoadBalancerStatsService, LoadBalancerStatsServiceServer,
};
use crate::pb::testing::{
    LoadBalancerAccumulatedStatsRequest, LoadBalancerAccumulatedStatsResponse,
    LoadBalancerStatsRequest, LoadBalancerStatsResponse,
};

/// The longest `timeout_sec` a stats request may wait.
pub const MAX_STATS_TIMEOUT: Duration = Duration::from_secs(600);

/// The method name an RPC type has in `rpcs_by_method` (`UnaryCall`).
pub fn method_name(rpc: RpcType) -> &'static str {
    match rpc {
        RpcType::EmptyCall => "EmptyCall",
        RpcType::UnaryCall => "UnaryCall",
    }
}

/// How an RPC ended: the peer that answered, or the status code it failed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Succeeded, answered by this peer (its hostname).
    Ok(String),
    /// Failed with this status code (and a peer when the failure named one).
    Failed(tonic::Code),
}

/// One `GetClientStats` request: the block `[first, first + count)` and what ended.
struct Watcher {
    first: u64,
    count: u64,
    seen: u64,
    response: LoadBalancerStatsResponse,
    done: Arc<Notify>,
}

impl Watcher {
    fn record(&mut self, rpc: RpcType, outcome: &Outcome) {
        match outcome {
            Outcome::Ok(peer) => {
                *self.response.rpcs_by_peer.entry(peer.clone()).or_default() += 1;
                let by_method = self
                    .response
                    .rpcs_by_method
                    .entry(method_name(rpc).to_string())
                    .or_default();
                *by_method.rpcs_by_peer.entry(peer.clone()).or_default() += 1;
            }
            Outcome::Failed(_) => self.response.num_failures += 1,
        }
        self.seen += 1;
        if self.seen == self.count {
            self.done.notify_one();
        }
    }
}

#[derive(Default)]
struct Inner {
    next_rpc: u64,
    watchers: Vec<Watcher>,
    /// By RPC type name (`UNARY_CALL`): started, and completed by status code.
    methods: HashMap<&'static str, MethodStats>,
}

/// The client's counters. Cheap to clone.
#[derive(Clone, Default)]
pub struct Stats {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").finish_non_exhaustive()
    }
}

impl Stats {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Numbers an RPC of type `rpc` being sent, and counts it started.
    pub fn start(&self, rpc: RpcType) -> u64 {
        let mut inner = self.lock();
        let number = inner.next_rpc;
        inner.next_rpc += 1;
        inner
            .methods
            .entry(rpc.as_str_name())
            .or_default()
            .rpcs_started += 1;
        number
    }

    /// Records how RPC `number` of type `rpc` ended.
    pub fn finish(&self, number: u64, rpc: RpcType, outcome: &Outcome) {
        let mut inner = self.lock();
        let code = match outcome {
            Outcome::Ok(_) => tonic::Code::Ok,
            Outcome::Failed(code) => *code,
        };
        let method = inner.methods.entry(rpc.as_str_name()).or_default();
        *method.result.entry(code as i32).or_default() += 1;
        for watcher in &mut inner.watchers {
            if (watcher.first..watcher.first + watcher.count).contains(&number) {
                watcher.record(rpc, outcome);
            }
        }
    }

    /// The peers of the next `count` RPCs sent, once they all ended or after
    /// `timeout` (then what ended so far).
    pub async fn next_rpcs(&self, count: u64, timeout: Duration) -> LoadBalancerStatsResponse {
        let done = Arc::new(Notify::new());
        let first = {
            let mut inner = self.lock();
            let first = inner.next_rpc;
            inner.watchers.push(Watcher {
                first,
                count,
                seen: 0,
                response: LoadBalancerStatsResponse::default(),
                done: done.clone(),
            });
            first
        };
        if count > 0 {
            let _ = tokio::time::timeout(timeout, done.notified()).await;
        }
        let mut inner = self.lock();
        let at = inner
            .watchers
            .iter()
            .position(|w| w.first == first && Arc::ptr_eq(&w.done, &done));
        let watcher = inner
            .watchers
            .swap_remove(at.expect("the watcher this call added"));
        let mut response = watcher.response;
        // RPCs of the block that have not ended count as failures, as gRPC's clients
        // report them.
        response.num_failures += i32::try_from(count - watcher.seen).unwrap_or(i32::MAX);
        response
    }

    /// Per method: started, and completed by status code.
    #[allow(deprecated)]
    pub fn accumulated(&self) -> LoadBalancerAccumulatedStatsResponse {
        let inner = self.lock();
        let mut response = LoadBalancerAccumulatedStatsResponse::default();
        for (name, stats) in &inner.methods {
            let ok = stats.result.get(&0).copied().unwrap_or(0);
            let failed: i32 = stats
                .result
                .iter()
                .filter(|(c, _)| **c != 0)
                .map(|(_, n)| n)
                .sum();
            response
                .num_rpcs_started_by_method
                .insert(name.to_string(), stats.rpcs_started);
            response
                .num_rpcs_succeeded_by_method
                .insert(name.to_string(), ok);
            response
                .num_rpcs_failed_by_method
                .insert(name.to_string(), failed);
            response
                .stats_per_method
                .insert(name.to_string(), stats.clone());
        }
        response
    }

    /// LoadBalancerStatsService over these counters.
    pub fn service(self) -> LoadBalancerStatsServiceServer<Stats> {
        LoadBalancerStatsServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl LoadBalancerStatsService for Stats {
    async fn get_client_stats(
        &self,
        request: Request<LoadBalancerStatsRequest>,
    ) -> Result<Response<LoadBalancerStatsResponse>, Status> {
        let request = request.into_inner();
        let count = u64::try_from(request.num_rpcs)
            .map_err(|_| Status::invalid_argument("num_rpcs must not be negative"))?;
        let timeout = Duration::from_secs(u64::try_from(request.timeout_sec).unwrap_or(0))
            .min(MAX_STATS_TIMEOUT);
        Ok(Response::new(self.next_rpcs(count, timeout).await))
    }

    async fn get_client_accumulated_stats(
        &self,
        _: Request<LoadBalancerAccumulatedStatsRequest>,
    ) -> Result<Response<LoadBalancerAccumulatedStatsResponse>, Status> {
        Ok(Response::new(self.accumulated()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watcher_counts_the_block_sent_after_it_in_any_completion_order() {
        let stats = Stats::default();
        let before = stats.start(RpcType::UnaryCall);
        let watcher = {
            let stats = stats.clone();
            tokio::spawn(async move { stats.next_rpcs(2, Duration::from_secs(5)).await })
        };
        while stats.lock().watchers.is_empty() {
            tokio::task::yield_now().await;
        }
        let a = stats.start(RpcType::UnaryCall);
        let b = stats.start(RpcType::EmptyCall);
        let after = stats.start(RpcType::UnaryCall);
        stats.finish(after, RpcType::UnaryCall, &Outcome::Ok("late".into()));
        stats.finish(before, RpcType::UnaryCall, &Outcome::Ok("early".into()));
        stats.finish(
            b,
            RpcType::EmptyCall,
            &Outcome::Failed(tonic::Code::Unavailable),
        );
        stats.finish(a, RpcType::UnaryCall, &Outcome::Ok("x".into()));
        let response = watcher.await.expect("the watcher");
        assert_eq!(response.rpcs_by_peer, HashMap::from([("x".to_string(), 1)]));
        assert_eq!(response.num_failures, 1);
        assert_eq!(response.rpcs_by_method["UnaryCall"].rpcs_by_peer["x"], 1);
        let accumulated = stats.accumulated();
        assert_eq!(accumulated.stats_per_method["UNARY_CALL"].rpcs_started, 3);
        assert_eq!(accumulated.stats_per_method["EMPTY_CALL"].result[&14], 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_returns_what_ended_at_its_timeout() {
        let stats = Stats::default();
        let watcher = {
            let stats = stats.clone();
            tokio::spawn(async move { stats.next_rpcs(3, Duration::from_secs(1)).await })
        };
        while stats.lock().watchers.is_empty() {
            tokio::task::yield_now().await;
        }
        let a = stats.start(RpcType::UnaryCall);
        stats.finish(a, RpcType::UnaryCall, &Outcome::Ok("x".into()));
        let response = watcher.await.expect("the watcher");
        assert_eq!(response.rpcs_by_peer.len(), 1);
        assert_eq!(response.num_failures, 2, "the two RPCs never sent");
    }
}
