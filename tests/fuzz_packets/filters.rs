//! Edge filters under fuzzing (docs/design.md "Edge filters"): a data plane
//! with filters loaded (`f`) and the worker's one without (`a`) run the
//! same frames, and the same frames again with their IPv4 source replaced
//! by addresses the rules care about. The reference is `FilterSet::decide`
//! (longest prefix, allow and deny, dry run) and the stage rules of the
//! documentation, applied here to the frame's bytes:
//!
//! - a source a rule denies is dropped: XDP_DROP, `xdp_drop_filter` once,
//!   the rule's counters by one packet and the IP total length; it never
//!   reaches a backend;
//! - every other frame comes out of `f` exactly as out of `a` (verdict,
//!   bytes, counters), dry-run rules and cluster exemptions counted aside;
//! - at the end every rule's counters equal what the reference expected;
//! - IPv6 frames (one in five of the random ones, and the IPv6 seeds), also
//!   from IPv4-mapped addresses of denied sources: filters are IPv4 only
//!   (docs/config.md "Edge filters"), so they come out as without filters.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use nilb::filters::{FilterSet, Lists, Verdict};

use super::cluster::Fam;
use super::*;

/// The filters added to the fuzz configuration: global deny rules (one
/// marked to cover cluster addresses, one dry run), an allow list with a
/// deny inside it on dns, a deny and a dry-run deny on web.
fn with_filters(base: &str) -> String {
    let global = "filters:
  deny:
    - {name: wide, prefixes: [198.18.0.0/15]}
    - {name: feed, prefixes: [192.0.2.64/26, 203.0.113.0/24, 198.51.100.7, 198.51.100.128/28, 10.0.0.64/27]}
    - {name: trial, prefixes: [198.19.7.0/24, 192.0.2.0/30], dry_run: true}
    - {name: nodes, prefixes: [10.0.0.0/28], covers_cluster: true}
";
    base.replace(
        "  - name: dns\n",
        "  - name: dns\n    filters:\n      allow: {name: dnsallow, prefixes: [192.0.2.0/24, 10.0.0.0/8]}\n      deny: [{name: sdeny, prefixes: [192.0.2.128/25]}]\n",
    )
    .replace(
        "  - name: web\n",
        "  - name: web\n    filters:\n      deny:\n        - {name: webdeny, prefixes: [192.0.2.200/29]}\n        - {name: webtry, prefixes: [192.0.2.1], dry_run: true}\n",
    ) + global
}

/// Sources worth trying: in every rule, at edges, cluster addresses.
const SOURCES: [[u8; 4]; 16] = [
    [192, 0, 2, 1],
    [192, 0, 2, 70],
    [203, 0, 113, 9],
    [198, 51, 100, 7],
    [198, 51, 100, 130],
    [198, 51, 100, 8],
    [198, 18, 3, 4],
    [198, 19, 7, 7],
    [10, 0, 0, 5],
    [10, 0, 0, 12],
    [10, 0, 0, 70],
    [192, 0, 2, 130],
    [192, 0, 2, 201],
    [8, 8, 8, 8],
    [198, 51, 100, 143],
    [192, 0, 2, 63],
];

/// The filtered data plane: the fuzz configuration with filters, reloaded
/// like the worker's (second hops, longer chains), then the filters
/// compiled and applied.
fn filtered() -> (Loaded, Arc<FilterSet>) {
    let mut f = load(&with_filters(&fuzz_config("drop", false, Fam::V4)), NODE);
    f.reload(&with_filters(&fuzz_config("drop", true, Fam::V4)), NODE);
    lengthen_chains(&mut f, Fam::V4);
    let set = Arc::new(
        FilterSet::compile(f.cp.config(), &Lists::new(), &BTreeMap::new()).expect("compile"),
    );
    f.cp.set_filters(set.clone());
    let plan = nilb::control::Plan {
        filters: true,
        ..Default::default()
    };
    f.cp.apply(&mut f.dp, NODE.into(), &plan)
        .expect("installing the filters");
    (f, set)
}

/// What the rules expect of a frame.
struct Want {
    /// The rule that drops it.
    drop: Option<u16>,
    /// Dry-run rules that count it.
    dry: Vec<u16>,
    /// Cluster exemptions counted.
    exempt: u64,
    /// IP total length (the bytes a rule counts).
    len: u64,
}

fn expected(
    set: &FilterSet,
    cluster: &std::collections::BTreeSet<Ipv4Addr>,
    frame: &[u8],
) -> Option<Want> {
    // Global stage: every frame with the IPv4 ethertype and 20 bytes of
    // header, consistent or not; the bytes counted are its total length.
    if frame.len() < 34 || be16(frame, 12) != 0x0800 {
        return None;
    }
    let ip = &frame[14..];
    let ihl = (ip[0] & 15) as usize * 4;
    let tot = be16(ip, 2) as usize;
    let src = addr(ip, 12);
    let mut w = Want {
        drop: None,
        dry: Vec::new(),
        exempt: 0,
        len: tot as u64,
    };
    let act = |v: Verdict, w: &mut Want, in_cluster: bool| {
        if let Some(d) = v.dry {
            if v.dry_covers_cluster && in_cluster {
                w.exempt += 1;
            } else {
                w.dry.push(d);
            }
        }
        match v.drop {
            Some(_) if v.drop_covers_cluster && in_cluster => {
                w.exempt += 1;
                false
            }
            Some(d) => {
                w.drop = Some(d);
                true
            }
            None => false,
        }
    };
    if act(
        set.decide(None, src).verdict,
        &mut w,
        cluster.contains(&src),
    ) {
        return Some(w);
    }
    // The service stage only sees consistent IPv4.
    if ip[0] >> 4 != 4 || ihl < 20 || tot < ihl || 14 + tot > frame.len() {
        return Some(w);
    }
    // Service stage: unfragmented TCP or UDP with a whole header, to a
    // service.
    let frag = be16(ip, 6) & 0x3fff != 0;
    let proto = ip[9];
    let hdr = match proto {
        IPPROTO_TCP => 20,
        IPPROTO_UDP => 8,
        _ => return Some(w),
    };
    if frag || ihl + hdr > tot || 14 + ihl + hdr > frame.len() {
        return Some(w);
    }
    // A TCP data offset under 5 words or past the segment, a UDP length
    // under 8 or past the IP payload, is malformed (dropped before the
    // service lookup).
    let l4_len = tot - ihl;
    if proto == IPPROTO_TCP && (ip[ihl + 12] >> 4 < 5 || (ip[ihl + 12] >> 4) as usize * 4 > l4_len)
    {
        return Some(w);
    }
    if proto == IPPROTO_UDP && !(8..=l4_len).contains(&(be16(ip, ihl + 4) as usize)) {
        return Some(w);
    }
    let key = nilb::types::ServiceKey {
        vip: std::net::IpAddr::V4(addr(ip, 16)),
        port: be16(ip, ihl + 2),
        protocol: if proto == IPPROTO_TCP {
            nilb::types::Protocol::Tcp
        } else {
            nilb::types::Protocol::Udp
        },
    };
    if set.services.contains_key(&key) {
        act(set.decide(Some(&key), src).verdict, &mut w, false);
    }
    Some(w)
}

/// Outcome of a filter fuzz run.
#[derive(Default)]
pub struct FilterTally {
    pub frames: u64,
    pub dropped: u64,
    pub dry: u64,
    pub exempt: u64,
    pub unaffected: u64,
    pub violations: Vec<String>,
    pub violation_count: u64,
}

impl FilterTally {
    fn violation(&mut self, s: String) {
        self.violation_count += 1;
        if self.violations.len() < 10 {
            self.violations.push(s);
        }
    }
}

/// Run `packets` generated frames (plus variants with chosen sources)
/// through both planes.
pub fn fuzz_filters(seed: u64, packets: u64) -> FilterTally {
    let env = setup();
    let (f, set) = filtered();
    let cluster = nilb::config::ipv4_only(&f.cp.cluster_addresses());
    let mut t = FilterTally::default();
    let mut rule_want: BTreeMap<u16, (u64, u64)> = BTreeMap::new();
    let mac = env.wa.nt0_mac;
    let seeds = xdp_seeds(mac);
    let sweeps = xdp_sweeps(&seeds);
    let seeds6 = xdp_seeds6(mac);
    let mut g = Gen::new(seed ^ 0xf117_e125);
    let mut frames: Vec<Vec<u8>> = seeds
        .iter()
        .chain(&sweeps)
        .chain(&seeds6)
        .map(|(_, f)| f.clone())
        .collect();
    while (frames.len() as u64) < packets {
        let f = if g.below(5) == 0 {
            g.xdp_frame6(&seeds6).1
        } else {
            g.xdp_frame(&seeds).1
        };
        frames.push(f);
    }
    for (i, frame) in frames.iter().enumerate() {
        let mut variants = vec![frame.clone()];
        if frame.len() >= 34 && be16(frame, 12) == 0x0800 {
            let mut v = frame.clone();
            v[26..30].copy_from_slice(&SOURCES[g.below(SOURCES.len())]);
            fix_ip_csum(&mut v, 14);
            variants.push(v);
        }
        if frame.len() >= 54 && be16(frame, 12) == 0x86dd {
            let s = SOURCES[g.below(SOURCES.len())];
            let mut v = frame.clone();
            v[14 + 8..14 + 24].copy_from_slice(&Ipv4Addr::from(s).to_ipv6_mapped().octets());
            variants.push(v);
        }
        for frame in &variants {
            t.frames += 1;
            let (ra, da) = env.a.counted(|| env.a.dp.run_xdp(frame, env.ifindex));
            let (rf, df) = f.counted(|| f.dp.run_xdp(frame, env.ifindex));
            let (Ok((va, oa)), Ok((vf, of))) = (ra, rf) else {
                t.violation(format!(
                    "frame {i}: a test run failed\n{}",
                    short_hex(frame)
                ));
                continue;
            };
            let want = expected(&set, &cluster, frame);
            // The counters the filters add: dry run and exemptions.
            let mut extra: Vec<(&'static str, u64)> = Vec::new();
            if let Some(w) = &want {
                if !w.dry.is_empty() {
                    extra.push(("xdp_filter_dry_run", w.dry.len() as u64));
                }
                if w.exempt > 0 {
                    extra.push(("xdp_filter_exempt", w.exempt));
                }
                for d in &w.dry {
                    let e = rule_want.entry(*d).or_default();
                    e.0 += 1;
                    e.1 += w.len;
                }
            }
            let merged = |base: &[(&'static str, u64)], extra: &[(&'static str, u64)]| {
                let mut m: BTreeMap<&'static str, u64> = base.iter().copied().collect();
                for (n, v) in extra {
                    *m.entry(n).or_default() += v;
                }
                m
            };
            match want.as_ref().and_then(|w| w.drop.map(|d| (d, w.len))) {
                Some((rule, len)) => {
                    t.dropped += 1;
                    let e = rule_want.entry(rule).or_default();
                    e.0 += 1;
                    e.1 += len;
                    let mut expect = extra.clone();
                    expect.push(("xdp_drop_filter", 1));
                    if vf != XDP_DROP || merged(&df, &[]) != merged(&expect, &[]) {
                        t.violation(format!(
                            "frame {i}: source {} denied by rule {rule}: got verdict {vf}, counters {df:?}, expected XDP_DROP and {expect:?}\n{}",
                            addr(frame, 26),
                            short_hex(frame)
                        ));
                    }
                }
                None => {
                    t.unaffected += 1;
                    if (vf, &of) != (va, &oa) || merged(&df, &[]) != merged(&da, &extra) {
                        t.violation(format!(
                            "frame {i}: source {} not denied: filtered plane gave verdict {vf} counters {df:?}, unfiltered verdict {va} counters {da:?} (+{extra:?}), outputs {}\n{}",
                            addr(frame, 26),
                            if of == oa { "equal" } else { "differ" },
                            short_hex(frame)
                        ));
                    }
                }
            }
            if let Some(w) = &want {
                t.dry += w.dry.len() as u64;
                t.exempt += w.exempt;
            }
        }
    }
    for r in &set.rules {
        let got = f.dp.filter_stats(r.id).expect("filter stats");
        let want = rule_want.get(&r.id).copied().unwrap_or_default();
        if (got.packets, got.bytes) != want {
            t.violation(format!(
                "rule {} `{}`: counters (packets, bytes) {:?}, expected {want:?}",
                r.id,
                r.ident.name,
                (got.packets, got.bytes)
            ));
        }
    }
    t
}
