//! Probing the running kernel for the features of
//! [`crate::features::FEATURES`]: program types and helpers through
//! libbpf's probes (a tiny program per question, judged by the verifier's
//! answer), kfuncs and iterator targets through the kernel's BTF. Done
//! once per process ([`kernel_features`]); root needed, as for loading.

use std::sync::OnceLock;

use libbpf_rs::btf::types::Func;
use libbpf_rs::libbpf_sys;
use libbpf_rs::{Btf, ProgramType};

use std::mem::MaybeUninit;

use crate::features::{KernelFeatures, Needs, ObjectLoad, Report, FEATURES};

/// The features of the running kernel, probed on the first call.
pub fn kernel_features() -> &'static KernelFeatures {
    static PROBED: OnceLock<KernelFeatures> = OnceLock::new();
    PROBED.get_or_init(probe)
}

fn prog_type(name: &str) -> ProgramType {
    match name {
        "xdp" => ProgramType::Xdp,
        "sched_cls" => ProgramType::SchedCls,
        "syscall" => ProgramType::Syscall,
        other => unreachable!("program type {other} is not in the feature table"),
    }
}

fn helper_id(name: &str) -> libbpf_sys::bpf_func_id {
    match name {
        "fib_lookup" => libbpf_sys::BPF_FUNC_fib_lookup,
        "skc_lookup_tcp" => libbpf_sys::BPF_FUNC_skc_lookup_tcp,
        "jiffies64" => libbpf_sys::BPF_FUNC_jiffies64,
        "redirect_neigh" => libbpf_sys::BPF_FUNC_redirect_neigh,
        "ktime_get_coarse_ns" => libbpf_sys::BPF_FUNC_ktime_get_coarse_ns,
        "check_mtu" => libbpf_sys::BPF_FUNC_check_mtu,
        "load_bytes" => libbpf_sys::BPF_FUNC_xdp_load_bytes,
        "xdp_adjust_meta" => libbpf_sys::BPF_FUNC_xdp_adjust_meta,
        other => unreachable!("helper {other} is not in the feature table"),
    }
}

/// The environment variable that turns optional features off as if the
/// kernel lacked them (a comma-separated list of feature names): to run
/// the degraded paths on a kernel that has everything (tests), or to keep
/// nilb off a feature an operator distrusts.
pub const FEATURES_OFF_ENV: &str = "NILB_FEATURES_OFF";

/// Whether this process may load BPF programs (effective CAP_BPF or
/// CAP_SYS_ADMIN, from /proc/self/status): without it libbpf's probes
/// answer "absent" for everything, which would blame the kernel.
fn may_load_bpf() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_BPF: u32 = 39;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN | 1 << CAP_BPF) != 0)
}

/// Probe every feature of the table.
fn probe() -> KernelFeatures {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    if !may_load_bpf() {
        let mut k = KernelFeatures::new(release, vec![false; FEATURES.len()]);
        k.errors = FEATURES
            .iter()
            .map(|f| {
                (
                    f.name,
                    "not permitted: probing needs CAP_BPF (or CAP_SYS_ADMIN); run as root"
                        .to_string(),
                )
            })
            .collect();
        return k;
    }
    let btf = Btf::from_vmlinux().map_err(|e| format!("reading /sys/kernel/btf/vmlinux: {e}"));
    let off: Vec<String> = std::env::var(FEATURES_OFF_ENV)
        .unwrap_or_default()
        .split(',')
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    let mut errors = Vec::new();
    let present = FEATURES
        .iter()
        .map(|f| {
            if off.iter().any(|n| n == f.name) {
                errors.push((f.name, format!("turned off by {FEATURES_OFF_ENV}")));
                return false;
            }
            let r = match (f.needs, &btf) {
                (Needs::Btf | Needs::BtfFuncs(_), Err(e)) => Err(e.clone()),
                (Needs::Btf, Ok(_)) => Ok(true),
                (Needs::BtfFuncs(names), Ok(b)) => Ok(names
                    .iter()
                    .all(|n| b.type_by_name::<Func<'_>>(n).is_some())),
                (Needs::ProgType(t), _) => prog_type(t).is_supported().map_err(|e| e.to_string()),
                (Needs::Helper(t, h), _) => prog_type(t)
                    .is_helper_supported(helper_id(h))
                    .map_err(|e| e.to_string()),
            };
            r.unwrap_or_else(|e| {
                errors.push((f.name, e));
                false
            })
        })
        .collect();
    let mut k = KernelFeatures::new(release, present);
    k.errors = errors;
    k
}

/// Whether XDP programs may call `bpf_xdp_adjust_meta` here. nilb does not
/// use it (docs/design.md "Hand-off from XDP to TC"); `nilb features`
/// reports it for operators who run other XDP programs beside nilb.
pub fn adjust_meta_allowed() -> bool {
    ProgramType::Xdp
        .is_helper_supported(helper_id("xdp_adjust_meta"))
        .unwrap_or(false)
}

/// `nilb features`: probe the kernel and load the BPF object with what it
/// has (nothing attached, no pins), reporting every program's fate.
pub fn report() -> Report {
    let k = kernel_features();
    let mut storage = MaybeUninit::uninit();
    let object = match super::Dataplane::load(&mut storage) {
        Ok(dp) => {
            let (programs, skipped) = dp.programs();
            ObjectLoad {
                loaded: true,
                programs,
                skipped,
                error: None,
            }
        }
        Err(e) => ObjectLoad {
            loaded: false,
            error: Some(format!("{e:#}")),
            ..Default::default()
        },
    };
    Report {
        schema: crate::report::JSON_SCHEMA,
        release: k.release.clone(),
        features: k.states(),
        adjust_meta_allowed: adjust_meta_allowed(),
        object,
    }
}
