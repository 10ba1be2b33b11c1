//! The flow hash in C (bpf/hash.h) and Rust (src/hash.rs) agree bit for bit:
//! 10,000 random tuples and seeds run through the C code with
//! BPF_PROG_TEST_RUN, then a sample through the real XDP balancer, whose
//! outer UDP source port and first hop must be what Rust predicts. Needs
//! root; skipped (one line on stderr) without it.

mod common;

use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use nilb::dataplane::abi::{
    self,
    probe_skel::HashProbeSkelBuilder,
    sys::{nilb_hash_probe, nilb_hash_probe6},
};
use nilb::hash::{flow_hash, FlowTuple, IPPROTO_TCP, IPPROTO_UDP};
use rand::{Rng, SeedableRng};

#[test]
fn c_and_rust_hash_agree_on_10000_random_tuples() {
    common::require_root!("BPF");
    let mut storage = MaybeUninit::uninit();
    let skel = HashProbeSkelBuilder::default()
        .open(&mut storage)
        .unwrap()
        .load()
        .expect("loading the hash probe (root needed)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6e696c62);
    let mut mismatches = 0;
    const N: usize = 10_000;
    for i in 0..N {
        let flow = FlowTuple {
            saddr: Ipv4Addr::from(rng.gen::<u32>()).into(),
            daddr: Ipv4Addr::from(rng.gen::<u32>()).into(),
            sport: rng.gen(),
            dport: rng.gen(),
            proto: if rng.gen() { IPPROTO_TCP } else { IPPROTO_UDP },
        };
        let seed = if i % 10 == 0 { 0 } else { rng.gen() };
        let probe = nilb_hash_probe {
            saddr: u32::from_ne_bytes(flow.key_bytes()[0..4].try_into().unwrap()),
            daddr: u32::from_ne_bytes(flow.key_bytes()[4..8].try_into().unwrap()),
            sport: flow.sport.to_be(),
            dport: flow.dport.to_be(),
            proto: flow.proto,
            pad: [0; 3],
            seed,
            out: 0,
        };
        let (verdict, out) =
            abi::test_run_xdp(&skel.progs.nilb_hash_probe, abi::bytes_of(&probe), 0).unwrap();
        assert_eq!(verdict, 2, "probe returns XDP_PASS");
        let got: nilb_hash_probe = abi::read_struct(&out).unwrap();
        if got.out != flow_hash(&flow, seed) {
            mismatches += 1;
            eprintln!(
                "mismatch: {flow:?} seed {seed:#x}: C {:#x} Rust {:#x}",
                got.out,
                flow_hash(&flow, seed)
            );
        }
    }
    println!("hash identity: {N} tuples, {mismatches} mismatches");
    assert_eq!(mismatches, 0);
}

#[test]
fn c_and_rust_ipv6_hash_agree_on_10000_random_tuples() {
    common::require_root!("BPF");
    let mut storage = MaybeUninit::uninit();
    let skel = HashProbeSkelBuilder::default()
        .open(&mut storage)
        .unwrap()
        .load()
        .expect("loading the hash probe (root needed)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6e696c36);
    let words = |a: Ipv6Addr| {
        let o = a.octets();
        std::array::from_fn::<u32, 4, _>(|i| {
            u32::from_ne_bytes(o[4 * i..4 * i + 4].try_into().unwrap())
        })
    };
    let mut mismatches = 0;
    const N: usize = 10_000;
    for i in 0..N {
        let (s6, d6) = (
            Ipv6Addr::from(rng.gen::<u128>()),
            Ipv6Addr::from(rng.gen::<u128>()),
        );
        let flow = FlowTuple {
            saddr: s6.into(),
            daddr: d6.into(),
            sport: rng.gen(),
            dport: rng.gen(),
            proto: if rng.gen() { IPPROTO_TCP } else { IPPROTO_UDP },
        };
        let seed = if i % 10 == 0 { 0 } else { rng.gen() };
        let probe = nilb_hash_probe6 {
            saddr: words(s6),
            daddr: words(d6),
            sport: flow.sport.to_be(),
            dport: flow.dport.to_be(),
            proto: flow.proto,
            pad: [0; 3],
            seed,
            out: 0,
        };
        let (verdict, out) =
            abi::test_run_xdp(&skel.progs.nilb_hash_probe6, abi::bytes_of(&probe), 0).unwrap();
        assert_eq!(verdict, 2, "probe returns XDP_PASS");
        let got: nilb_hash_probe6 = abi::read_struct(&out).unwrap();
        if got.out != flow_hash(&flow, seed) {
            mismatches += 1;
            eprintln!(
                "mismatch: {flow:?} seed {seed:#x}: C {:#x} Rust {:#x}",
                got.out,
                flow_hash(&flow, seed)
            );
        }
    }
    println!("IPv6 hash identity: {N} tuples, {mismatches} mismatches");
    assert_eq!(mismatches, 0);
}

#[test]
fn xdp_balancer_uses_the_same_hash_and_bucket() {
    use common::*;
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 3, "active")], "drop"),
        NODE,
    );
    let seed = l.cp.config().cluster.hash_seed;
    let table =
        l.cp.service(&l.cp.config().services[0].key())
            .unwrap()
            .table
            .clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..500 {
        let client = Ipv4Addr::from(rng.gen::<u32>() | 0x0100_0000);
        let sport: u16 = rng.gen_range(1024..65535);
        let inner = l3(client, VIP, IPPROTO_TCP, &tcp(sport, 80, SYN, b""));
        let frame = client_frame(net.mac, &inner);
        let (v, out) = l.dp.run_xdp(&frame, net.ifindex).unwrap();
        assert_eq!(v, XDP_TX);
        let h = flow_hash(
            &FlowTuple {
                saddr: client.into(),
                daddr: VIP.into(),
                sport,
                dport: 80,
                proto: IPPROTO_TCP,
            },
            seed,
        );
        let std::net::IpAddr::V4(first) = table.first((h & (table.size() - 1)) as usize).unwrap()
        else {
            panic!("an IPv4 cluster's hop");
        };
        assert_eq!(
            &out[14 + 16..14 + 20],
            &first.octets(),
            "first hop of {client}:{sport}"
        );
        assert_eq!(u16::from_be_bytes([out[34], out[35]]), gue_sport(h));
    }
}
