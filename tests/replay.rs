//! `nilb replay` runs a pcap through the real programs: verdicts, counters
//! and the output pcap must match what the fixtures establish. Needs root;
//! skipped (one line on stderr) without it.

mod common;

use std::time::Duration;

use common::*;
use nilb::config::Config;
use nilb::hash::IPPROTO_TCP;
use nilb::replay::{replay, ReplayProgram};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_millis(i as u64),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
}

/// Replay `frames` through the XDP program of `NODE` with `yaml`'s tables,
/// received on `ifindex`: the results, the report, and the frames written
/// to the output pcap.
fn replay_xdp(
    tag: &str,
    yaml: &str,
    frames: &[Vec<u8>],
    ifindex: u32,
) -> (Vec<nilb::replay::Replayed>, String, Vec<Vec<u8>>) {
    let dir = std::env::temp_dir().join(format!("nilb-replay-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("in.pcap"), dir.join("out.pcap"));
    write_pcap(&input, frames);
    let mut report = Vec::new();
    let results = replay(
        Config::parse(yaml).unwrap(),
        NODE.into(),
        ReplayProgram::Xdp,
        &input,
        Some(&output),
        ifindex,
        &mut report,
    )
    .unwrap();
    let report = String::from_utf8(report).unwrap();
    println!("{report}");
    let mut r = PcapReader::new(std::fs::File::open(&output).unwrap()).unwrap();
    let mut written = Vec::new();
    while let Some(p) = r.next_packet() {
        written.push(p.unwrap().data.into_owned());
    }
    std::fs::remove_dir_all(&dir).unwrap();
    (results, report, written)
}

#[test]
fn replay_xdp_reports_and_writes_results() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let syn = |dst, sport| {
        client_frame(
            net.mac,
            &l3(CLIENT, dst, IPPROTO_TCP, &tcp(sport, 80, SYN, b"")),
        )
    };
    let mut frag = syn(VIP, 40002);
    frag[14 + 6] = 0x20; // MF
    fix_ip_csum(&mut frag, 14);
    let frames = vec![
        syn(VIP, 40000),
        syn(std::net::Ipv4Addr::new(10, 0, 0, 50), 40001),
        frag,
    ];
    let yaml = config(&[(B12, 1, "active")], "drop");
    let (results, report, written) = replay_xdp("tx", &yaml, &frames, net.ifindex);

    let verdicts: Vec<u32> = results.iter().map(|r| r.verdict).collect();
    assert_eq!(verdicts, vec![XDP_TX, XDP_PASS, XDP_DROP]);
    assert_eq!(results[0].counters, vec![("xdp_encap_tx", 1)]);
    assert_eq!(results[2].counters, vec![("xdp_drop_fragment", 1)]);
    assert!(
        report.contains("#1 in  54 bytes: 192.0.2.1:40000 > 10.0.0.100:80 TCP [S]"),
        "{report}"
    );
    assert!(
        report.contains("-> XDP_TX (xdp_encap_tx+1) out 90 bytes: GUE 10.0.0.11 > 10.0.0.12"),
        "{report}"
    );
    assert!(
        report.contains("-> XDP_DROP (xdp_drop_fragment+1)"),
        "{report}"
    );

    // The output pcap holds the two packets that were not dropped, as run.
    assert_eq!(
        written,
        vec![results[0].output.clone(), results[1].output.clone()]
    );
    assert_eq!(written[1], frames[1], "pass-through is unchanged");
}

#[test]
fn replay_xdp_local_first_hop_writes_the_marked_frame() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    // Not a SYN and no local socket: TC's to decide (a SYN would pass
    // without GUE, xdp_local_direct).
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, ACK, b""));
    let frame = client_frame(net.mac, &inner);
    // This node is the only backend: its own TC takes the packet.
    let yaml = config(&[(NODE, 1, "active")], "drop");
    let (results, report, written) = replay_xdp("local", &yaml, &[frame], net.ifindex);
    assert!(
        report.contains("as node 10.0.0.11, a balancer and a backend of 1 service(s)"),
        "{report}"
    );
    assert_eq!(results[0].verdict, XDP_PASS);
    assert_eq!(results[0].counters, vec![("xdp_encap_local", 1)]);
    assert!(results[0].meta.is_empty(), "no XDP metadata");
    assert!(
        report.contains(
            "[hand-off mark: handed to TC on this node] out 90 bytes: GUE 10.0.0.11 > 10.0.0.11"
        ),
        "{report}"
    );
    // The pcap frame is the frame TC gets: the replay's fixed mark as its
    // source MAC.
    assert_eq!(written, vec![results[0].output.clone()]);
    assert_eq!(&written[0][..6], &net.mac, "destination MAC first");
    assert_eq!(
        &written[0][6..12],
        &nilb::replay::REPLAY_HANDOFF_MARK,
        "the hand-off mark"
    );
    assert_eq!(&written[0][12..14], &[0x08, 0x00], "IPv4");
}
