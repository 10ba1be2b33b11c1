//! The kernel features nilb uses, which of them it can do without, and
//! what each missing one turns off (docs/design.md "Kernel features").
//! Pure: the probes themselves are `dataplane::probe`'s; this module holds
//! the table, the verdict over probe results and their rendering for the
//! start-up log, `nilb features`, the state file and the metrics.
//!
//! A *base* feature is one every path of the data plane needs: a kernel
//! without it cannot run nilb, and the start stops with one line naming
//! it. An *optional* feature serves one capability: without it the object
//! still loads (weak kfunc declarations that the verifier prunes, programs
//! left unloaded), the capability is off, and a config that asks for it
//! has that part refused with the reason. The first mainline release of
//! each is from the kernel's git history (the commit that added it).

use serde::{Deserialize, Serialize};
use tracing::{error, warn};

/// What a probe looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Needs {
    /// The kernel's BTF at /sys/kernel/btf/vmlinux (CO-RE relocations).
    Btf,
    /// A program type the kernel accepts (`libbpf_probe_bpf_prog_type`).
    ProgType(&'static str),
    /// A helper a program type may call (`libbpf_probe_bpf_helper`): the
    /// program type and the helper's name without `bpf_`.
    Helper(&'static str, &'static str),
    /// Functions in the kernel's BTF (kfuncs, BPF iterator targets).
    BtfFuncs(&'static [&'static str]),
}

/// Whether a kernel without the feature can run nilb.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Needed by every path: missing, nilb does not start.
    Base,
    /// Needed by one capability, which is off without it.
    Optional,
}

/// One row of [`FEATURES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feature {
    /// Short name (`nilb features`, logs, the metric's label).
    pub name: &'static str,
    /// What it is, for an operator.
    pub needs_text: &'static str,
    /// What the probe checks.
    pub needs: Needs,
    /// The first mainline release that has it ("5.10").
    pub since: &'static str,
    /// Base or optional.
    pub kind: Kind,
    /// What uses it (base) or what is off without it (optional).
    pub serves: &'static str,
}

/// The feature of the QUIC-LB keyed algorithms (`single-pass`,
/// `four-pass`): the BPF crypto kfuncs, called from XDP and from the
/// syscall program that creates the AES contexts.
pub const QUIC_LB_CRYPTO: &str = "quic_lb_crypto";
/// The syscall program type the AES contexts are created by.
pub const SYSCALL_PROGRAMS: &str = "syscall_programs";

/// Every feature nilb probes, base first. Versions: the mainline release
/// that added the helper, program type or kfunc.
pub const FEATURES: &[Feature] = &[
    Feature {
        name: "btf",
        needs_text: "kernel BTF (CONFIG_DEBUG_INFO_BTF, /sys/kernel/btf/vmlinux)",
        needs: Needs::Btf,
        since: "5.4",
        kind: Kind::Base,
        serves: "CO-RE relocations of every program",
    },
    Feature {
        name: "xdp",
        needs_text: "XDP programs",
        needs: Needs::ProgType("xdp"),
        since: "4.8",
        kind: Kind::Base,
        serves: "the balancer and the backends' receive path",
    },
    Feature {
        name: "tc",
        needs_text: "TC classifier programs",
        needs: Needs::ProgType("sched_cls"),
        since: "4.1",
        kind: Kind::Base,
        serves: "second chance and NAT replies",
    },
    Feature {
        name: "fib_lookup",
        needs_text: "bpf_fib_lookup in XDP",
        needs: Needs::Helper("xdp", "fib_lookup"),
        since: "4.18",
        kind: Kind::Base,
        serves: "the balancer's next hop",
    },
    Feature {
        name: "socket_lookup",
        needs_text: "bpf_skc_lookup_tcp in XDP",
        needs: Needs::Helper("xdp", "skc_lookup_tcp"),
        since: "5.2",
        kind: Kind::Base,
        serves: "local first hops and decapsulation before GRO",
    },
    Feature {
        name: "jiffies",
        needs_text: "bpf_jiffies64 in XDP",
        needs: Needs::Helper("xdp", "jiffies64"),
        since: "5.5",
        kind: Kind::Base,
        serves: "the balancer's hop cache",
    },
    Feature {
        name: "redirect_neigh",
        needs_text: "bpf_redirect_neigh in TC",
        needs: Needs::Helper("sched_cls", "redirect_neigh"),
        since: "5.10",
        kind: Kind::Base,
        serves: "second chance and the balancer's slow path",
    },
    Feature {
        name: "coarse_clock",
        needs_text: "bpf_ktime_get_coarse_ns in TC",
        needs: Needs::Helper("sched_cls", "ktime_get_coarse_ns"),
        since: "5.11",
        kind: Kind::Base,
        serves: "NAT flow ages and rate limits",
    },
    Feature {
        name: "check_mtu",
        needs_text: "bpf_check_mtu in XDP",
        needs: Needs::Helper("xdp", "check_mtu"),
        since: "5.12",
        kind: Kind::Base,
        serves: "the balancer's MTU checks",
    },
    Feature {
        name: "load_bytes",
        needs_text: "bpf_xdp_load_bytes (and multi-buffer XDP)",
        needs: Needs::Helper("xdp", "load_bytes"),
        since: "5.18",
        kind: Kind::Base,
        serves: "QUIC connection IDs, multi-buffer frames on backends",
    },
    Feature {
        name: "tcp_iterator",
        needs_text: "the BPF iterator over TCP sockets (bpf_iter_tcp)",
        needs: Needs::BtfFuncs(&["bpf_iter_tcp"]),
        since: "5.9",
        kind: Kind::Base,
        serves: "the NAT flows' sweep",
    },
    Feature {
        name: SYSCALL_PROGRAMS,
        needs_text: "syscall programs (BPF_PROG_TYPE_SYSCALL)",
        needs: Needs::ProgType("syscall"),
        since: "5.14",
        kind: Kind::Optional,
        serves: "QUIC-LB single-pass and four-pass (their AES contexts are made by one)",
    },
    Feature {
        name: QUIC_LB_CRYPTO,
        needs_text:
            "the BPF crypto kfuncs (bpf_crypto_ctx_create, bpf_crypto_decrypt, bpf_crypto_encrypt)",
        needs: Needs::BtfFuncs(&[
            "bpf_crypto_ctx_create",
            "bpf_crypto_ctx_release",
            "bpf_crypto_decrypt",
            "bpf_crypto_encrypt",
        ]),
        since: "6.10",
        kind: Kind::Optional,
        serves: "QUIC-LB single-pass and four-pass",
    },
];

impl Feature {
    /// This feature as a kernel without it has it (off, no probe error).
    pub fn absent(&self) -> FeatureState {
        FeatureState {
            name: self.name.into(),
            on: false,
            kind: self.kind,
            needs: self.needs_text.into(),
            since: self.since.into(),
            serves: self.serves.into(),
            probe_error: None,
        }
    }
}

/// The row of [`FEATURES`] named `name`.
pub fn feature(name: &str) -> Option<&'static Feature> {
    FEATURES.iter().find(|f| f.name == name)
}

/// The probe results for one kernel: each feature of [`FEATURES`] present
/// or not, and the kernel's release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    /// `uname -r`.
    pub release: String,
    /// One per [`FEATURES`] row, in its order: present?
    pub present: Vec<bool>,
    /// Probes that failed for another reason than "absent" (not root, no
    /// memory): the feature counts as absent, the reason is shown.
    pub errors: Vec<(&'static str, String)>,
}

/// One feature's line of `nilb features`, the state file and the metric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureState {
    /// [`Feature::name`].
    pub name: String,
    /// Present in this kernel.
    pub on: bool,
    /// [`Feature::kind`].
    pub kind: Kind,
    /// [`Feature::needs_text`].
    pub needs: String,
    /// [`Feature::since`].
    pub since: String,
    /// [`Feature::serves`].
    pub serves: String,
    /// Why the probe could not tell, if it could not (null otherwise).
    #[serde(default)]
    pub probe_error: Option<String>,
}

impl KernelFeatures {
    /// Results as probed: `present` in [`FEATURES`] order (missing entries
    /// count as absent).
    pub fn new(release: impl Into<String>, present: Vec<bool>) -> Self {
        KernelFeatures {
            release: release.into(),
            present,
            errors: Vec::new(),
        }
    }

    /// A kernel with every feature (tests of the pure layers).
    pub fn all() -> Self {
        Self::new("test", vec![true; FEATURES.len()])
    }

    /// Whether feature `name` is present (an unknown name is not).
    pub fn has(&self, name: &str) -> bool {
        FEATURES
            .iter()
            .position(|f| f.name == name)
            .and_then(|i| self.present.get(i).copied())
            .unwrap_or(false)
    }

    /// Whether the QUIC-LB keyed algorithms can run: the crypto kfuncs and
    /// the syscall program that makes their contexts.
    pub fn quic_lb_keyed(&self) -> bool {
        self.has(QUIC_LB_CRYPTO) && self.has(SYSCALL_PROGRAMS)
    }

    /// Every feature with its state.
    pub fn states(&self) -> Vec<FeatureState> {
        FEATURES
            .iter()
            .enumerate()
            .map(|(i, f)| FeatureState {
                on: self.present.get(i).copied().unwrap_or(false),
                probe_error: self
                    .errors
                    .iter()
                    .find(|(n, _)| *n == f.name)
                    .map(|(_, e)| e.clone()),
                ..f.absent()
            })
            .collect()
    }

    /// Base features this kernel lacks: nilb cannot run here.
    pub fn missing_base(&self) -> Vec<FeatureState> {
        self.states()
            .into_iter()
            .filter(|s| s.kind == Kind::Base && !s.on)
            .collect()
    }

    /// Optional features this kernel lacks: what is off.
    pub fn off(&self) -> Vec<FeatureState> {
        self.states()
            .into_iter()
            .filter(|s| s.kind == Kind::Optional && !s.on)
            .collect()
    }

    /// The error a start stops with when base features are missing, naming
    /// each with what it needs and the first release that has it; None if
    /// every base feature is present.
    pub fn base_error(&self) -> Option<String> {
        let missing = self.missing_base();
        if missing.is_empty() {
            return None;
        }
        let list: Vec<String> = missing.iter().map(describe).collect();
        if missing.iter().all(|s| s.probe_error.is_some()) {
            return Some(format!(
                "cannot tell whether kernel {} has what nilb needs: {}",
                self.release,
                list.join("; ")
            ));
        }
        Some(format!(
            "kernel {} lacks what nilb needs on every path: {}",
            self.release,
            list.join("; ")
        ))
    }
}

/// "name: needs (Linux since or newer), for serves" (plus the probe's own
/// error if it failed).
pub fn describe(s: &FeatureState) -> String {
    let mut d = format!(
        "{}: needs {} (Linux {} or newer), {} {}",
        s.name,
        s.needs,
        s.since,
        match s.kind {
            Kind::Base => "used by",
            Kind::Optional => "off:",
        },
        s.serves
    );
    if let Some(e) = &s.probe_error {
        d.push_str(&format!(" [the probe failed: {e}]"));
    }
    d
}

/// The report of `nilb features`: the kernel, then a line per feature.
pub fn render(k: &KernelFeatures) -> String {
    let mut out = format!("kernel {}\n", k.release);
    let width = FEATURES.iter().map(|f| f.name.len()).max().unwrap_or(0);
    for s in k.states() {
        let kind = match s.kind {
            Kind::Base => "base",
            Kind::Optional => "optional",
        };
        out.push_str(&format!(
            "  {:<width$}  {:<3}  {:<8}  Linux {:<5} {}: {}\n",
            s.name,
            if s.on { "on" } else { "off" },
            kind,
            s.since,
            s.needs,
            s.serves
        ));
    }
    out
}

/// The kernel part of the state file (`nilb status`): every feature with
/// its state, and the parts of the config refused for a missing one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelStatus {
    /// `uname -r`.
    pub release: String,
    /// Every feature of [`FEATURES`].
    pub features: Vec<FeatureState>,
    /// Parts of the running config this kernel cannot run.
    #[serde(default)]
    pub refused: Vec<Refusal>,
}

/// A part of the configuration the kernel cannot run, refused while the
/// rest runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The service's name.
    pub service: String,
    /// What is refused (`quic_lb single-pass`).
    pub what: String,
    /// The feature it needs ([`Feature::name`]).
    pub feature: String,
    /// Why: [`describe`] of the feature.
    pub reason: String,
    /// What happens instead.
    pub instead: String,
}

impl KernelStatus {
    /// The state of kernel `k` with the config's refusals.
    pub fn of(k: &KernelFeatures, refused: Vec<Refusal>) -> Self {
        KernelStatus {
            release: k.release.clone(),
            features: k.states(),
            refused,
        }
    }

    /// `nilb status`'s lines: the kernel with what is off, then each
    /// refused part of the config.
    pub fn print(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let off: Vec<String> = self
            .features
            .iter()
            .filter(|f| !f.on)
            .map(|f| format!("{} (needs Linux {})", f.name, f.since))
            .collect();
        if off.is_empty() {
            writeln!(out, "kernel {}: every feature on", self.release)?;
        } else {
            writeln!(
                out,
                "kernel {}: features OFF: {}  (nilb features)",
                self.release,
                off.join(", ")
            )?;
        }
        for r in &self.refused {
            writeln!(
                out,
                "  REFUSED for service {}: {}: {}; {}",
                r.service, r.what, r.reason, r.instead
            )?;
        }
        Ok(())
    }
}

/// At start: one line per optional feature this kernel lacks, naming it,
/// what it needs and the first release that has it.
pub fn log_start(k: &KernelFeatures) {
    for s in k.off() {
        warn!(
            kernel = %k.release,
            feature = %s.name,
            needs = %s.needs,
            since = %s.since,
            "kernel feature off: {}",
            describe(&s)
        );
    }
}

/// After a start or a reload: one line per refused part of the config.
pub fn log_refusals(refused: &[Refusal]) {
    for r in refused {
        error!(
            service = %r.service,
            feature = %r.feature,
            "refused: {} of service {}: {}; {}",
            r.what,
            r.service,
            r.reason,
            r.instead
        );
    }
}

/// What `nilb features` found: the kernel's features, whether XDP
/// metadata works (nilb does not need it), and whether the BPF object
/// loaded with what this kernel has.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`crate::report::JSON_SCHEMA`].
    pub schema: u32,
    /// `uname -r`.
    pub release: String,
    /// Every feature of [`FEATURES`].
    pub features: Vec<FeatureState>,
    /// Whether XDP programs may call `bpf_xdp_adjust_meta` (not used by
    /// nilb; for operators who run other XDP programs).
    pub adjust_meta_allowed: bool,
    /// The load of the BPF object (the verifier's verdict on every
    /// program this kernel can run).
    pub object: ObjectLoad,
}

/// The outcome of loading the BPF object.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ObjectLoad {
    /// Every program loaded that this kernel can run.
    pub loaded: bool,
    /// The programs the verifier accepted.
    pub programs: Vec<String>,
    /// Programs left unloaded: their features are off here.
    pub skipped: Vec<String>,
    /// Why the load failed (the verifier's last lines are in the log);
    /// null when it loaded.
    pub error: Option<String>,
}

/// The text of `nilb features`: [`render`], the XDP metadata line and the
/// object's load.
pub fn render_report(r: &Report, k: &KernelFeatures) -> String {
    let mut out = render(k);
    out.push_str(&format!(
        "  (XDP metadata, bpf_xdp_adjust_meta: {} here; nilb does not need it, other XDP programs may)\n",
        if r.adjust_meta_allowed { "allowed" } else { "refused" }
    ));
    if r.object.loaded {
        out.push_str(&format!(
            "BPF object: loaded, {} programs ({})",
            r.object.programs.len(),
            r.object.programs.join(", ")
        ));
        if !r.object.skipped.is_empty() {
            out.push_str(&format!(
                "; not loaded, their features off: {}",
                r.object.skipped.join(", ")
            ));
        }
        out.push('\n');
    } else {
        out.push_str(&format!(
            "BPF object: NOT loaded: {}\n",
            r.object.error.as_deref().unwrap_or("unknown error")
        ));
    }
    let off: Vec<String> = k.off().into_iter().map(|s| s.name).collect();
    out.push_str(&match (r.object.loaded, off.is_empty()) {
        (true, true) => "verdict: nilb runs here with every feature\n".to_string(),
        (true, false) => format!(
            "verdict: nilb runs here; off: {} (a config that asks for them has that part refused)\n",
            off.join(", ")
        ),
        (false, _) => "verdict: nilb cannot run here (see above)\n".to_string(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn without(names: &[&str]) -> KernelFeatures {
        KernelFeatures::new(
            "6.1.0-57-amd64",
            FEATURES.iter().map(|f| !names.contains(&f.name)).collect(),
        )
    }

    #[test]
    fn debian_12s_kernel_runs_with_quic_lb_aes_off() {
        let k = without(&[QUIC_LB_CRYPTO]);
        assert_eq!(k.base_error(), None);
        assert!(!k.quic_lb_keyed());
        let off: Vec<_> = k.off().iter().map(|s| s.name.clone()).collect();
        assert_eq!(off, vec![QUIC_LB_CRYPTO]);
        assert_eq!(
            describe(&k.off()[0]),
            "quic_lb_crypto: needs the BPF crypto kfuncs (bpf_crypto_ctx_create, \
             bpf_crypto_decrypt, bpf_crypto_encrypt) (Linux 6.10 or newer), off: \
             QUIC-LB single-pass and four-pass"
        );
    }

    #[test]
    fn a_missing_base_feature_names_itself_and_its_release() {
        let k = without(&["redirect_neigh", "btf"]);
        let e = k.base_error().expect("base missing");
        assert!(
            e.starts_with("kernel 6.1.0-57-amd64 lacks what nilb needs"),
            "{e}"
        );
        assert!(e.contains("btf: needs kernel BTF"), "{e}");
        assert!(
            e.contains("redirect_neigh: needs bpf_redirect_neigh in TC (Linux 5.10 or newer)"),
            "{e}"
        );
    }

    #[test]
    fn a_probe_that_could_not_run_does_not_blame_the_kernel() {
        let mut k = without(&["xdp", "tc"]);
        k.errors = vec![
            ("xdp", "not permitted: probing needs CAP_BPF".into()),
            ("tc", "not permitted: probing needs CAP_BPF".into()),
        ];
        let e = k.base_error().expect("cannot tell");
        assert!(e.starts_with("cannot tell whether kernel"), "{e}");
        assert!(e.contains("[the probe failed: not permitted"), "{e}");
    }

    #[test]
    fn keyed_quic_lb_needs_both_its_features() {
        assert!(KernelFeatures::all().quic_lb_keyed());
        assert!(!without(&[SYSCALL_PROGRAMS]).quic_lb_keyed());
        assert!(!without(&[QUIC_LB_CRYPTO]).quic_lb_keyed());
        assert!(!KernelFeatures::new("x", vec![]).has("btf"));
    }

    #[test]
    fn base_features_come_first_and_names_are_unique() {
        let first_optional = FEATURES
            .iter()
            .position(|f| f.kind == Kind::Optional)
            .unwrap();
        assert!(FEATURES[first_optional..]
            .iter()
            .all(|f| f.kind == Kind::Optional));
        let mut names: Vec<_> = FEATURES.iter().map(|f| f.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FEATURES.len());
    }

    #[test]
    fn the_report_has_a_line_per_feature() {
        let r = render(&without(&[QUIC_LB_CRYPTO]));
        assert_eq!(r.lines().count(), 1 + FEATURES.len());
        assert!(r
            .lines()
            .any(|l| l.contains("quic_lb_crypto") && l.contains(" off ")));
    }
}
