//! The data plane on a kernel without an optional feature, on a kernel that
//! has it: `NILB_FEATURES_OFF` turns the feature off as if the kernel
//! lacked it (src/dataplane/probe.rs; docs/design.md "Kernel features").
//! Its own test binary: the probe runs once per process. Needs root.

mod common;

use std::mem::MaybeUninit;
use std::net::Ipv4Addr;

use common::*;
use nilb::config::Config;
use nilb::control::ControlPlane;
use nilb::dataplane::Dataplane;
use nilb::features::QUIC_LB_CRYPTO;
use nilb::hash::IPPROTO_UDP;
use nilb::quic_lb::{Config as QuicConfig, ConfigSpec, Key};

const KEY: &str = "8f95f09245765f80256934e50c66207f";

/// QUIC-LB on 10.0.0.100: 443 plaintext, 444 four-pass; backends .12
/// active (server ID 0a01..), .13 drained (0a02..).
fn config(key_file: &str) -> String {
    let mut y = format!(
        "version: 1\ncluster:\n  hash_seed: {HASH_SEED:#x}\n  balancers: [10.0.0.11]\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n"
    );
    for (port, lb, sid_len) in [
        (443, "{codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: plaintext}".to_string(), 2),
        (
            444,
            format!("{{codepoint: 2, server_id_len: 3, nonce_len: 6, algorithm: four-pass, key_file: {key_file}}}"),
            3,
        ),
    ] {
        let sid = |n: u8| format!("0a{n:02x}{}", "00".repeat(sid_len - 2));
        y += &format!(
            "  - name: q{port}\n    vip: 10.0.0.100\n    port: {port}\n    protocol: udp\n    table_size: 256\n    quic_lb: {lb}\n    backends:\n      - {{dip: 10.0.0.12, server_id: \"{}\"}}\n      - {{dip: 10.0.0.13, server_id: \"{}\", state: drained}}\n",
            sid(1),
            sid(2),
        );
    }
    y
}

/// A short-header QUIC packet with this DCID.
fn short_header(dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![0x41];
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[0x5a; 24]);
    p
}

/// The QUIC-LB library's config of a service of [`config`] (nonce 6 bytes).
fn quic(codepoint: u8, server_id_len: usize, keyed: bool) -> QuicConfig {
    QuicConfig::new(&ConfigSpec {
        codepoint,
        server_id_len,
        nonce_len: 6,
        key: keyed.then(|| Key::from_hex(KEY).unwrap()),
        self_encode_length: false,
    })
    .unwrap()
}

/// The outer destination of an encapsulated frame.
fn outer_dst(f: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(f[30], f[31], f[32], f[33])
}

/// Without the crypto kfuncs: the object loads without the key program, a
/// config with a plaintext and a four-pass QUIC-LB service applies (the
/// plaintext one used to fail the whole apply: the key program was run to
/// clear a key that cannot exist), the four-pass one is refused and follows
/// its bucket table, the plaintext one routes by server ID.
#[test]
fn without_crypto_kfuncs_plaintext_quic_lb_routes_and_keyed_is_refused() {
    require_root!("BPF, network namespace");
    std::env::set_var("NILB_FEATURES_OFF", QUIC_LB_CRYPTO);
    let net = TestNet::new();
    let key_file = std::env::temp_dir().join(format!("nilb-degraded-{}.key", std::process::id()));
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut dp = Dataplane::load(storage).expect("loading BPF (root needed)");
    dp.set_handoff_mark(MARK).unwrap();
    assert!(!dp.kernel_features().has(QUIC_LB_CRYPTO));
    assert!(!dp.kernel_features().quic_lb_keyed());
    let (loaded, skipped) = dp.programs();
    assert_eq!(skipped, ["nilb_quic_set_key"], "loaded: {loaded:?}");

    let mut cp = ControlPlane::new(
        Config::parse(&config(&key_file.display().to_string())).unwrap(),
        0,
    );
    cp.set_kernel_features(dp.kernel_features());
    cp.apply(&mut dp, NODE.into(), &cp.full_plan())
        .expect("the config applies");
    let refused = cp.refused();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        (refused[0].service.as_str(), refused[0].what.as_str()),
        ("q444", "quic_lb four-pass")
    );

    let nonce: Vec<u8> = (0..6u8).map(|i| i.wrapping_mul(37) ^ 0x5c).collect();
    let plain = quic(1, 2, false);
    let four = quic(2, 3, true);
    // Where the balancer sends a short-header packet with DCID `cid` from
    // client port `cport` to VIP:`port`: its verdict and outer destination.
    let route = |cport: u16, port: u16, cid: &[u8]| {
        let f = client_frame(
            net.mac,
            &l3(
                CLIENT,
                VIP,
                IPPROTO_UDP,
                &udp(cport, port, &short_header(cid)),
            ),
        );
        let (v, out) = dp.run_xdp(&f, net.ifindex).unwrap();
        (v, outer_dst(&out))
    };
    // Server ID of the drained .13: the plaintext service routes by it.
    let cid = plain.encode(&[0x0a, 0x02], &nonce).unwrap();
    assert_eq!(
        route(40100, 443, cid.as_bytes()),
        (XDP_TX, B13),
        "plaintext: by server ID"
    );
    // The same for the refused four-pass service: its bucket table (.12,
    // the only active backend) decides.
    let cid = four.encode(&[0x0a, 0x02, 0x00], &nonce).unwrap();
    assert_eq!(
        route(40101, 444, cid.as_bytes()),
        (XDP_TX, B12),
        "four-pass refused: the table"
    );
}
