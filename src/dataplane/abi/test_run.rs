//! BPF_PROG_TEST_RUN of nilb's programs on single frames (replay, tests,
//! benchmarks), with the input contexts the kernel expects.

use anyhow::{bail, Context, Result};
use libbpf_rs::ProgramInput;

use super::skel;

/// Run `prog` once on `frame` with an optional input context; returns the
/// verdict and the output frame (room for 256 bytes of growth).
fn test_run(
    prog: &libbpf_rs::ProgramMut<'_>,
    frame: &[u8],
    context_in: Option<&mut [u8]>,
    context_out: Option<&mut [u8]>,
) -> Result<(u32, Vec<u8>)> {
    let mut out = vec![0u8; frame.len() + 256];
    let input = ProgramInput {
        data_in: Some(frame),
        data_out: Some(&mut out),
        context_in,
        context_out,
        ..Default::default()
    };
    let output = prog
        .test_run(input)
        .with_context(|| format!("BPF_PROG_TEST_RUN of {}", prog.name().to_string_lossy()))?;
    let verdict = output.return_value;
    let len = output.data.map(|d| d.len()).unwrap_or(0);
    out.truncate(len);
    Ok((verdict, out))
}

/// One XDP test run, split the way the kernel sees the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpRun {
    /// The program's verdict (`XDP_*`).
    pub verdict: u32,
    /// XDP metadata the program left in front of the frame (`data_meta` to
    /// `data`); nilb's is a `struct nilb_xdp_meta` on packets it hands to
    /// TC ([`nilb_wire::NILB_XDP_MARK`](super::sys::nilb_wire::NILB_XDP_MARK),
    /// then the ifindex TC sends a slow-path packet out of, 0 for a local
    /// first hop; host byte order), else empty.
    pub meta: Vec<u8>,
    /// The frame from `data` to `data_end`: what the stack or the wire gets.
    pub frame: Vec<u8>,
}

/// Run an XDP program once on `frame` as if received on `ingress_ifindex`
/// (0: the loopback device). Returns the verdict and the output buffer as
/// BPF_PROG_TEST_RUN returns it: metadata, if the program left any, then
/// the frame. [`test_run_xdp_split`] separates the two.
pub fn test_run_xdp(
    prog: &libbpf_rs::ProgramMut<'_>,
    frame: &[u8],
    ingress_ifindex: u32,
) -> Result<(u32, Vec<u8>)> {
    let run = test_run_xdp_split(prog, frame, ingress_ifindex)?;
    let mut out = run.meta;
    out.extend_from_slice(&run.frame);
    Ok((run.verdict, out))
}

/// Like [`test_run_xdp`], with the metadata split off the frame. The kernel
/// reports the metadata length in the output context: `xdp_md.data` is
/// `data - data_meta` after the run (net/bpf/test_run.c).
pub fn test_run_xdp_split(
    prog: &libbpf_rs::ProgramMut<'_>,
    frame: &[u8],
    ingress_ifindex: u32,
) -> Result<XdpRun> {
    use skel::types::xdp_md;
    let mut ctx = zeroed_ctx::<xdp_md>();
    put_u32(
        &mut ctx,
        std::mem::offset_of!(xdp_md, data_end),
        frame.len() as u32,
    );
    put_u32(
        &mut ctx,
        std::mem::offset_of!(xdp_md, ingress_ifindex),
        ingress_ifindex,
    );
    let mut ctx_out = zeroed_ctx::<xdp_md>();
    let (verdict, mut out) = test_run(prog, frame, Some(&mut ctx), Some(&mut ctx_out))?;
    let at = std::mem::offset_of!(xdp_md, data);
    let meta_len = u32::from_ne_bytes(ctx_out[at..at + 4].try_into().expect("4 bytes")) as usize;
    if meta_len > out.len() {
        bail!(
            "BPF_PROG_TEST_RUN reported {meta_len} bytes of XDP metadata in a {}-byte output",
            out.len()
        );
    }
    let frame = out.split_off(meta_len);
    Ok(XdpRun {
        verdict,
        meta: out,
        frame,
    })
}

/// Run a TC (sched_cls) program once on `frame` as if received on `ifindex`
/// (0: the loopback device). Returns the verdict and the output frame.
pub fn test_run_tc(
    prog: &libbpf_rs::ProgramMut<'_>,
    frame: &[u8],
    ifindex: u32,
) -> Result<(u32, Vec<u8>)> {
    use skel::types::__sk_buff;
    let mut ctx = zeroed_ctx::<__sk_buff>();
    put_u32(&mut ctx, std::mem::offset_of!(__sk_buff, ifindex), ifindex);
    test_run(prog, frame, Some(&mut ctx), None)
}

/// A test-run context of type `T` as all-zero bytes. Built as bytes, not as
/// a Rust value, because the kernel rejects non-zero padding (EINVAL).
fn zeroed_ctx<T>() -> Vec<u8> {
    vec![0u8; std::mem::size_of::<T>()]
}

fn put_u32(buf: &mut [u8], offset: usize, v: u32) {
    buf[offset..offset + 4].copy_from_slice(&v.to_ne_bytes());
}
