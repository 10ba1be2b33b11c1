//! QUIC-LB in the data plane's ABI: the `Plain` impls of the QUIC structs of
//! `bpf/nilb.h`, their values from nilb's types, the syscall program run
//! that installs a service's AES key (bpf/quic_lb.h `quic_lb_install_key`),
//! and the skeleton of the decoder probe (tests).

use anyhow::{Context, Result};
use libbpf_rs::ProgramInput;

use super::sys;
use crate::quic_lb::{self, Algorithm};

// SAFETY: plain C structs of integers and integer arrays, laid out without
// implicit padding (explicit pad fields); any bit pattern is a valid value.
unsafe impl plain::Plain for sys::nilb_quic_lb {}
unsafe impl plain::Plain for sys::nilb_quic_sid_key {}
unsafe impl plain::Plain for sys::nilb_quic_key_args {}
unsafe impl plain::Plain for sys::nilb_quic_lb_probe {}
unsafe impl plain::Plain for sys::nilb_quic_backend {}

/// libbpf-rs skeleton of `bpf/quic_lb_probe.bpf.c` (tests only).
#[allow(clippy::all, missing_docs, non_camel_case_types, dead_code)]
pub mod quic_probe_skel {
    include!(concat!(env!("OUT_DIR"), "/quic_lb_probe.skel.rs"));
}

/// The decoder's view of a QUIC-LB configuration (`struct nilb_quic_lb`).
pub fn quic_lb_value(c: &quic_lb::Config) -> sys::nilb_quic_lb {
    use sys::nilb_quic_algorithm as alg;
    sys::nilb_quic_lb {
        algorithm: match c.algorithm() {
            Algorithm::Plaintext => alg::NILB_QUIC_PLAINTEXT,
            Algorithm::SinglePass => alg::NILB_QUIC_SINGLE_PASS,
            Algorithm::FourPass => alg::NILB_QUIC_FOUR_PASS,
        } as u8,
        codepoint: c.codepoint(),
        server_id_len: c.server_id_len() as u8,
        nonce_len: c.nonce_len() as u8,
        flags: if c.self_encode_length() {
            sys::nilb_quic_flags::NILB_QUIC_SELF_ENCODE_LENGTH as u8
        } else {
            0
        },
        pad: [0; 3],
    }
}

/// Key of a server-ID map entry: the service index and the server ID,
/// zero-padded to 16 bytes.
pub fn quic_sid_key(service_index: u32, sid: &quic_lb::ServerId) -> sys::nilb_quic_sid_key {
    let mut k = sys::nilb_quic_sid_key {
        service_index,
        sid: [0; 16],
    };
    k.sid[..sid.len()].copy_from_slice(sid.as_bytes());
    k
}

/// Run the key-installing syscall program `prog` for context slot `index`:
/// an `ecb(aes)` context for `key` replaces the slot's (None: the slot is
/// cleared). Errors carry the kernel's errno (the program's status).
pub fn install_quic_key(
    prog: &libbpf_rs::ProgramMut<'_>,
    index: u32,
    key: Option<&quic_lb::Key>,
) -> Result<()> {
    let mut args = sys::nilb_quic_key_args {
        index,
        clear: u32::from(key.is_none()),
        ..Default::default()
    };
    if let Some(k) = key {
        args.key = *k.as_bytes();
    }
    // SAFETY: the args struct is Plain; the slice covers exactly it, and the
    // kernel writes back at most its size (BPF_PROG_TEST_RUN of a syscall
    // program copies the context back into ctx_in).
    let bytes = unsafe { plain::as_mut_bytes(&mut args) };
    let input = ProgramInput {
        context_in: Some(bytes),
        ..Default::default()
    };
    prog.test_run(input)
        .with_context(|| format!("running {}", prog.name().to_string_lossy()))?;
    // The key bytes stay in `args`: wipe them.
    args.key = [0; 16];
    if args.status != 0 {
        let err = std::io::Error::from_raw_os_error(-args.status);
        anyhow::bail!("creating the ecb(aes) context for slot {index}: {err}");
    }
    Ok(())
}
