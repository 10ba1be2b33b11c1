//! One-line descriptions of Ethernet frames, for `nilb replay`: the flow of
//! a plain packet, and for a GUE packet the outer hop plus its hop list and
//! the inner flow. Parsing uses etherparse; nothing here is on the data path.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

/// Describe the L3/L4 content of an IPv4 or IPv6 packet starting at `l3`.
fn describe_ip(l3: &[u8]) -> String {
    match SlicedPacket::from_ip(l3) {
        Ok(p) => describe_sliced(&p),
        Err(e) => format!("unparseable IP ({e})"),
    }
}

fn describe_sliced(p: &SlicedPacket<'_>) -> String {
    let mut s = String::new();
    let (src, dst, frag) = match &p.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            (
                h.source_addr().to_string(),
                h.destination_addr().to_string(),
                h.more_fragments() || h.fragments_offset().value() != 0,
            )
        }
        // IPv6 addresses in brackets, so that ":port" reads unambiguously.
        Some(NetSlice::Ipv6(ip)) => (
            format!("[{}]", ip.header().source_addr()),
            format!("[{}]", ip.header().destination_addr()),
            ip.is_payload_fragmented(),
        ),
        None => return "non-IP".into(),
    };
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            let mut flags = String::new();
            for (on, c) in [
                (t.syn(), 'S'),
                (t.ack(), '.'),
                (t.fin(), 'F'),
                (t.rst(), 'R'),
                (t.psh(), 'P'),
            ] {
                if on {
                    flags.push(c);
                }
            }
            let _ = write!(
                s,
                "{src}:{} > {dst}:{} TCP [{flags}]",
                t.source_port(),
                t.destination_port()
            );
        }
        Some(TransportSlice::Udp(u)) => {
            let _ = write!(
                s,
                "{src}:{} > {dst}:{} UDP",
                u.source_port(),
                u.destination_port()
            );
        }
        Some(TransportSlice::Icmpv4(i)) => {
            let _ = write!(
                s,
                "{src} > {dst} ICMP type {} code {}",
                i.type_u8(),
                i.code_u8()
            );
        }
        Some(TransportSlice::Icmpv6(i)) => {
            let _ = write!(
                s,
                "{src} > {dst} ICMPv6 type {} code {}",
                i.type_u8(),
                i.code_u8()
            );
        }
        _ => {
            let _ = write!(s, "{src} > {dst}");
        }
    }
    if frag {
        s.push_str(" fragment");
    }
    s
}

/// Describe an Ethernet frame; GUE on `gue_port` is shown as
/// `GUE outer-src > outer-dst hops [..] next i | inner flow`.
pub fn describe_frame(frame: &[u8], gue_port: u16) -> String {
    let p = match SlicedPacket::from_ethernet(frame) {
        Ok(p) => p,
        Err(e) => return format!("unparseable frame ({e})"),
    };
    if let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Udp(u))) = (&p.net, &p.transport) {
        if u.destination_port() == gue_port {
            let payload = u.payload();
            if payload.len() >= 8 {
                let n = payload[7] as usize;
                let next = payload[6];
                let hops: Vec<String> = payload[8..]
                    .chunks_exact(4)
                    .take(n)
                    .map(|c| Ipv4Addr::new(c[0], c[1], c[2], c[3]).to_string())
                    .collect();
                let inner_at = 8 + 4 * n;
                let inner = payload
                    .get(inner_at..)
                    .map(describe_ip)
                    .unwrap_or_else(|| "truncated".into());
                return format!(
                    "GUE {} > {} sport {} hops [{}] next {} | {}",
                    ip.header().source_addr(),
                    ip.header().destination_addr(),
                    u.source_port(),
                    hops.join(", "),
                    next,
                    inner
                );
            }
        }
    }
    describe_sliced(&p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_tcp() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![
            0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 192, 0, 2, 1, 10, 0, 0, 100,
        ];
        ip.extend_from_slice(&[
            0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
        ]);
        f.extend_from_slice(&ip);
        assert_eq!(
            describe_frame(&f, 19523),
            "192.0.2.1:40000 > 10.0.0.100:80 TCP [S]"
        );
    }

    #[test]
    fn describes_ipv6_inside_gue() {
        let mut inner = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
        inner.extend_from_slice(
            &"2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        inner.extend_from_slice(
            &"2001:db8::80"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        inner.extend_from_slice(&[
            0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
        ]);
        let mut gue = vec![1, 41, 0, 0, 0, 0, 0, 0];
        gue.extend_from_slice(&inner);
        let udp_len = 8 + gue.len();
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 11, 10, 0, 0, 12]);
        f.extend_from_slice(&[0x81, 0x23, 0x4c, 0x43]);
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&gue);
        assert_eq!(
            describe_frame(&f, 19523),
            "GUE 10.0.0.11 > 10.0.0.12 sport 33059 hops [] next 0 | [2001:db8::1]:40000 > [2001:db8::80]:80 TCP [S]"
        );
    }
}
