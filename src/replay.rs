//! `nilb replay`: "what would nilb do with this packet?" Each frame of a pcap
//! goes through the real BPF program with BPF_PROG_TEST_RUN, with maps filled
//! from a config file exactly as the daemon fills them; the verdict, the
//! counters it moved and the resulting frame are reported, and resulting
//! frames that are not dropped are written to an output pcap.
//!
//! The packet fixture tests drive the same [`Dataplane::run_xdp`] /
//! [`Dataplane::run_tc`] calls.

use std::fs::File;
use std::io::Write;
use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::path::Path;

use anyhow::{bail, Context, Result};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;

use crate::config::Config;
use crate::control::ControlPlane;
use crate::dataplane::abi::COUNTER_NAMES;
use crate::dataplane::Dataplane;
use crate::packet::describe_frame;

/// Which program to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayProgram {
    /// The XDP balancer (what a balancer node does with client traffic).
    Xdp,
    /// The TC second-chance program (what a node does with GUE it receives).
    Tc,
}

/// Name of an XDP or TC verdict.
pub fn verdict_name(program: ReplayProgram, v: u32) -> String {
    let name = match (program, v) {
        (ReplayProgram::Xdp, 0) => "XDP_ABORTED",
        (ReplayProgram::Xdp, 1) => "XDP_DROP",
        (ReplayProgram::Xdp, 2) => "XDP_PASS",
        (ReplayProgram::Xdp, 3) => "XDP_TX",
        (ReplayProgram::Xdp, 4) => "XDP_REDIRECT",
        (ReplayProgram::Tc, 0) => "TC_ACT_OK",
        (ReplayProgram::Tc, 2) => "TC_ACT_SHOT",
        (ReplayProgram::Tc, 7) => "TC_ACT_REDIRECT",
        _ => return format!("verdict {v}"),
    };
    name.to_string()
}

/// One replayed packet.
#[derive(Clone, Debug)]
pub struct Replayed {
    /// 1-based packet number in the input.
    pub number: usize,
    /// Program verdict.
    pub verdict: u32,
    /// The frame after the program ran (without XDP metadata).
    pub output: Vec<u8>,
    /// XDP metadata the program left in front of the frame (nilb leaves
    /// none: it marks what it hands to TC with [`REPLAY_HANDOFF_MARK`] as
    /// the source MAC); empty for TC.
    pub meta: Vec<u8>,
    /// Counters this packet moved, by name.
    pub counters: Vec<(&'static str, u64)>,
}

/// The hand-off mark of replays (`struct nilb_handoff`: the source MAC of
/// frames the balancer hands to TC on its own node): fixed, so that the
/// same input gives the same output ("nilb" after 02).
pub const REPLAY_HANDOFF_MARK: [u8; 6] = [0x02, 0x6e, 0x69, 0x6c, 0x62, 0x00];

/// The report's note on what XDP left for this node's TC: a frame with the
/// hand-off mark as its source MAC (`passed`: an XDP_PASS), and any XDP metadata by its
/// length (nilb's programs leave none).
fn describe_handoff(passed: bool, frame: &[u8], meta: &[u8]) -> String {
    let mut note = String::new();
    if passed && frame.get(6..12) == Some(&REPLAY_HANDOFF_MARK[..]) {
        note.push_str(" [hand-off mark: handed to TC on this node]");
    }
    if !meta.is_empty() {
        note.push_str(&format!(" [XDP metadata: {} bytes]", meta.len()));
    }
    note
}

/// Whether a verdict drops the packet.
fn dropped(program: ReplayProgram, v: u32) -> bool {
    match program {
        ReplayProgram::Xdp => v <= 1,
        ReplayProgram::Tc => v == 2,
    }
}

/// Replay `input` (an Ethernet pcap) through `program` of a data plane
/// filled from `config` for the node at `node`, as if received on interface
/// `ifindex` (0: loopback; pass the real interface so FIB and neighbour
/// lookups answer as on the node). Writes a report to `report` and the
/// non-dropped results to `output` if given.
pub fn replay(
    config: Config,
    node: IpAddr,
    program: ReplayProgram,
    input: &Path,
    output: Option<&Path>,
    ifindex: u32,
    report: &mut dyn Write,
) -> Result<Vec<Replayed>> {
    let gue_port = config.cluster.gue_port;
    let mut storage = MaybeUninit::uninit();
    // A pool sized for the config's tables (any number of services).
    let mut dp = Dataplane::load_for(&mut storage, &config)?;
    dp.set_handoff_mark(REPLAY_HANDOFF_MARK)?;
    let mut cp = ControlPlane::new(config, 0);
    cp.set_kernel_features(dp.kernel_features());
    cp.apply(&mut dp, node, &cp.full_plan())?;

    let file = File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let mut reader =
        PcapReader::new(file).with_context(|| format!("reading {}", input.display()))?;
    if reader.header().datalink != DataLink::ETHERNET {
        bail!(
            "{} has link type {:?}; nilb replays Ethernet captures (capture on the interface, not `-i any`)",
            input.display(),
            reader.header().datalink
        );
    }
    let mut writer = match output {
        Some(p) => Some(PcapWriter::new(
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )?),
        None => None,
    };

    let role = match (
        cp.config().cluster.balancers.contains(&node),
        cp.config()
            .services
            .iter()
            .filter(|s| s.backends.iter().any(|b| b.dip == node))
            .count(),
    ) {
        (true, 0) => "a balancer".to_string(),
        (true, n) => format!("a balancer and a backend of {n} service(s)"),
        (false, 0) => "not in the cluster: neither a balancer nor a backend \
             (pass --node-address with the node's address)"
            .to_string(),
        (false, n) => format!("a backend of {n} service(s)"),
    };
    let name = match program {
        ReplayProgram::Xdp => "XDP balancer",
        ReplayProgram::Tc => "TC second-chance",
    };
    writeln!(
        report,
        "replaying {} through the {name} program as node {node}, {role}",
        input.display()
    )?;
    let mut results = Vec::new();
    let mut n = 0;
    while let Some(pkt) = reader.next_packet() {
        let pkt =
            pkt.with_context(|| format!("reading packet {} of {}", n + 1, input.display()))?;
        n += 1;
        let before = dp.counters()?;
        // XDP metadata is not part of the frame: keep it out of the pcap.
        let run = match program {
            ReplayProgram::Xdp => dp
                .run_xdp_split(&pkt.data, ifindex)
                .map(|r| (r.verdict, r.frame, r.meta)),
            ReplayProgram::Tc => dp.run_tc(&pkt.data, ifindex).map(|(v, f)| (v, f, vec![])),
        };
        let (verdict, out, meta) = match run {
            Ok(r) => r,
            Err(e) => {
                // The kernel refuses some frames outright (too short for
                // Ethernet/IPv4, larger than a page): report and go on.
                writeln!(
                    report,
                    "#{n} in  {} bytes: the kernel refused to run it: {e:#}",
                    pkt.data.len()
                )?;
                continue;
            }
        };
        let after = dp.counters()?;
        let counters: Vec<(&'static str, u64)> = COUNTER_NAMES
            .iter()
            .zip(before.iter().zip(&after))
            .filter(|(_, (b, a))| a != b)
            .map(|(name, (b, a))| (*name, a - b))
            .collect();
        writeln!(
            report,
            "#{n} in  {} bytes: {}",
            pkt.data.len(),
            describe_frame(&pkt.data, gue_port)
        )?;
        let counted: Vec<String> = counters.iter().map(|(c, d)| format!("{c}+{d}")).collect();
        if dropped(program, verdict) {
            writeln!(
                report,
                "   -> {} ({})",
                verdict_name(program, verdict),
                counted.join(", ")
            )?;
        } else {
            let passed = program == ReplayProgram::Xdp && verdict == 2;
            let note = describe_handoff(passed, &out, &meta);
            writeln!(
                report,
                "   -> {} ({}){note} out {} bytes: {}",
                verdict_name(program, verdict),
                counted.join(", "),
                out.len(),
                describe_frame(&out, gue_port)
            )?;
            if let Some(w) = writer.as_mut() {
                w.write_packet(&PcapPacket::new(pkt.timestamp, out.len() as u32, &out))?;
            }
        }
        results.push(Replayed {
            number: n,
            verdict,
            output: out,
            meta,
            counters,
        });
    }
    writeln!(report, "{n} packets replayed")?;
    Ok(results)
}
