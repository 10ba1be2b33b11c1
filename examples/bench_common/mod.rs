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

/// Runs per repeat-mode `BPF_PROG_TEST_RUN` call: about 4-80 ms of the
/// programs measured; a measurement is the median of several such calls.
pub const REPEAT_CALL: u32 = 100_000;

/// One XDP `BPF_PROG_TEST_RUN` (see `xdp_test_run`).
pub struct XdpRun {
    /// Verdict of the last run.
    pub retval: u32,
    /// The kernel's mean time per run, ns, truncated to an integer.
    pub duration_ns: u32,
    /// CPU time of the calling thread in the syscall / runs, ns per run:
    /// like the kernel's figure (time other tasks ran is in neither) but
    /// not truncated; includes the call's fixed cost (copying the frame in
    /// and out, about 2 us), negligible over a large `repeat`.
    pub cpu_ns: f64,
}

/// `BPF_PROG_TEST_RUN` of XDP program `prog` on `data` (context: the whole
/// frame, ingress interface `ifindex`), `repeat` runs, `flags` (e.g.
/// `BPF_F_TEST_XDP_LIVE_FRAMES`). Err: the kernel's errno.
pub fn xdp_test_run(
    prog: std::os::fd::BorrowedFd<'_>,
    data: &[u8],
    ifindex: u32,
    repeat: u32,
    flags: u32,
) -> std::io::Result<XdpRun> {
    use libbpf_rs::libbpf_sys;
    use nix::time::{clock_gettime, ClockId};
    use std::os::fd::AsRawFd;
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
    // rx_queue_index, egress_ifindex (u32 each)
    let mut ctx = [0u8; 24];
    ctx[4..8].copy_from_slice(&(data.len() as u32).to_ne_bytes());
    ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
    // SAFETY: zeroed is a valid bpf_test_run_opts; the pointers set below
    // point into live borrows for the duration of the call.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
    opts.data_in = data.as_ptr().cast();
    opts.data_size_in = data.len() as u32;
    opts.ctx_in = ctx.as_ptr().cast();
    opts.ctx_size_in = ctx.len() as u32;
    opts.repeat = repeat as i32;
    opts.flags = flags;
    let cpu = || clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map(std::time::Duration::from);
    let t0 = cpu()?;
    // SAFETY: see above.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    let t1 = cpu()?;
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(-rc));
    }
    Ok(XdpRun {
        retval: opts.retval,
        duration_ns: opts.duration,
        cpu_ns: (t1 - t0).as_nanos() as f64 / repeat.max(1) as f64,
    })
}

/// How the XDP figures are measured (`xdp_method`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum XdpMethod {
    /// `BPF_F_TEST_XDP_LIVE_FRAMES` through `gen_tail` into the veth:
    /// frames per second, counted on the peer.
    Live,
    /// Repeat-mode test runs of `gen_repeat` (bench/bpf/bench.bpf.c) and
    /// the program under test, nothing transmitted: program cost, ns per
    /// packet.
    Repeat,
}

/// The XDP method of this run and the live-frames probe's errno name
/// (None: live frames work, or were not probed). `--method auto` (the
/// default): one live-frames run (repeat 1) of the MAC-swap program
/// `macswap` on `frame` into interface `ifindex`; live frames unless the
/// kernel refuses it with EPERM, EOPNOTSUPP or EINVAL (any other error
/// fails). `--method live` or `--method repeat`: that method, no probe.
pub fn xdp_method(
    macswap: std::os::fd::BorrowedFd<'_>,
    frame: &[u8],
    ifindex: u32,
) -> anyhow::Result<(XdpMethod, Option<String>)> {
    use nix::errno::Errno;
    match arg("--method", "auto").as_str() {
        "live" => return Ok((XdpMethod::Live, None)),
        "repeat" => return Ok((XdpMethod::Repeat, None)),
        "auto" => {}
        m => anyhow::bail!("--method {m}: auto, live or repeat"),
    }
    let live = libbpf_rs::libbpf_sys::BPF_F_TEST_XDP_LIVE_FRAMES;
    match xdp_test_run(macswap, frame, ifindex, 1, live) {
        Ok(_) => Ok((XdpMethod::Live, None)),
        Err(e) => {
            let errno = Errno::from_raw(e.raw_os_error().unwrap_or(0));
            if ![Errno::EPERM, Errno::EOPNOTSUPP, Errno::EINVAL].contains(&errno) {
                anyhow::bail!("live-frames probe failed: {e}");
            }
            eprintln!(
                "live frames refused ({errno:?}: {e}): XDP figures are repeat-mode program cost"
            );
            Ok((XdpMethod::Repeat, Some(format!("{errno:?}"))))
        }
    }
}

/// Runs `run` on each of `sides` back to back, starting at side `rep %
/// sides.len()` (each side first as often as the others; two sides:
/// alternating): the results in `sides`' order.
pub fn round<T: Copy>(
    rep: usize,
    sides: &[T],
    mut run: impl FnMut(T) -> anyhow::Result<f64>,
) -> anyhow::Result<Vec<f64>> {
    let mut out = vec![0.0; sides.len()];
    for k in 0..sides.len() {
        let i = (rep + k) % sides.len();
        out[i] = run(sides[i])?;
    }
    Ok(out)
}

/// Repeat-mode measurement of `sides` (each with its expected verdict):
/// `prepare(side)` points the driver `gen_repeat` (`driver`) at the side's
/// program and returns the frame to run it on; each side then runs `runs`
/// times in calls of at most [`REPEAT_CALL`] runs on interface `ifindex`,
/// the calls round-robin over the sides ([`round`], from side `rep % len`)
/// so that a change of the shared host's load touches every side alike.
/// Returns per side ns per packet, driver and program: the median over its
/// calls of [`XdpRun::cpu_ns`]. Fails unless every call's last verdict is
/// the side's.
pub fn repeat_sides<'f, T: Copy>(
    driver: std::os::fd::BorrowedFd<'_>,
    ifindex: u32,
    rep: usize,
    sides: &[(T, u32)],
    runs: u32,
    mut prepare: impl FnMut(T) -> anyhow::Result<&'f [u8]>,
) -> anyhow::Result<Vec<f64>> {
    use anyhow::Context;
    let mut ns = vec![Vec::new(); sides.len()];
    for _ in 0..runs.div_ceil(REPEAT_CALL) {
        round(rep, sides, |(side, want)| {
            let frame = prepare(side)?;
            let r = xdp_test_run(driver, frame, ifindex, runs.min(REPEAT_CALL), 0)
                .context("repeat-mode BPF_PROG_TEST_RUN")?;
            if r.retval != want {
                anyhow::bail!("repeat mode: verdict {} instead of {want}", r.retval);
            }
            Ok(r.cpu_ns)
        })?
        .iter()
        .zip(&mut ns)
        .for_each(|(x, v)| v.push(*x));
    }
    Ok(ns.iter().map(|v| median(v)).collect())
}

/// The repeat-mode fields of a case's or pair's JSON object, after a
/// comma: raw ns per packet of A and B per repetition (keys named by
/// `a.0`, `b.0`), the driver alone, the net ratios, and the medians (nets:
/// of raw - driver per repetition).
pub fn repeat_json(a: (&str, &[f64]), b: (&str, &[f64]), drv: &[f64], net: &[f64]) -> String {
    let list = |v: &[f64]| {
        let items: Vec<String> = v.iter().map(|x| format!("{x:.4}")).collect();
        format!("[{}]", items.join(", "))
    };
    let nets = |v: &[f64]| median(&v.iter().zip(drv).map(|(x, d)| x - d).collect::<Vec<_>>());
    format!(
        ", \"{0}_raw_ns\": {1}, \"{2}_raw_ns\": {3}, \"driver_ns\": {4}, \"ratio_net\": {5}, \
         \"{0}_raw_ns_median\": {6:.2}, \"{2}_raw_ns_median\": {7:.2}, \"driver_ns_median\": {8:.2}, \
         \"{0}_net_ns_median\": {9:.2}, \"{2}_net_ns_median\": {10:.2}, \"ratio_net_median\": {11:.4}",
        a.0,
        list(a.1),
        b.0,
        list(b.1),
        list(drv),
        list(net),
        median(a.1),
        median(b.1),
        median(drv),
        nets(a.1),
        nets(b.1),
        median(net)
    )
}
