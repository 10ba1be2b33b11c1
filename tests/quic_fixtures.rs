//! QUIC-LB packet fixtures through BPF_PROG_TEST_RUN of the real XDP
//! balancer: QUIC packets to services with `quic_lb` (plaintext, four-pass,
//! single-pass), each {description, input frame, expected verdict, expected
//! output frame, expected counter deltas}. The bucket tables hold only
//! 10.0.0.12 (10.0.0.13 is drained): a packet that reaches .13 was routed
//! by the server ID in its connection ID, one that reaches .12 by the table.
//! Connection IDs come from src/quic_lb.rs (the servers' library), frames
//! are written out in `common`. Needs root; skipped without it.

mod common;

use std::net::Ipv4Addr;

use common::*;
use nilb::hash::IPPROTO_UDP;
use nilb::quic_lb::{Config, ConfigSpec, Key};

const B14: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 14);
const KEY: &str = "8f95f09245765f80256934e50c66207f";

/// Three QUIC-LB services on 10.0.0.100 (443 plaintext, 444 four-pass, 445
/// single-pass), backends .12 active (server ID 0a01...), .13 drained
/// (0a02...), .14 offline (0a03...).
fn quic_config(key_file: &str) -> String {
    let mut y = format!(
        "version: 1\ncluster:\n  hash_seed: {HASH_SEED:#x}\n  balancers: [10.0.0.11]\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n"
    );
    for (port, lb, sid_len) in [
        (
            443,
            "{codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: plaintext}".to_string(),
            2,
        ),
        (
            444,
            format!("{{codepoint: 2, server_id_len: 3, nonce_len: 6, algorithm: four-pass, key_file: {key_file}}}"),
            3,
        ),
        (
            445,
            format!("{{codepoint: 3, server_id_len: 4, nonce_len: 12, algorithm: single-pass, key_file: {key_file}}}"),
            4,
        ),
    ] {
        let sid = |n: u8| format!("0a{n:02x}{}", "00".repeat(sid_len - 2));
        y += &format!(
            "  - name: q{port}\n    vip: 10.0.0.100\n    port: {port}\n    protocol: udp\n    table_size: 256\n    quic_lb: {lb}\n    backends:\n      - {{dip: 10.0.0.12, server_id: \"{}\"}}\n      - {{dip: 10.0.0.13, server_id: \"{}\", state: drained}}\n      - {{dip: 10.0.0.14, server_id: \"{}\", state: offline}}\n",
            sid(1),
            sid(2),
            sid(3)
        );
    }
    y += "  - name: dns\n    vip: 10.0.0.100\n    port: 53\n    protocol: udp\n    table_size: 256\n    backends:\n      - {dip: 10.0.0.12}\n";
    y
}

fn lib_config(codepoint: u8, sid_len: usize, nonce_len: usize, keyed: bool) -> Config {
    Config::new(&ConfigSpec {
        codepoint,
        server_id_len: sid_len,
        nonce_len,
        key: keyed.then(|| Key::from_hex(KEY).unwrap()),
        self_encode_length: false,
    })
    .unwrap()
}

/// A short-header (1-RTT) QUIC packet: first byte 0x40 | bits, the DCID,
/// then 24 bytes standing for packet number, payload and tag.
fn short_header(dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![0x41];
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[0x5a; 24]);
    p
}

/// A long-header packet: first byte (form bit, fixed bit, type), version,
/// DCID length and DCID, an 8-byte SCID, then 24 bytes of the rest.
fn long_header(first: u8, version: u32, dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![first];
    p.extend_from_slice(&version.to_be_bytes());
    p.push(dcid.len() as u8);
    p.extend_from_slice(dcid);
    p.push(8);
    p.extend_from_slice(&[0x77; 8]);
    p.extend_from_slice(&[0x5a; 24]);
    p
}

/// A fresh key file holding KEY (absolute path, as the config requires).
fn key_file(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("nilb-quic-{}-{name}.key", std::process::id()));
    std::fs::write(&p, format!("{KEY}\n")).unwrap();
    p
}

#[test]
fn xdp_quic_lb_fixture_table() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    ip(&format!(
        "neigh replace {B14} lladdr 02:00:00:00:00:14 dev nt0 nud permanent"
    ));
    let key_file = key_file("fixtures");
    let l = load(&quic_config(&key_file.display().to_string()), NODE);
    let mac = net.mac;

    let plain = lib_config(1, 2, 6, false);
    let four = lib_config(2, 3, 6, true);
    let single = lib_config(3, 4, 12, true);
    let nonce = |n: usize| {
        (0..n as u8)
            .map(|i| i.wrapping_mul(37) ^ 0x5c)
            .collect::<Vec<u8>>()
    };
    let cid13 = plain.encode(&[0x0a, 0x02], &nonce(6)).unwrap();
    let cid12 = plain.encode(&[0x0a, 0x01], &nonce(6)).unwrap();
    let cid14 = plain.encode(&[0x0a, 0x03], &nonce(6)).unwrap();
    let cid_unknown = plain.encode(&[0x0a, 0x09], &nonce(6)).unwrap();
    let four13 = four.encode(&[0x0a, 0x02, 0x00], &nonce(6)).unwrap();
    let single13 = single.encode(&[0x0a, 0x02, 0, 0], &nonce(12)).unwrap();
    let mut other_cp = cid13.as_bytes().to_vec();
    other_cp[0] = (other_cp[0] & 0x1f) | (4 << 5);
    let mut reserved_cp = cid13.as_bytes().to_vec();
    reserved_cp[0] |= 0xe0;

    // A UDP packet from client port `cport` to VIP:port with payload p.
    let pkt = |cport: u16, port: u16, p: &[u8]| l3(CLIENT, VIP, IPPROTO_UDP, &udp(cport, port, p));
    // Where the balancer must send it: to `to` (.12: the table's only
    // backend; .13: routed by server ID), no hop listed either way.
    let sent = |to: Ipv4Addr, cport: u16, port: u16, inner: &[u8]| {
        let dmac = if to == B13 { MAC13 } else { MAC12 };
        Some(encapsulated(
            dmac,
            mac,
            to,
            &[],
            sport_of(CLIENT, VIP, cport, port, IPPROTO_UDP),
            inner,
        ))
    };
    struct Case {
        description: &'static str,
        cport: u16,
        port: u16,
        payload: Vec<u8>,
        to: Ipv4Addr,
        counters: &'static [(&'static str, u64)],
    }
    const ROUTED: &[(&str, u64)] = &[("xdp_encap_tx", 1), ("xdp_quic_routed", 1)];
    let cases = vec![
        Case {
            description: "short header, plaintext server ID of drained .13: routed to .13",
            cport: 40000,
            port: 443,
            payload: short_header(cid13.as_bytes()),
            to: B13,
            counters: ROUTED,
        },
        Case {
            description: "the same connection ID from another address/port (migration): still .13",
            cport: 51234,
            port: 443,
            payload: short_header(cid13.as_bytes()),
            to: B13,
            counters: ROUTED,
        },
        Case {
            description: "short header, server ID of .12",
            cport: 40001,
            port: 443,
            payload: short_header(cid12.as_bytes()),
            to: B12,
            counters: ROUTED,
        },
        Case {
            description: "short header, server ID of offline .14: bucket table",
            cport: 40002,
            port: 443,
            payload: short_header(cid14.as_bytes()),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unknown", 1)],
        },
        Case {
            description: "short header, server ID nobody has: bucket table",
            cport: 40003,
            port: 443,
            payload: short_header(cid_unknown.as_bytes()),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unknown", 1)],
        },
        Case {
            description: "short header, another codepoint: bucket table",
            cport: 40004,
            port: 443,
            payload: short_header(&other_cp),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unknown", 1)],
        },
        Case {
            description: "short header, reserved codepoint 0b111 (unroutable): bucket table",
            cport: 40005,
            port: 443,
            payload: short_header(&reserved_cp),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unknown", 1)],
        },
        Case {
            description: "v1 Initial whose DCID looks like .13's: bucket table (client-chosen)",
            cport: 40006,
            port: 443,
            payload: long_header(0xc0, 1, cid13.as_bytes()),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_initial", 1)],
        },
        Case {
            description: "v1 0-RTT: bucket table",
            cport: 40007,
            port: 443,
            payload: long_header(0xd0, 1, cid13.as_bytes()),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_initial", 1)],
        },
        Case {
            description: "v1 Handshake to .13's ID: routed",
            cport: 40008,
            port: 443,
            payload: long_header(0xe0, 1, cid13.as_bytes()),
            to: B13,
            counters: ROUTED,
        },
        Case {
            description: "v2 Handshake (type 3) to .13's ID: routed",
            cport: 40009,
            port: 443,
            payload: long_header(0xf0, 0x6b33_43cf, cid13.as_bytes()),
            to: B13,
            counters: ROUTED,
        },
        Case {
            description: "v2 Initial (type 1): bucket table",
            cport: 40010,
            port: 443,
            payload: long_header(0xd0, 0x6b33_43cf, cid13.as_bytes()),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_initial", 1)],
        },
        Case {
            description: "unknown version: bucket table",
            cport: 40011,
            port: 443,
            payload: long_header(0xe0, 0x1a2a_3a4a, cid13.as_bytes()),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_initial", 1)],
        },
        Case {
            description: "Handshake with an empty DCID: not ours, bucket table",
            cport: 40012,
            port: 443,
            payload: long_header(0xe0, 1, &[]),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unknown", 1)],
        },
        Case {
            description: "Handshake with a 21-byte DCID: unparseable, bucket table",
            cport: 40013,
            port: 443,
            payload: long_header(0xe0, 1, &[0x20; 21]),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unparseable", 1)],
        },
        Case {
            description: "3-byte UDP payload: unparseable, bucket table",
            cport: 40014,
            port: 443,
            payload: vec![0x41, 0x2a, 0x0a],
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unparseable", 1)],
        },
        Case {
            description: "short header cut inside the DCID: unparseable",
            cport: 40015,
            port: 443,
            payload: cid13.as_bytes()[..7].to_vec(),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unparseable", 1)],
        },
        Case {
            description: "Handshake whose DCID runs past the packet: unparseable",
            cport: 40016,
            port: 443,
            payload: long_header(0xe0, 1, cid13.as_bytes())[..10].to_vec(),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unparseable", 1)],
        },
        Case {
            description: "four-pass: server ID of .13 decrypted in XDP: routed",
            cport: 40017,
            port: 444,
            payload: short_header(four13.as_bytes()),
            to: B13,
            counters: ROUTED,
        },
        Case {
            description: "single-pass: server ID of .13 decrypted in XDP: routed",
            cport: 40018,
            port: 445,
            payload: short_header(single13.as_bytes()),
            to: B13,
            counters: ROUTED,
        },
        Case {
            description: "four-pass ID under the plaintext service: decodes to no known ID",
            cport: 40019,
            port: 443,
            payload: short_header(four13.as_bytes()),
            to: B12,
            counters: &[("xdp_encap_tx", 1), ("xdp_quic_unknown", 1)],
        },
        Case {
            description: "UDP service without quic_lb: nothing QUIC counted",
            cport: 40020,
            port: 53,
            payload: short_header(cid13.as_bytes()),
            to: B12,
            counters: &[("xdp_encap_tx", 1)],
        },
    ];
    for c in &cases {
        let inner = pkt(c.cport, c.port, &c.payload);
        let input = client_frame(mac, &inner);
        let ((verdict, out), deltas) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
        assert_eq!(verdict, XDP_TX, "{}: verdict", c.description);
        let want = sent(c.to, c.cport, c.port, &inner).unwrap();
        assert_bytes(c.description, &out, &want);
        assert_eq!(deltas, c.counters.to_vec(), "{}: counters", c.description);
    }

    // Routed packets count for the backend they reach.
    let key = l.cp.config().services[0].key();
    let slot13 = l.cp.service(&key).unwrap().backends[&B13.into()].slot;
    let bs = l.dp.backend_stats(slot13).unwrap();
    assert_eq!(bs.packets, 4, "four packets of service 443 routed to .13");
    let _ = std::fs::remove_file(&key_file);
}

#[test]
fn quic_routes_follow_reloads_and_health() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let key_file = key_file("reloads");
    let yaml = quic_config(&key_file.display().to_string());
    let mut l = load(&yaml, NODE);
    let plain = lib_config(1, 2, 6, false);
    let four = lib_config(2, 3, 6, true);
    let cid13 = plain.encode(&[0x0a, 0x02], &[1, 2, 3, 4, 5, 6]).unwrap();
    let four13 = four.encode(&[0x0a, 0x02, 0], &[1, 2, 3, 4, 5, 6]).unwrap();
    let first_hop = |l: &Loaded, port: u16, cid: &[u8]| {
        let inner = l3(
            CLIENT,
            VIP,
            IPPROTO_UDP,
            &udp(40000, port, &short_header(cid)),
        );
        let (v, out) =
            l.dp.run_xdp(&client_frame(net.mac, &inner), net.ifindex)
                .unwrap();
        assert_eq!(v, XDP_TX);
        Ipv4Addr::new(out[30], out[31], out[32], out[33])
    };
    assert_eq!(first_hop(&l, 443, cid13.as_bytes()), B13);
    assert_eq!(first_hop(&l, 444, four13.as_bytes()), B13);

    // .13 offline: its server ID no longer routes.
    l.reload(
        &yaml.replace(
            "server_id: \"0a02\", state: drained",
            "server_id: \"0a02\", state: offline",
        ),
        NODE,
    );
    assert_eq!(first_hop(&l, 443, cid13.as_bytes()), B12);
    // Back to drained, and the server ID moved to another number: the old
    // one routes nowhere, the new one to .13.
    l.reload(
        &yaml.replace(
            "server_id: \"0a02\", state: drained",
            "server_id: \"0a07\", state: drained",
        ),
        NODE,
    );
    assert_eq!(first_hop(&l, 443, cid13.as_bytes()), B12);
    let cid13b = plain.encode(&[0x0a, 0x07], &[1, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(first_hop(&l, 443, cid13b.as_bytes()), B13);
    // A new key (rotation): IDs under the old key decode to garbage.
    std::fs::write(&key_file, "fdf726a9893ec05c0632d3956680baf0\n").unwrap();
    l.reload(&yaml, NODE);
    assert_eq!(first_hop(&l, 444, four13.as_bytes()), B12);
    let four_new = Config::new(&ConfigSpec {
        codepoint: 2,
        server_id_len: 3,
        nonce_len: 6,
        key: Some(Key::from_hex("fdf726a9893ec05c0632d3956680baf0").unwrap()),
        self_encode_length: false,
    })
    .unwrap();
    let four13n = four_new
        .encode(&[0x0a, 0x02, 0], &[1, 2, 3, 4, 5, 6])
        .unwrap();
    assert_eq!(first_hop(&l, 444, four13n.as_bytes()), B13);
    // quic_lb removed from the service: the table decides.
    let no_quic = yaml.replace(
        "    quic_lb: {codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: plaintext}\n",
        "",
    );
    let no_quic = no_quic
        .replace(", server_id: \"0a01\"", "")
        .replace(", server_id: \"0a02\"", "")
        .replace(", server_id: \"0a03\"", "");
    l.reload(&no_quic, NODE);
    let (_, deltas) = l.counted(|| first_hop(&l, 443, cid13.as_bytes()));
    assert_eq!(deltas, vec![("xdp_encap_tx", 1)]);
    let _ = std::fs::remove_file(&key_file);
}

/// What the documented rules (docs/config.md "QUIC-LB", docs/design.md
/// "QUIC-LB") make of UDP payload `p` sent to service 443 of
/// [`quic_config`] (plaintext, codepoint 1, 2 + 6 bytes, not self-encoded):
/// (first hop, the QUIC counter). Written from the rules, not from the C.
fn quic_model(plain: &Config, p: &[u8]) -> (Ipv4Addr, &'static str) {
    const UNPARSEABLE: (Ipv4Addr, &str) = (B12, "xdp_quic_unparseable");
    const UNKNOWN: (Ipv4Addr, &str) = (B12, "xdp_quic_unknown");
    if p.len() < 6 {
        return UNPARSEABLE;
    }
    let cid = if p[0] & 0x80 == 0 {
        let len = plain.cid_len();
        if p.len() < 1 + len {
            return UNPARSEABLE;
        }
        &p[1..1 + len]
    } else {
        let version = u32::from_be_bytes([p[1], p[2], p[3], p[4]]);
        let ty = (p[0] >> 4) & 3;
        let initial = match version {
            1 => ty <= 1,
            0x6b33_43cf => ty == 1 || ty == 2,
            _ => true,
        };
        if initial {
            return (B12, "xdp_quic_initial");
        }
        let len = p[5] as usize;
        if len > 20 || p.len() < 6 + len {
            return UNPARSEABLE;
        }
        &p[6..6 + len]
    };
    match plain.decode(cid).map(|s| s.as_bytes().to_vec()) {
        Ok(s) if s == [0x0a, 0x01] => (B12, "xdp_quic_routed"),
        Ok(s) if s == [0x0a, 0x02] => (B13, "xdp_quic_routed"),
        _ => UNKNOWN,
    }
}

/// The QUIC parser under hostile input: random payloads, valid short and
/// long headers with 1-3 random bytes changed and cut at random lengths, and
/// sweeps (every first byte, every DCID length byte, every truncation of a
/// Handshake packet), each through the real XDP program and compared with
/// [`quic_model`]: verdict, first hop, counters.
#[test]
fn xdp_quic_parser_fuzz() {
    use rand::{Rng, SeedableRng};
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    ip(&format!(
        "neigh replace {B14} lladdr 02:00:00:00:00:14 dev nt0 nud permanent"
    ));
    let key_file = key_file("fuzz");
    let l = load(&quic_config(&key_file.display().to_string()), NODE);
    let plain = lib_config(1, 2, 6, false);
    let seed: u64 = std::env::var("NILB_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9_1c1b);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let valid = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
        let sid = [0x0a, rng.gen_range(0..4u8)];
        let nonce: [u8; 6] = rng.gen();
        let cid = plain
            .encode_with_random_bits(&sid, &nonce, rng.gen())
            .unwrap();
        match rng.gen_range(0..4) {
            0 | 1 => short_header(cid.as_bytes()),
            2 => long_header(0xe0 | rng.gen_range(0..16u8), 1, cid.as_bytes()),
            _ => long_header(0xc0 | rng.gen_range(0..64u8), rng.gen(), cid.as_bytes()),
        }
    };
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    for _ in 0..600 {
        let n = rng.gen_range(0..64);
        payloads.push((0..n).map(|_| rng.gen()).collect());
    }
    for _ in 0..1200 {
        let mut p = valid(&mut rng);
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(0..p.len());
            p[i] = rng.gen();
        }
        if rng.gen_bool(0.3) {
            p.truncate(rng.gen_range(0..p.len()));
        }
        payloads.push(p);
    }
    let cid13 = plain.encode(&[0x0a, 0x02], &[9; 6]).unwrap();
    for b in 0..=255u8 {
        let mut p = short_header(cid13.as_bytes());
        p[0] = b;
        payloads.push(p.clone());
        let mut h = long_header(0xe0, 1, cid13.as_bytes());
        h[5] = b;
        payloads.push(h);
    }
    let h = long_header(0xe0, 1, cid13.as_bytes());
    for n in 0..h.len() {
        payloads.push(h[..n].to_vec());
    }
    let mut tally = std::collections::BTreeMap::new();
    for (i, p) in payloads.iter().enumerate() {
        let cport = 20000 + (i % 40000) as u16;
        let inner = l3(CLIENT, VIP, IPPROTO_UDP, &udp(cport, 443, p));
        let input = client_frame(net.mac, &inner);
        let ((verdict, out), deltas) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
        let (hop, counter) = quic_model(&plain, p);
        let what = format!("seed {seed:#x}, payload {i} {}", hex(p));
        assert_eq!(verdict, XDP_TX, "{what}: verdict");
        let want = encapsulated(
            if hop == B13 { MAC13 } else { MAC12 },
            net.mac,
            hop,
            &[],
            sport_of(CLIENT, VIP, cport, 443, IPPROTO_UDP),
            &inner,
        );
        assert_bytes(&what, &out, &want);
        assert_eq!(
            deltas,
            vec![("xdp_encap_tx", 1), (counter, 1)],
            "{what}: counters"
        );
        *tally.entry(counter).or_insert(0) += 1;
    }
    eprintln!("{} QUIC payloads: {tally:?}", payloads.len());
    for c in [
        "xdp_quic_routed",
        "xdp_quic_initial",
        "xdp_quic_unknown",
        "xdp_quic_unparseable",
    ] {
        assert!(
            tally.get(c).copied().unwrap_or(0) > 20,
            "{c} covered: {tally:?}"
        );
    }
    let _ = std::fs::remove_file(&key_file);
}
