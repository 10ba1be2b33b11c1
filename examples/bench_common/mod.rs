//! Helpers shared by the benchmark examples (`mod bench_common;` in each).
//! A directory without `main.rs`, so cargo does not build it as an example.

// Each example uses a subset.
#![allow(dead_code)]

/// The value after `name` on the command line (`--reps 5`), else `default`.
pub fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

/// Median of `v` (mean of the middle two for an even count); NaN if empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The full name of BPF program `id` as its source names it (the kernel's
/// own program name is cut to 15 characters, which `nilb_xdp_balancer`
/// shares with `nilb_xdp_balancer6` and the `_c6` programs): the BTF name of
/// its main function. None if the program or its BTF cannot be read.
pub fn prog_func_name(id: u32) -> Option<String> {
    use libbpf_rs::btf::{Btf, BtfType};
    use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};
    let info =
        ProgInfoIter::with_query_opts(ProgInfoQueryOptions::default().include_func_info(true))
            .find(|p| p.id == id)?;
    let type_id = info.func_info.first()?.type_id;
    let btf = Btf::from_prog_id(id).ok()?;
    let ty: BtfType<'_> = btf.type_by_id(type_id.into())?;
    ty.name().map(|n| n.to_string_lossy().into_owned())
}
