//! Periodic probes of backends: one tokio task per (service, backend) that
//! runs a probe every interval (first run after a random delay so probes
//! spread out, then +-5 % jitter so they do not line up) and sends each
//! result to the control loop. Used by health checks and load scrapes.
//!
//! Tasks are identified by (service, backend) and a spec; [`Periodic::sync`]
//! keeps tasks whose spec is unchanged, restarts changed ones and stops the
//! rest. Each incarnation has a generation number so that results still in
//! flight from a replaced task can be told apart ([`Periodic::is_current`]).

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use rand::Rng;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::types::ServiceKey;

/// Key of a probe task.
pub type ProbeKey = (ServiceKey, IpAddr);

/// A set of periodic probe tasks with specs of type `S`.
pub struct Periodic<S> {
    runtime: tokio::runtime::Handle,
    tasks: HashMap<ProbeKey, (S, u64, JoinHandle<()>)>,
    next_generation: u64,
}

impl<S: Clone + PartialEq> Periodic<S> {
    /// Tasks spawned on `runtime`.
    pub fn new(runtime: tokio::runtime::Handle) -> Self {
        Periodic {
            runtime,
            tasks: HashMap::new(),
            next_generation: 1,
        }
    }

    /// Make the tasks match `want`; `start(key, spec, generation)` gives the
    /// future of a new task.
    pub fn sync<F, Fut>(&mut self, want: &HashMap<ProbeKey, S>, start: F)
    where
        F: Fn(ProbeKey, S, u64) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.tasks.retain(|k, (spec, _, handle)| {
            let keep = want.get(k) == Some(spec);
            if !keep {
                handle.abort();
            }
            keep
        });
        for (k, spec) in want {
            if self.tasks.contains_key(k) {
                continue;
            }
            let generation = self.next_generation;
            self.next_generation += 1;
            let handle = self.runtime.spawn(start(*k, spec.clone(), generation));
            self.tasks.insert(*k, (spec.clone(), generation, handle));
        }
    }

    /// Whether `generation` is the live task for `key`.
    pub fn is_current(&self, key: &ProbeKey, generation: u64) -> bool {
        self.tasks
            .get(key)
            .is_some_and(|(_, g, _)| *g == generation)
    }

    /// Number of running tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when no task runs.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

impl<S> Drop for Periodic<S> {
    fn drop(&mut self) {
        for (_, _, h) in self.tasks.values() {
            h.abort();
        }
    }
}

/// The body of a probe task: wait a random part of the interval (at most
/// `max_first_delay`), then forever run `probe`, pass its result to `tx`
/// (stop when the receiver is gone) and wait out the interval.
pub async fn run_periodically<R, P, Fut>(
    interval: Duration,
    max_first_delay: Duration,
    mut probe: P,
    tx: mpsc::Sender<R>,
) where
    P: FnMut() -> Fut,
    Fut: Future<Output = R>,
{
    let first = rand::thread_rng().gen_range(0..=max_first_delay.min(interval).as_millis() as u64);
    tokio::time::sleep(Duration::from_millis(first)).await;
    loop {
        let started = Instant::now();
        let result = probe().await;
        if tx.send(result).await.is_err() {
            return;
        }
        let jitter = rand::thread_rng().gen_range(0.95..1.05);
        tokio::time::sleep_until(started + interval.mul_f64(jitter)).await;
    }
}
