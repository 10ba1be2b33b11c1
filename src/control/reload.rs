//! A reload as one transaction ([`ControlPlane::reload`]): the new tables,
//! the node's role (XDP attached or not) and the health checks either all
//! take effect, or the running state is restored and the reload reported as
//! failed with the stage and reason (docs/design.md "Control plane").

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;

use super::{ControlPlane, Plan};
use crate::config::Config;
use crate::dataplane::DataplaneOps;
use crate::filters::FilterSet;

/// The part of a reload that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadStage {
    /// Writing the maps (tables, sets, counters, records).
    Apply,
    /// Attaching the XDP balancer (the node became a balancer).
    AttachXdp,
    /// Detaching the XDP balancer (the node is no longer one).
    DetachXdp,
    /// Starting or changing the health checks.
    HealthChecks,
}

impl ReloadStage {
    /// What the stage does, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            ReloadStage::Apply => "applying the tables",
            ReloadStage::AttachXdp => "attaching XDP (this node became a balancer)",
            ReloadStage::DetachXdp => "detaching XDP (this node is no longer a balancer)",
            ReloadStage::HealthChecks => "starting the health checks",
        }
    }
}

/// Why a reload did not take effect, and what restoring the running state
/// ran into (if anything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadError {
    /// The stage that failed.
    pub stage: ReloadStage,
    /// Its error.
    pub reason: String,
    /// Errors while restoring the running state (empty: fully restored).
    pub restore_errors: Vec<String>,
    /// The stage failed because the bucket pool had no room for a table
    /// ([`crate::dataplane::install::NoRoom`] in its error's chain).
    pub no_room: bool,
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.stage.describe(), self.reason)?;
        if !self.restore_errors.is_empty() {
            write!(
                f,
                "; restoring the running state failed too: {}",
                self.restore_errors.join("; ")
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ReloadError {}

/// Where a reload's transaction spent its time (microseconds), for the
/// daemon's "reload applied" line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReloadTimes {
    /// [`ControlPlane::update`] on a copy of the running state (compare
    /// with the running configuration, step the changed services).
    pub update_us: u64,
    /// [`ControlPlane::apply`]: the map writes.
    pub apply_us: u64,
    /// Asking for (and changing) the XDP role.
    pub role_us: u64,
    /// Starting, changing or stopping the health checks.
    pub checks_us: u64,
    /// CPU time of the threads that helped the calling one (the table
    /// steps and install words of a reload that changes many services,
    /// [`crate::split`]).
    pub helper_cpu_us: u64,
}

fn us_since(t: Instant) -> u64 {
    t.elapsed().as_micros() as u64
}

impl ControlPlane {
    /// Reload to `config` as one transaction on `dp` for the node at `node`:
    /// 1. the new state's plan is applied (tables, sets, counters, records);
    /// 2. the node's role follows the new config: XDP is attached when the
    ///    node became a balancer, detached when it stopped being one (the
    ///    role actually running is asked of the data plane);
    /// 3. `checks(new state)` starts, changes or stops the health checks.
    ///
    /// Any failure undoes the steps before it (the role as it was, the
    /// running state's full plan, `checks(running state)`) and returns the
    /// stage and reason: the caller keeps running `self`. On success the
    /// caller switches to the returned state.
    pub fn reload(
        &self,
        config: Config,
        now_ms: u64,
        dp: &mut dyn DataplaneOps,
        node: IpAddr,
        checks: &mut dyn FnMut(&ControlPlane) -> Result<()>,
    ) -> Result<(ControlPlane, Plan), ReloadError> {
        self.reload_with_filters(
            config,
            None,
            now_ms,
            dp,
            node,
            checks,
            &mut ReloadTimes::default(),
        )
    }

    /// [`Self::reload`] that also switches to the edge filters `filters`
    /// (compiled from `config` and its list files before the transaction;
    /// None keeps the filters in force). The returned plan's `filters` says
    /// whether they changed; a failed reload keeps the running filters.
    /// `times` receives the time of each step taken.
    #[allow(clippy::too_many_arguments)]
    pub fn reload_with_filters(
        &self,
        config: Config,
        filters: Option<Arc<FilterSet>>,
        now_ms: u64,
        dp: &mut dyn DataplaneOps,
        node: IpAddr,
        checks: &mut dyn FnMut(&ControlPlane) -> Result<()>,
        times: &mut ReloadTimes,
    ) -> Result<(ControlPlane, Plan), ReloadError> {
        self.reload_adjusted(
            config,
            filters,
            now_ms,
            dp,
            node,
            checks,
            times,
            &mut |_| Plan::default(),
        )
    }

    /// [`Self::reload_with_filters`] with `adjust` run on the next state
    /// after the update and before anything is written, its plan merged:
    /// a follower of a cluster's leader puts the published tables back
    /// there ([`ControlPlane::follow`]), so its own steps never reach the
    /// data plane.
    #[allow(clippy::too_many_arguments)]
    pub fn reload_adjusted(
        &self,
        config: Config,
        filters: Option<Arc<FilterSet>>,
        now_ms: u64,
        dp: &mut dyn DataplaneOps,
        node: IpAddr,
        checks: &mut dyn FnMut(&ControlPlane) -> Result<()>,
        times: &mut ReloadTimes,
        adjust: &mut dyn FnMut(&mut ControlPlane) -> Plan,
    ) -> Result<(ControlPlane, Plan), ReloadError> {
        let t = Instant::now();
        let mut next = self.clone();
        let (mut plan, helper_cpu_us) = next.update_timed(config, now_ms);
        plan.merge(adjust(&mut next));
        times.helper_cpu_us = helper_cpu_us;
        if let Some(f) = filters {
            plan.filters |= next.set_filters(f);
        }
        let fail = |stage: ReloadStage, e: anyhow::Error| ReloadError {
            stage,
            reason: format!("{e:#}"),
            restore_errors: Vec::new(),
            no_room: e
                .chain()
                .any(|c| c.is::<crate::dataplane::install::NoRoom>()),
        };
        times.update_us = us_since(t);
        let t = Instant::now();
        if let Err(e) = next.apply(dp, node, &plan) {
            let mut err = fail(ReloadStage::Apply, e);
            self.restore(dp, node, None, &mut err);
            return Err(err);
        }
        times.apply_us = us_since(t);
        let t = Instant::now();
        let want = next.is_balancer(node);
        let have = match dp.xdp_attached() {
            Ok(h) => h,
            Err(e) => {
                let stage = if want {
                    ReloadStage::AttachXdp
                } else {
                    ReloadStage::DetachXdp
                };
                let mut err = fail(stage, e.context("asking whether XDP is attached"));
                self.restore(dp, node, None, &mut err);
                return Err(err);
            }
        };
        if want != have {
            if let Err(e) = dp.set_xdp(want) {
                let stage = if want {
                    ReloadStage::AttachXdp
                } else {
                    ReloadStage::DetachXdp
                };
                let mut err = fail(stage, e);
                // The role is as it was unless the kernel says otherwise.
                self.restore(dp, node, Some(have), &mut err);
                return Err(err);
            }
        }
        times.role_us = us_since(t);
        let t = Instant::now();
        if let Err(e) = checks(&next) {
            let mut err = fail(ReloadStage::HealthChecks, e);
            self.restore(dp, node, Some(have), &mut err);
            if let Err(e) = checks(self) {
                err.restore_errors
                    .push(format!("restarting the running health checks: {e:#}"));
            }
            return Err(err);
        }
        times.checks_us = us_since(t);
        Ok((next, plan))
    }

    /// Undo a failed reload: the XDP role back to `role` (if given and
    /// different now), then the running state's full plan.
    fn restore(
        &self,
        dp: &mut dyn DataplaneOps,
        node: IpAddr,
        role: Option<bool>,
        err: &mut ReloadError,
    ) {
        if let Some(role) = role {
            match dp.xdp_attached() {
                Ok(now) if now != role => {
                    if let Err(e) = dp.set_xdp(role) {
                        err.restore_errors
                            .push(format!("putting the XDP role back: {e:#}"));
                    }
                }
                Ok(_) => {}
                Err(e) => err
                    .restore_errors
                    .push(format!("asking whether XDP is attached: {e:#}")),
            }
        }
        if let Err(e) = self.apply(dp, node, &self.full_plan()) {
            err.restore_errors
                .push(format!("re-installing the running tables: {e:#}"));
        }
    }
}
