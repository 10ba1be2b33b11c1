//! `bucket_first`, the balancer's hot first-hop array (docs/design.md "The
//! bucket pool", "The hot first-hop array", "Restarts and adoption"), seen
//! by packets: the balancer reads a bucket's entry first and the bucket
//! itself only when the entry has the chain bit, so an entry that lags its
//! bucket (a daemon killed between the two stores, or an older daemon that
//! wrote buckets without entries) forwards by itself alone, a whole earlier
//! state, until the next daemon's adoption rewrites it from the bucket.
//! Also the edge cases of the layout: tables of fewer than four buckets
//! share an 8-byte element with other tables' entries, IPv6 tables, a
//! table `services` points at that adoption does not take over, and a
//! region reused by another service after its quarantine, and a restart
//! that resizes several tables at once (the pool sized for old and new
//! regions together). Needs root;
//! skipped (one line on stderr) without it.

mod common;

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::path::Path;

use common::*;
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use nilb::config::{Config, Protocol, ServiceKey};
use nilb::control::ControlPlane;
use nilb::dataplane::abi::{self, ArrayMapping};
use nilb::dataplane::{Chains, Dataplane, PinnedMaps};
use nilb::hash::IPPROTO_TCP;

/// A bucket as (first hop, second hop).
type Hops = (Ipv4Addr, Option<Ipv4Addr>);

/// Run `f` in a thread of its own with a private mount namespace and a
/// bpffs of its own (pins of this test only, gone with it), and a private
/// network namespace ([`TestNet`]).
fn with_private_pins(f: impl FnOnce(&Path, &TestNet) + Send + 'static) {
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    let dir = std::env::temp_dir().join(format!(
        "nilb-bucket-first-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.clone();
    let r = std::thread::spawn(move || {
        unshare(CloneFlags::CLONE_NEWNS).expect("unshare(CLONE_NEWNS)");
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .unwrap();
        mount(Some("bpf"), &d, Some("bpf"), MsFlags::empty(), None::<&str>).unwrap();
        assert!(pin_to_cpu(0), "pinning to CPU 0");
        let net = TestNet::new();
        f(&d.join("nilb"), &net);
    })
    .join();
    let _ = std::fs::remove_dir(&dir);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

/// A data plane on the pins under `pins` (adopting what is there), leaked
/// like a daemon killed with kill -9 leaves its maps: dropping it would
/// unpin them.
fn load_pinned(pins: &Path) -> &'static mut Dataplane<'static> {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    Box::leak(Box::new(
        Dataplane::load_pinned(storage, Some(pins), 65536).expect("loading BPF (root needed)"),
    ))
}

/// The pinned `bucket_first` entry of pool bucket `idx`.
fn entry(pins: &Path, idx: u32) -> u16 {
    let m = libbpf_rs::MapHandle::from_pinned_path(pins.join("bucket_first")).unwrap();
    let a = ArrayMapping::new(m.as_fd(), idx as usize * 2, 2, false).unwrap();
    a.load_u16(idx as usize * 2)
}

/// Overwrite the pinned `bucket_first` entry of pool bucket `idx` (2 bytes,
/// the other lanes of its element untouched): what a daemon killed
/// between a bucket and its entry leaves, or an older daemon that wrote
/// the bucket and had no entries.
fn set_entry(pins: &Path, idx: u32, v: u16) {
    let m = libbpf_rs::MapHandle::from_pinned_path(pins.join("bucket_first")).unwrap();
    let a = ArrayMapping::new(m.as_fd(), idx as usize * 2, 2, true).unwrap();
    a.store_u16_release(idx as usize * 2, v);
}

/// Every pinned table's buckets whose entry is not the one its bucket
/// gives, as (service, bucket index, entry, expected entry).
fn entries_off(pins: &Path) -> Vec<(ServiceKey, usize, u16, u16)> {
    let (tables, _) = PinnedMaps::open(pins).unwrap().raw_tables().unwrap();
    let mut off = Vec::new();
    for t in &tables {
        assert_eq!(t.first.len(), t.buckets.len(), "{}: entries read", t.key);
        for (i, (h, f)) in t.buckets.iter().zip(&t.first).enumerate() {
            let want = abi::first_hop_entry(abi::bucket_word(*h));
            if *f != want {
                off.push((t.key, i, *f, want));
            }
        }
    }
    off
}

/// Two backends, weights 1:1, web (TCP 80) and dns (UDP 53) of 256 buckets.
fn two_backends() -> String {
    config(&[(B12, 1, "active"), (B13, 1, "active")], "drop")
}

fn tcp_key(port: u16) -> ServiceKey {
    ServiceKey {
        vip: VIP.into(),
        port,
        protocol: Protocol::Tcp,
    }
}

/// A client flow to the VIP's TCP `port` from client port `sport`: the
/// inner packet, its frame and the outer source port the balancer uses.
fn flow(net: &TestNet, sport: u16, port: u16) -> (Vec<u8>, Vec<u8>, u16) {
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(sport, port, ACK, b"x"));
    let frame = client_frame(net.mac, &inner);
    (
        inner,
        frame,
        sport_of(CLIENT, VIP, sport, port, IPPROTO_TCP),
    )
}

fn mac_of(b: Ipv4Addr) -> [u8; 6] {
    if b == B12 {
        MAC12
    } else {
        assert_eq!(b, B13);
        MAC13
    }
}

/// The backend the data plane `dp` sends `frame` to with no hop listed
/// (panics if it is not one of B12 and B13 with nothing listed).
fn sent_to(dp: &Dataplane<'_>, net: &TestNet, flow: &(Vec<u8>, Vec<u8>, u16)) -> Ipv4Addr {
    let (v, out) = dp.run_xdp(&flow.1, net.ifindex).unwrap();
    assert_eq!(v, XDP_TX, "verdict");
    for b in [B12, B13] {
        if out == encapsulated(mac_of(b), net.mac, b, &[], flow.2, &flow.0) {
            return b;
        }
    }
    panic!("sent to neither backend alone: {}", hex(&out));
}

/// A daemon killed between a bucket and its `bucket_first` entry: the
/// bucket names the new first hop, the entry (no chain bit) still the old
/// one. The balancer forwards by the entry alone (the whole state before
/// the change), `nilb lookup`-style readers of the buckets already say
/// the new hop, and the next daemon's adoption puts the entry back before
/// its programs run. The same with the chain bit left set on a bucket
/// that lists no previous owner: the bucket is read, and wins.
#[test]
fn a_lagging_entry_forwards_alone_until_adoption_rewrites_it() {
    require_root!("BPF, network namespace, bpffs");
    with_private_pins(|pins, net| {
        let dp = load_pinned(pins);
        let cp = ControlPlane::new(Config::parse(&two_backends()).unwrap(), 0);
        cp.apply(&mut *dp, NODE.into(), &cp.full_plan()).unwrap();
        assert!(entries_off(pins).is_empty());

        let (tables, backends) = PinnedMaps::open(pins).unwrap().raw_tables().unwrap();
        let web = tables.iter().find(|t| t.key == tcp_key(80)).unwrap();
        let slot_of = |b: Ipv4Addr| {
            backends
                .iter()
                .position(|a| *a == Some(b.into()))
                .expect("a slot of the backend") as u16
        };
        // A flow, its bucket and the backend the bucket names.
        let f = flow(net, 40200, 80);
        let h = hash_of((CLIENT, VIP, 40200, 80, IPPROTO_TCP));
        let i = (h & web.service.table_mask) as usize;
        let idx = web.service.table_base + i as u32;
        assert_eq!(web.buckets[i][1], 0, "a bucket without previous owners");
        let first = if web.buckets[i][0] == slot_of(B12) {
            B12
        } else {
            B13
        };
        let other = if first == B12 { B13 } else { B12 };
        assert_eq!(sent_to(dp, net, &f), first);

        // Killed between the bucket (first hop `first`) and its entry
        // (still `other`, the hop before): the entry alone decides.
        set_entry(pins, idx, slot_of(other));
        assert_eq!(
            sent_to(dp, net, &f),
            other,
            "the balancer forwards by a lagging entry (the state before the change)"
        );
        let live = PinnedMaps::open(pins)
            .unwrap()
            .table(&tcp_key(80))
            .unwrap()
            .unwrap();
        assert_eq!(
            live.chains[i].0,
            Some(first.into()),
            "readers of the buckets (nilb lookup, nilb tables) say the bucket's hop meanwhile"
        );
        assert_eq!(entries_off(pins).len(), 1);

        // The chain bit on an entry whose bucket lists nobody: the bucket
        // is read and decides (whatever slot the entry names).
        set_entry(pins, idx, slot_of(other) | abi::FIRST_HOP_CHAIN);
        assert_eq!(
            sent_to(dp, net, &f),
            first,
            "a chain entry defers to its bucket"
        );

        // The next daemon adopts the pins: before any install (none here)
        // the entry is the bucket's again, for its programs and for the
        // attached ones (the same map).
        set_entry(pins, idx, slot_of(other));
        let dp2 = load_pinned(pins);
        assert!(dp2.adopted());
        assert!(entries_off(pins).is_empty(), "adoption rewrote the entry");
        assert_eq!(sent_to(dp2, net, &f), first);
        assert_eq!(
            sent_to(dp, net, &f),
            first,
            "the earlier programs read it too"
        );
    });
}

/// Install the config of [`two_backends`] and return its backends' slots
/// (those of the TCP service on port 80), for tables installed by hand.
fn installed_slots(dp: &mut Dataplane<'_>) -> impl Fn(IpAddr) -> u32 {
    let cp = ControlPlane::new(Config::parse(&two_backends()).unwrap(), 0);
    cp.apply(dp, NODE.into(), &cp.full_plan()).unwrap();
    let live = dp.live_tables().unwrap();
    let slots = live
        .into_iter()
        .find(|(k, _)| *k == tcp_key(80))
        .unwrap()
        .1
        .slots;
    move |a: IpAddr| slots[&a]
}

/// Tables of 1 and 2 buckets (what `install_chains` and etcd-published
/// tables may have; the config's minimum is 16): their entries share one
/// 8-byte element of `bucket_first` with each other. Every write is a
/// 2-byte store of one entry, so an install of one table (in place, a
/// `changed` subset, or a new region) leaves its neighbours' lanes and
/// packets alone, and adoption rewrites each lane from its own bucket.
#[test]
fn tables_smaller_than_an_element_keep_their_neighbours_lanes() {
    require_root!("BPF, network namespace, bpffs");
    with_private_pins(|pins, net| {
        let dp = load_pinned(pins);
        let slot_of = installed_slots(dp);
        let chains = |hops: &[Hops]| Chains {
            chains: hops
                .iter()
                .map(|(f, p)| (Some((*f).into()), p.iter().map(|&p| p.into()).collect()))
                .collect(),
            moved_at: vec![None; hops.len()],
        };
        // ports 81, 82 (2 buckets), 83: regions 512, 514-515, 513 (the
        // buddy allocator, smallest block first, lowest address first):
        // one element of `bucket_first`.
        let tiny: [(u16, u32, &[Hops]); 3] = [
            (81, 20, &[(B12, None)]),
            (82, 21, &[(B13, None), (B13, Some(B12))]),
            (83, 22, &[(B13, None)]),
        ];
        for (port, index, hops) in tiny {
            dp.install_chains(&tcp_key(port), index, &chains(hops), &slot_of, None)
                .unwrap();
        }
        let (tables, _) = PinnedMaps::open(pins).unwrap().raw_tables().unwrap();
        let base = |port| {
            tables
                .iter()
                .find(|t| t.key == tcp_key(port))
                .unwrap()
                .service
                .table_base
        };
        let bases = [base(81), base(82), base(83)];
        assert_eq!(
            bases.map(|b| b / 4),
            [bases[0] / 4; 3],
            "the three tables' entries share one element ({bases:?})"
        );
        assert!(entries_off(pins).is_empty());
        let to =
            |dp: &Dataplane<'_>, port: u16, sport: u16| sent_to(dp, net, &flow(net, sport, port));
        assert_eq!((to(dp, 81, 1), to(dp, 83, 1)), (B12, B13));

        // 82 changes in place, only its bucket 1 (`changed`): the chain
        // goes, the first hop moves to B12.
        dp.install_chains(
            &tcp_key(82),
            21,
            &chains(&[(B13, None), (B12, None)]),
            &slot_of,
            Some(&[1]),
        )
        .unwrap();
        assert!(entries_off(pins).is_empty());
        assert_eq!(
            (to(dp, 81, 1), to(dp, 83, 1)),
            (B12, B13),
            "neighbours unchanged"
        );
        // 83 changes in place too, then 81 grows to a new region of 4.
        dp.install_chains(&tcp_key(83), 22, &chains(&[(B12, None)]), &slot_of, None)
            .unwrap();
        dp.install_chains(&tcp_key(81), 20, &chains(&[(B13, None); 4]), &slot_of, None)
            .unwrap();
        assert!(entries_off(pins).is_empty());
        assert_eq!((to(dp, 81, 1), to(dp, 83, 1)), (B13, B12));
        assert_eq!(
            entry(pins, bases[1]),
            abi::first_hop_entry(abi::bucket_word([slot_of(B13.into()) as u16, 0, 0, 0]))
        );

        // Every lane of the shared element smudged: adoption rewrites each
        // from its own bucket (81's old lane, now in quarantine and read
        // by no `services` value, is left as it was).
        for idx in bases {
            set_entry(pins, idx, 0);
        }
        let dp2 = load_pinned(pins);
        assert!(dp2.adopted());
        assert!(entries_off(pins).is_empty());
        assert_eq!(
            (
                sent_to(dp2, net, &flow(net, 1, 81)),
                sent_to(dp2, net, &flow(net, 1, 83))
            ),
            (B13, B12)
        );
    });
}

/// IPv6 services run the same `xdp_bucket` (`nilb_xdp_balancer6`): their
/// tables, in `services6`, get their entries rewritten on adoption too; and
/// so does a table `services` points at that adoption does not take over
/// (its region overlaps another's: here a forged `services` value), which
/// the programs keep reading until it is installed anew.
#[test]
fn adoption_rewrites_ipv6_tables_and_tables_not_taken_over() {
    require_root!("BPF, bpffs");
    with_private_pins(|pins, _net| {
        let yaml = two_backends()
            + "  - name: web6\n    vip: \"2001:db8::100\"\n    port: 80\n    protocol: tcp\n    table_size: 64\n    backends:\n      - {dip: 10.0.0.12}\n      - {dip: 10.0.0.13}\n";
        let dp = load_pinned(pins);
        let cp = ControlPlane::new(Config::parse(&yaml).unwrap(), 0);
        cp.apply(&mut *dp, NODE.into(), &cp.full_plan()).unwrap();
        let (tables, _) = PinnedMaps::open(pins).unwrap().raw_tables().unwrap();
        let web6_key = ServiceKey {
            vip: "2001:db8::100".parse::<Ipv6Addr>().unwrap().into(),
            port: 80,
            protocol: Protocol::Tcp,
        };
        assert!(tables.iter().any(|t| t.key == web6_key));
        let web = tables
            .iter()
            .find(|t| t.key == tcp_key(80))
            .unwrap()
            .clone();
        for t in &tables {
            let end = t.service.table_base + t.service.table_mask + 1;
            assert!(
                end <= 576,
                "{} at {}-{end}: within the first 576 buckets",
                t.key,
                t.service.table_base
            );
        }
        // A forged service whose `services` value names the region 0-1023:
        // web's, dns's and web6's buckets and 448 that are no one else's
        // (576-1023).
        // Adoption does not take it over (it overlaps the others), but the
        // programs read all of it until it is installed anew.
        let services = libbpf_rs::MapHandle::from_pinned_path(pins.join("services")).unwrap();
        let (_, k) = abi::service_key(&tcp_key(8080));
        let mut forged = web.service;
        forged.table_base = 0;
        forged.table_mask = 1023;
        services
            .update(&k, abi::bytes_of(&forged), MapFlags::ANY)
            .unwrap();
        // Entries naming slot 9, which no bucket names.
        for idx in 0..1024 {
            set_entry(pins, idx, 9);
        }
        assert_eq!(entries_off(pins).len(), 1024 + 2 * 256 + 64);
        let _dp2 = load_pinned(pins);
        assert!(entries_off(pins).is_empty());
    });
}

/// A service removed, its region quarantined, then after the quarantine
/// given to another service of the same size: the new table's entries
/// are all written (a new region is filled completely) before `services`
/// points at it, whatever the removed table's entries were.
#[test]
fn a_region_reused_after_quarantine_gets_its_own_entries() {
    require_root!("BPF, network namespace, bpffs");
    with_private_pins(|pins, net| {
        let dp = load_pinned(pins);
        let slot_of = installed_slots(dp);
        let all = |b: Ipv4Addr| Chains {
            chains: vec![(Some(b.into()), vec![]); 16],
            moved_at: vec![None; 16],
        };
        dp.install_chains(&tcp_key(90), 30, &all(B12), &slot_of, None)
            .unwrap();
        let base_of = |port| {
            let (t, _) = PinnedMaps::open(pins).unwrap().raw_tables().unwrap();
            t.iter()
                .find(|t| t.key == tcp_key(port))
                .map(|t| t.service.table_base)
        };
        let r = base_of(90).unwrap();
        assert_eq!(sent_to(dp, net, &flow(net, 7, 90)), B12);
        {
            use nilb::dataplane::DataplaneOps;
            dp.remove_service(&tcp_key(90)).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(1100));
        dp.install_chains(&tcp_key(91), 31, &all(B13), &slot_of, None)
            .unwrap();
        assert_eq!(base_of(91), Some(r), "the quarantined region, reused");
        assert!(entries_off(pins).is_empty());
        for sport in 1..20 {
            assert_eq!(sent_to(dp, net, &flow(net, sport, 91)), B13);
        }
    });
}

/// Replace the pinned `bucket_first` by an ARRAY of `value`-byte values,
/// `entries` long, with map flags `flags`, then load a data plane on the
/// pins (what the next daemon does at start).
fn load_with_pinned_first(
    pins: &Path,
    value: u32,
    entries: u32,
    flags: u32,
) -> anyhow::Result<&'static mut Dataplane<'static>> {
    let path = pins.join("bucket_first");
    let _ = std::fs::remove_file(&path);
    let mut m = abi::create_map(
        libbpf_rs::MapType::Array,
        "bucket_first",
        4,
        value,
        entries,
        flags,
    )
    .unwrap();
    m.pin(&path).unwrap();
    drop(m);
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    Ok(Box::leak(Box::new(Dataplane::load_pinned(
        storage,
        Some(pins),
        65536,
    )?)))
}

/// A pinned `bucket_first` of another size (a pool that grew or shrank
/// without it: an older daemon after a downgrade) or another value size:
/// optional (docs/design.md "Maps": "made and filled when missing"), so it
/// is replaced by a new one filled from the buckets, and the pins are
/// adopted (libbpf would refuse to reuse it: its max_entries or value size
/// differ from the object's map).
#[test]
fn a_pinned_bucket_first_of_another_size_is_replaced() {
    require_root!("BPF, bpffs");
    with_private_pins(|pins, _net| {
        let dp = load_pinned(pins);
        let cp = ControlPlane::new(Config::parse(&two_backends()).unwrap(), 0);
        cp.apply(&mut *dp, NODE.into(), &cp.full_plan()).unwrap();
        let mmapable = libbpf_rs::libbpf_sys::BPF_F_MMAPABLE;
        for (what, value, entries) in [
            ("twice the entries", 8, 65536 / 2),
            ("half the entries", 8, 65536 / 8),
            ("16-byte values", 16, 65536 / 4),
        ] {
            let dp2 = load_with_pinned_first(pins, value, entries, mmapable)
                .unwrap_or_else(|e| panic!("{what}: {e:#}"));
            assert!(dp2.adopted(), "{what}: adopted");
            assert!(entries_off(pins).is_empty(), "{what}: filled");
        }
    });
}

/// FAILS at ae48120: a pinned `bucket_first` of the right type, sizes and
/// length but without `BPF_F_MMAPABLE` is taken for a match
/// (`Dataplane::load_pinned_sized`'s `matches` compares type, key and value
/// size and max_entries, not the map flags), so it is neither replaced nor
/// reused: libbpf refuses it ("couldn't reuse pinned map ...: parameter
/// mismatch") and the daemon cannot start, although the map is optional
/// and the forwarding state in the other pins is intact. (The same check
/// lets any pinned map with other flags through; for the required ones the
/// documented answer is "replaced, with a warning".)
#[test]
fn a_pinned_bucket_first_without_mmap_is_replaced() {
    require_root!("BPF, bpffs");
    with_private_pins(|pins, _net| {
        let dp = load_pinned(pins);
        let cp = ControlPlane::new(Config::parse(&two_backends()).unwrap(), 0);
        cp.apply(&mut *dp, NODE.into(), &cp.full_plan()).unwrap();
        let dp2 = load_with_pinned_first(pins, 8, 65536 / 4, 0).unwrap_or_else(|e| {
            panic!("a pinned bucket_first kept the daemon from starting: {e:#}")
        });
        assert!(dp2.adopted());
        assert!(entries_off(pins).is_empty());
    });
}

/// Three services (web TCP 80, dns UDP 53, api TCP 81) of `size` buckets.
fn three_tables(size: u32) -> Config {
    let y = two_backends().replace("table_size: 256", &format!("table_size: {size}"))
        + &format!(
            "  - name: api\n    vip: 10.0.0.100\n    port: 81\n    protocol: tcp\n    table_size: {size}\n    backends:\n      - {{dip: 10.0.0.13}}\n"
        );
    Config::parse(&y).unwrap()
}

/// A data plane on the pins under `pins` with a pool of `pool_buckets`,
/// leaked as [`load_pinned`]'s.
fn load_sized(pins: &Path, pool_buckets: u32) -> &'static mut Dataplane<'static> {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    Box::leak(Box::new(
        Dataplane::load_pinned(storage, Some(pins), pool_buckets).expect("loading BPF"),
    ))
}

/// A restart that resizes several tables at once (docs/design.md "Maps",
/// sizing): each new region is taken while every old one is still in use.
/// Three tables of 16,384 buckets in one chunk, all set to 32,768: the old
/// and new regions need 147,456 buckets, more than every table plus one of
/// the largest (131,072). A start sized that way (as before) finds no room
/// and fails, and so would every start after it on these pins; a start
/// sized by [`start_pool_buckets`] grows the pool to three chunks and
/// resizes all three tables, each bucket keeping the hops of bucket i mod
/// 16,384.
#[test]
fn a_restart_that_resizes_three_tables_has_room_for_old_and_new() {
    use nilb::dataplane::{pool_buckets, start_pool_buckets};
    require_root!("BPF, network namespace, bpffs");
    with_private_pins(|pins, _net| {
        let small = three_tables(16384);
        let dp = load_sized(pins, start_pool_buckets(&small, Some(pins)));
        let cp = ControlPlane::new(small, 0);
        cp.apply(&mut *dp, NODE.into(), &cp.full_plan()).unwrap();
        let before = PinnedMaps::open(pins).unwrap().tables().unwrap();
        assert_eq!(
            nilb::dataplane::pinned::pinned_regions(pins).unwrap().0,
            65536
        );

        let large = three_tables(32768);
        let start = |pool: u32| {
            let dp = load_sized(pins, pool);
            assert!(dp.adopted());
            let live = dp.live_tables().unwrap();
            let records = dp.control_state().unwrap();
            let (cp, plan) = ControlPlane::adopt(large.clone(), live, records, 1000);
            cp.apply(&mut *dp, NODE.into(), &plan)
        };
        // Sized as every table plus one largest: no room.
        assert_eq!(pool_buckets(&large), 131072);
        let e = start(pool_buckets(&large)).expect_err("two chunks hold the old and new regions");
        let e = format!("{e:#}");
        assert!(e.contains("no room"), "{e}");
        // The message gives the live pool (the three old tables), not the
        // trial copy with this change's regions placed so far.
        assert!(e.contains("131072 buckets in all, 49152 in tables"), "{e}");
        assert!(e.contains("needs 98304 buckets in new regions"), "{e}");

        // Sized for the pinned regions beside the new ones.
        let n = start_pool_buckets(&large, Some(pins));
        assert_eq!(n, 196608);
        start(n).expect("three chunks hold the old and new regions");
        let after = PinnedMaps::open(pins).unwrap().tables().unwrap();
        assert_eq!(after.len(), 3);
        for ((k0, t0), (k1, t1)) in before.iter().zip(&after) {
            assert_eq!(k0, k1);
            assert_eq!(t1.size(), 32768, "{k1}");
            for (i, c) in t1.chains.iter().enumerate() {
                assert_eq!(c, &t0.chains[i % 16384], "{k1} bucket {i}");
            }
        }
    });
}

/// Grow the pinned map `name` to `entries` elements as a start does
/// (contents copied into the prefix), leaving the copy pinned as
/// `NAME_grown`; renamed over the old pin if `rename`.
fn grow_pin(pins: &Path, name: &str, entries: u32, rename: bool) {
    let from = libbpf_rs::MapHandle::from_pinned_path(pins.join(name)).unwrap();
    let bytes = from.max_entries() as usize * from.value_size() as usize;
    let mut to = abi::create_mmapable_array(name, from.value_size(), entries).unwrap();
    let src = ArrayMapping::new(from.as_fd(), 0, bytes, false).unwrap();
    let dst = ArrayMapping::new(to.as_fd(), 0, bytes, true).unwrap();
    dst.write(0, &src.read(0, bytes));
    let grown = pins.join(format!("{name}_grown"));
    to.pin(&grown).unwrap();
    if rename {
        std::fs::rename(&grown, pins.join(name)).unwrap();
    }
}

/// A start killed between the renames of a pool growth (docs/design.md
/// "Maps", sizing): `buckets` is at the new size, `bucket_moved` still at
/// the old one, with or without its grown copy pinned beside it. The next
/// start finishes the growth (takes the copy, or grows `bucket_moved` from
/// its prefix) and adopts every table as it was, leaving no `_grown` pin.
/// Before, the sizes disagreed, every pin was replaced and every table
/// built anew (held connections were lost).
#[test]
fn a_start_killed_while_it_grew_the_pool_is_finished_by_the_next() {
    require_root!("BPF, network namespace, bpffs");
    with_private_pins(|pins, _net| {
        let cfg = three_tables(4096);
        let dp = load_sized(pins, 65536);
        let cp = ControlPlane::new(cfg.clone(), 0);
        cp.apply(&mut *dp, NODE.into(), &cp.full_plan()).unwrap();
        let before = PinnedMaps::open(pins).unwrap().tables().unwrap();
        let moved_len = |p: &Path| {
            libbpf_rs::MapHandle::from_pinned_path(p.join("bucket_moved"))
                .unwrap()
                .max_entries()
        };
        let grown_left = |p: &Path| {
            std::fs::read_dir(p)
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with("_grown"))
                .collect::<Vec<_>>()
        };
        let mut prev = 65536u32;
        for (pool, moved_copy) in [(131072u32, false), (196608, true)] {
            // Killed after the rename of `buckets`: `bucket_moved` has its
            // grown copy pinned (killed before its rename) or none.
            grow_pin(pins, "buckets", pool, true);
            if moved_copy {
                grow_pin(pins, "bucket_moved", pool / 2, false);
            }
            assert_eq!(moved_len(pins), prev / 2, "bucket_moved at the old size");
            prev = pool;
            let dp = load_sized(pins, 65536);
            assert!(dp.adopted(), "the pins are adopted, not replaced");
            assert_eq!(dp.pool_grew(), None);
            assert_eq!(
                moved_len(pins),
                pool / 2,
                "bucket_moved grown as buckets was"
            );
            assert!(grown_left(pins).is_empty(), "{:?}", grown_left(pins));
            let live = dp.live_tables().unwrap();
            let records = dp.control_state().unwrap();
            let (cp, plan) = ControlPlane::adopt(cfg.clone(), live, records, 1000);
            cp.apply(&mut *dp, NODE.into(), &plan).unwrap();
            assert_eq!(
                PinnedMaps::open(pins).unwrap().tables().unwrap(),
                before,
                "every table as it was"
            );
        }
    });
}

/// A start that grew the pool and was killed before it attached leaves the
/// attached programs reading the pool it replaced, with `services` shared:
/// the next start must know it even though it grows nothing itself, so
/// that a table in a region of its own waits for the attach (the daemon's
/// split, `Plan::take_new_regions`). Once the new programs are attached it
/// is false again.
#[test]
fn an_earlier_start_that_grew_the_pool_and_never_attached_is_seen() {
    use nilb::dataplane::XdpMode;
    require_root!("BPF, network namespace, bpffs");
    with_private_pins(|pins, net| {
        let ifindex = net.ifindex as i32;
        let cfg = three_tables(4096);
        let dp = load_sized(pins, 65536);
        let cp = ControlPlane::new(cfg.clone(), 0);
        cp.apply(&mut *dp, NODE.into(), &cp.full_plan()).unwrap();
        dp.attach_xdp(ifindex, XdpMode::Native).unwrap();
        assert!(!dp.attached_reads_another_pool(ifindex).unwrap());
        // A start that grows the pool, killed before it attached.
        let grower = load_sized(pins, 131072);
        assert_eq!(grower.pool_grew(), Some((65536, 131072)));
        assert!(grower.attached_reads_another_pool(ifindex).unwrap());
        // The next start grows nothing, and still sees it.
        let next = load_sized(pins, 131072);
        assert!(next.adopted());
        assert_eq!(next.pool_grew(), None);
        assert!(
            next.attached_reads_another_pool(ifindex).unwrap(),
            "the attached balancer reads the replaced pool"
        );
        next.attach_xdp(ifindex, XdpMode::Native).unwrap();
        assert!(!next.attached_reads_another_pool(ifindex).unwrap());
        let after = load_sized(pins, 131072);
        assert!(!after.attached_reads_another_pool(ifindex).unwrap());
        after.detach().unwrap();
    });
}
