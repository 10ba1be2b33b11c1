//! Stale neighbour entries of the data plane's hops are corrected
//! (`nilb::neighbours`): in a private network namespace with a veth whose
//! peer (10.0.0.12) lives in a second namespace, the entry for the peer is
//! set STALE with a wrong MAC address; one refresh round corrects it within
//! a second (a broadcast ARP and its answer), and the next round reports the
//! change. Also shows why a plain `NTF_USE` is not enough: on a STALE entry
//! it only starts the kernel's DELAY, keeping the wrong MAC. The same for
//! an IPv6 hop (an IPv6 cluster network: NDP instead of ARP). Needs root.

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use common::{ip, require_root};
use nilb::neighbours::Refresher;
use nilb::netlink::{Nud, Rtnl};

const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 12));
const PEER6: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x12));
const WRONG: [u8; 6] = [0x02, 0, 0, 0, 0x0b, 0xad];

/// Run `f` in a thread with a private network namespace holding veth `nn0`
/// (10.0.0.11/24) whose peer `nn1` (10.0.0.12/24) is in the named namespace
/// `ns`, which is deleted afterwards.
fn with_peer(ns: &str, f: impl FnOnce(u32, Vec<u8>) + Send + 'static) {
    with_peer_at(ns, ("10.0.0.11/24", "10.0.0.12/24"), f)
}

/// [`with_peer`] with these addresses of `nn0` and `nn1` (IPv6 ones
/// without duplicate address detection, usable at once; `f` runs once the
/// link-local addresses' detection is done too).
fn with_peer_at(
    ns: &str,
    (local, peer): (&'static str, &'static str),
    f: impl FnOnce(u32, Vec<u8>) + Send + 'static,
) {
    let ns = ns.to_string();
    let nodad = if local.contains(':') { " nodad" } else { "" };
    let t = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare");
        ip("link set lo up");
        ip(&format!("netns add {ns}"));
        ip(&format!("link add nn0 type veth peer name nn1 netns {ns}"));
        ip(&format!("addr add {local} dev nn0{nodad}"));
        ip("link set nn0 up");
        ip(&format!("-n {ns} addr add {peer} dev nn1{nodad}"));
        ip(&format!("-n {ns} link set nn1 up"));
        if !nodad.is_empty() {
            // The link-local addresses still do duplicate address
            // detection (about 2 s): until they are done, neighbour
            // solicitations go unanswered and a refresh waits for a
            // retransmission. Wait for both ends (bounded).
            let tentative = |args: &[&str]| {
                let out = std::process::Command::new("ip")
                    .args(args)
                    .output()
                    .expect("ip addr");
                String::from_utf8_lossy(&out.stdout).contains("tentative")
            };
            let t0 = std::time::Instant::now();
            while (tentative(&["-6", "addr", "show", "dev", "nn0"])
                || tentative(&["-n", &ns, "-6", "addr", "show", "dev", "nn1"]))
                && t0.elapsed() < std::time::Duration::from_secs(10)
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        let peer_mac = mac_in(&ns, "nn1");
        let ifindex = nix::net::if_::if_nametoindex("nn0").expect("nn0");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ifindex, peer_mac)));
        ip(&format!("netns del {ns}"));
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
    });
    t.join().expect("test thread");
}

/// MAC address of `dev` in the named namespace `ns`.
fn mac_in(ns: &str, dev: &str) -> Vec<u8> {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-o", "link", "show", dev])
        .output()
        .expect("ip link");
    let text = String::from_utf8_lossy(&out.stdout);
    let mac = text
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("link/ether in ip link output");
    mac.split(':')
        .map(|p| u8::from_str_radix(p, 16).expect("MAC"))
        .collect()
}

fn entry(ifindex: u32) -> Option<(Nud, Option<Vec<u8>>)> {
    entry_of(ifindex, PEER)
}

fn entry_of(ifindex: u32, peer: IpAddr) -> Option<(Nud, Option<Vec<u8>>)> {
    Rtnl::open()
        .unwrap()
        .neighbours(ifindex, peer.is_ipv6())
        .unwrap()
        .into_iter()
        .find(|n| n.addr == peer)
        .map(|n| (n.state, n.lladdr))
}

fn set_wrong() {
    ip("neigh replace 10.0.0.12 lladdr 02:00:00:00:0b:ad dev nn0 nud stale");
}

#[test]
fn a_stale_wrong_mac_is_corrected_within_a_second() {
    require_root!("network namespaces, neighbour entries");
    with_peer(
        &format!("nilbneigh{}", std::process::id()),
        |ifindex, peer_mac| {
            set_wrong();
            assert_eq!(
                entry(ifindex),
                Some((Nud::Stale, Some(WRONG.to_vec()))),
                "the dump lists the entry as set"
            );
            // NTF_USE alone: the kernel keeps the wrong MAC (DELAY, then unicast
            // probes to it after delay_first_probe_time).
            Rtnl::open().unwrap().use_neighbour(ifindex, PEER).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let (state, mac) = entry(ifindex).unwrap();
            assert_eq!(
                mac,
                Some(WRONG.to_vec()),
                "NTF_USE alone leaves the wrong MAC ({state:?})"
            );

            set_wrong();
            let hops: BTreeSet<IpAddr> = [PEER].into();
            let mut r = Refresher::new(ifindex);
            let started = Instant::now();
            r.round(&hops, 100_000);
            assert_eq!(r.refreshes, 1);
            let fixed = loop {
                if let Some((Nud::Reachable, Some(mac))) = entry(ifindex) {
                    if mac == peer_mac {
                        break started.elapsed();
                    }
                }
                assert!(
                    started.elapsed() < Duration::from_secs(2),
                    "not corrected: {:?}",
                    entry(ifindex)
                );
                std::thread::sleep(Duration::from_millis(10));
            };
            println!(
                "wrong MAC corrected {} ms after the refresh round",
                fixed.as_millis()
            );
            r.round(&hops, 101_000);
            assert_eq!(r.changed, 1, "the next round reports the changed MAC");
            assert_eq!(r.refreshes, 1, "a REACHABLE entry is left alone");
        },
    );
}

/// An IPv6 hop's NDP entry, STALE with a wrong MAC, is corrected by one
/// round as an ARP entry is (the kernel sends a neighbour solicitation).
#[test]
fn a_stale_wrong_mac_of_an_ipv6_hop_is_corrected() {
    require_root!("network namespaces, neighbour entries");
    with_peer_at(
        &format!("nilbneigh6{}", std::process::id()),
        ("2001:db8::11/64", "2001:db8::12/64"),
        |ifindex, peer_mac| {
            ip("-6 neigh replace 2001:db8::12 lladdr 02:00:00:00:0b:ad dev nn0 nud stale");
            assert_eq!(
                entry_of(ifindex, PEER6),
                Some((Nud::Stale, Some(WRONG.to_vec()))),
                "the NDP dump lists the entry as set"
            );
            // An IPv4 dump does not list it.
            assert_eq!(entry_of(ifindex, PEER), None);
            let hops: BTreeSet<IpAddr> = [PEER6].into();
            let mut r = Refresher::new(ifindex);
            let started = Instant::now();
            r.round(&hops, 100_000);
            assert_eq!(r.refreshes, 1);
            loop {
                if let Some((Nud::Reachable, Some(mac))) = entry_of(ifindex, PEER6) {
                    if mac == peer_mac {
                        break;
                    }
                }
                assert!(
                    started.elapsed() < Duration::from_secs(3),
                    "not corrected: {:?}",
                    entry_of(ifindex, PEER6)
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            println!(
                "wrong MAC of an IPv6 hop corrected {} ms after the refresh round",
                started.elapsed().as_millis()
            );
            r.round(&hops, 101_000);
            assert_eq!(r.changed, 1, "the next round reports the changed MAC");
            assert_eq!(r.refreshes, 1, "a REACHABLE entry is left alone");
        },
    );
}
