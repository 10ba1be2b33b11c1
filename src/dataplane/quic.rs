//! Writing QUIC-LB routes ([`QuicRoute`]) into the XDP balancer's maps
//! (bpf/maps.h): `quic_config` (service index -> decoder parameters),
//! `quic_crypto` (service index -> AES context, installed by the syscall
//! program `nilb_quic_set_key`) and `quic_servers` ((service index, server
//! ID) -> backend and slot). None of them is pinned: each daemon fills them
//! before it attaches its programs (docs/design.md "Restarts and adoption").

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::abi;
use super::abi::skel::NilbSkel;
use super::ops::QuicRoute;

/// What the maps hold per service index, as far as this process knows:
/// `Some(route)` written, `None` unknown (a write failed half-way: the next
/// call rewrites or clears it in full).
pub(super) type QuicInstalled = BTreeMap<u32, Option<QuicRoute>>;

/// Make the maps route exactly `want` (see [`super::DataplaneOps::set_quic`]).
/// Order per service: a change of parameters first disables the service
/// (`quic_config` zeroed, its packets follow the bucket table), then key
/// and server IDs are written, then the parameters enable it again; a
/// service that leaves is disabled first, then its key and IDs removed.
pub(super) fn sync(
    skel: &NilbSkel<'_>,
    have: &mut QuicInstalled,
    want: &[QuicRoute],
) -> Result<()> {
    let wanted: BTreeMap<u32, &QuicRoute> = want.iter().map(|r| (r.index, r)).collect();
    let gone: Vec<u32> = have
        .keys()
        .copied()
        .filter(|i| !wanted.contains_key(i))
        .collect();
    for index in gone {
        let old = have.insert(index, None).flatten();
        clear(skel, index, old.as_ref())?;
        have.remove(&index);
    }
    for (&index, &w) in &wanted {
        let old = match have.get(&index) {
            Some(Some(r)) if r == w => continue,
            Some(Some(r)) => Some(r.clone()),
            _ => None,
        };
        // Unknown until every write below succeeded.
        have.insert(index, None);
        write(skel, index, old.as_ref(), w)?;
        have.insert(index, Some(w.clone()));
    }
    Ok(())
}

fn set_config(skel: &NilbSkel<'_>, index: u32, v: &abi::sys::nilb_quic_lb) -> Result<()> {
    skel.maps
        .quic_config
        .update(&index.to_ne_bytes(), abi::bytes_of(v), MapFlags::ANY)
        .with_context(|| format!("writing quic_config[{index}]"))
}

/// The `quic_servers` keys of service `index`: the ones `old` wrote, or
/// (unknown) every key of the map with that index.
fn server_keys(skel: &NilbSkel<'_>, index: u32, old: Option<&QuicRoute>) -> Vec<Vec<u8>> {
    match old {
        Some(r) => r
            .servers
            .keys()
            .map(|sid| abi::bytes_of(&abi::quic_sid_key(index, sid)).to_vec())
            .collect(),
        None => skel
            .maps
            .quic_servers
            .keys()
            .filter(|k| k.get(..4) == Some(&index.to_ne_bytes()[..]))
            .collect(),
    }
}

fn delete_servers(skel: &NilbSkel<'_>, keys: &[Vec<u8>]) -> Result<()> {
    for k in keys {
        match skel.maps.quic_servers.delete(k) {
            Ok(()) => {}
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow::Error::new(e).context("removing a quic_servers entry")),
        }
    }
    Ok(())
}

/// Install (`Some`) or clear (`None`) the AES context of service `index`
/// through the syscall program `nilb_quic_set_key`. On a kernel without the
/// crypto kfuncs that program is not loaded (docs/design.md "Kernel
/// features") and no context can exist: clearing is then nothing to do,
/// and installing is an error (the control plane refuses keyed QUIC-LB
/// there, so it is never asked).
fn set_key(skel: &NilbSkel<'_>, index: u32, key: Option<&crate::quic_lb::Key>) -> Result<()> {
    let prog = &skel.progs.nilb_quic_set_key;
    if !prog.autoload() {
        if key.is_some() {
            anyhow::bail!(
                "QUIC-LB single-pass and four-pass need the BPF crypto kfuncs (Linux 6.10 or newer), which this kernel lacks"
            );
        }
        return Ok(());
    }
    abi::install_quic_key(prog, index, key)
}

fn clear(skel: &NilbSkel<'_>, index: u32, old: Option<&QuicRoute>) -> Result<()> {
    set_config(skel, index, &abi::sys::nilb_quic_lb::default())?;
    if old.is_none_or(|r| r.lb.key.is_some()) {
        set_key(skel, index, None)?;
    }
    delete_servers(skel, &server_keys(skel, index, old))
}

fn write(skel: &NilbSkel<'_>, index: u32, old: Option<&QuicRoute>, w: &QuicRoute) -> Result<()> {
    let value = abi::quic_lb_value(&w.lb.config());
    let same_decoder = old.is_some_and(|o| {
        abi::bytes_of(&abi::quic_lb_value(&o.lb.config())) == abi::bytes_of(&value)
    });
    if old.is_some() && !same_decoder {
        set_config(skel, index, &abi::sys::nilb_quic_lb::default())?;
    }
    if old.is_none_or(|o| o.lb.key != w.lb.key) {
        set_key(skel, index, w.lb.key.as_ref())?;
    }
    // Server IDs the new route does not have (changed ones are
    // overwritten below).
    let keep: Vec<Vec<u8>> = w
        .servers
        .keys()
        .map(|sid| abi::bytes_of(&abi::quic_sid_key(index, sid)).to_vec())
        .collect();
    let stale: Vec<Vec<u8>> = server_keys(skel, index, old)
        .into_iter()
        .filter(|k| !keep.contains(k))
        .collect();
    delete_servers(skel, &stale)?;
    for (sid, (dip, slot)) in &w.servers {
        if old.is_some_and(|o| o.servers.get(sid) == Some(&(*dip, *slot))) {
            continue;
        }
        let v = abi::quic_backend_value(*dip, *slot);
        skel.maps
            .quic_servers
            .update(
                abi::bytes_of(&abi::quic_sid_key(index, sid)),
                abi::bytes_of(&v),
                MapFlags::ANY,
            )
            .with_context(|| format!("writing quic_servers[{index}, {sid}]"))?;
    }
    set_config(skel, index, &value)
}
