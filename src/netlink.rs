//! The few rtnetlink requests nilb makes itself (netlink-packet-route over a
//! netlink-sys socket, synchronous): the kind of a virtual link (for error
//! hints), and the IPv4 neighbour entries of an interface, which
//! [`crate::neighbours`] keeps fresh for the hops the data plane uses.

use std::net::IpAddr;

use anyhow::{Context, Result};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// Kernel neighbour states (`NUD_*`) as nilb distinguishes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nud {
    /// Being resolved (INCOMPLETE).
    Incomplete,
    /// Confirmed recently (REACHABLE).
    Reachable,
    /// Not confirmed recently; the kernel re-validates it on its next use
    /// (STALE).
    Stale,
    /// Used while stale, waiting for a confirmation before probing (DELAY).
    Delay,
    /// Being re-validated by unicast probes (PROBE).
    Probe,
    /// Resolution failed (FAILED).
    Failed,
    /// Static entries (PERMANENT, NOARP).
    Static,
    /// Anything else (NONE, combinations).
    Other,
}

impl From<NeighbourState> for Nud {
    fn from(s: NeighbourState) -> Self {
        match s {
            NeighbourState::Incomplete => Nud::Incomplete,
            NeighbourState::Reachable => Nud::Reachable,
            NeighbourState::Stale => Nud::Stale,
            NeighbourState::Delay => Nud::Delay,
            NeighbourState::Probe => Nud::Probe,
            NeighbourState::Failed => Nud::Failed,
            NeighbourState::Permanent | NeighbourState::Noarp => Nud::Static,
            _ => Nud::Other,
        }
    }
}

/// One neighbour entry (IPv4 or IPv6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// The neighbour's address.
    pub addr: IpAddr,
    /// Its state.
    pub state: Nud,
    /// Its link-layer address, when the entry has one.
    pub lladdr: Option<Vec<u8>>,
}

/// A route netlink socket.
pub struct Rtnl {
    socket: Socket,
    seq: u32,
}

impl Rtnl {
    /// Open a route netlink socket in this network namespace.
    pub fn open() -> Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE).context("opening a netlink socket")?;
        socket.bind_auto().context("binding the netlink socket")?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .context("connecting the netlink socket")?;
        // Let the kernel filter dumps by the header's fields (ifindex).
        let _ = socket.set_netlink_get_strict_chk(true);
        Ok(Rtnl { socket, seq: 1 })
    }

    /// Send `msg` with `flags` and collect the answers: every message of a
    /// dump, or nothing for an acknowledged request. A negative ack is an
    /// error.
    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        self.seq = self.seq.wrapping_add(1);
        header.sequence_number = self.seq;
        let mut req = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        req.finalize();
        let mut buf = vec![0u8; req.header.length as usize];
        req.serialize(&mut buf);
        self.socket
            .send(&buf, 0)
            .context("sending a netlink request")?;
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut out = Vec::new();
        let mut rx = vec![0u8; 64 * 1024];
        loop {
            let n = self
                .socket
                .recv(&mut &mut rx[..], 0)
                .context("reading a netlink answer")?;
            let mut offset = 0;
            while offset < n {
                let msg: NetlinkMessage<RouteNetlinkMessage> =
                    NetlinkMessage::deserialize(&rx[offset..n])
                        .context("parsing a netlink answer")?;
                let len = msg.header.length as usize;
                if msg.header.sequence_number != self.seq {
                    offset += len.max(1);
                    continue;
                }
                match msg.payload {
                    NetlinkPayload::Done(d) if d.code < 0 => {
                        return Err(std::io::Error::from_raw_os_error(-d.code).into());
                    }
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(out),
                        Some(code) => {
                            return Err(std::io::Error::from_raw_os_error(-code.get()).into());
                        }
                    },
                    NetlinkPayload::InnerMessage(m) => {
                        out.push(m);
                        if !dump {
                            return Ok(out);
                        }
                    }
                    _ => {}
                }
                if len == 0 {
                    break;
                }
                offset += len;
            }
        }
    }

    /// The link kind (`veth`, `bridge`, ...) of the interface `name`, if it
    /// is a virtual link that has one.
    pub fn link_kind(&mut self, name: &str) -> Result<Option<String>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        let answers = self.request(RouteNetlinkMessage::GetLink(msg), NLM_F_REQUEST)?;
        for a in answers {
            if let RouteNetlinkMessage::NewLink(link) = a {
                for attr in link.attributes {
                    if let LinkAttribute::LinkInfo(infos) = attr {
                        for i in infos {
                            if let LinkInfo::Kind(k) = i {
                                return Ok(Some(k.to_string()));
                            }
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// The neighbour entries of interface `ifindex` of one family (ARP
    /// for IPv4, NDP for IPv6).
    pub fn neighbours(&mut self, ifindex: u32, ipv6: bool) -> Result<Vec<Neighbour>> {
        let family = if ipv6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        // With strict checking the kernel filters a dump by the NDA_IFINDEX
        // attribute (the header's ifindex must be 0).
        let mut msg = NeighbourMessage::default();
        msg.header.family = family;
        msg.attributes.push(NeighbourAttribute::IfIndex(ifindex));
        let answers = self.request(
            RouteNetlinkMessage::GetNeighbour(msg),
            NLM_F_REQUEST | NLM_F_DUMP,
        )?;
        let mut out = Vec::new();
        for a in answers {
            let RouteNetlinkMessage::NewNeighbour(n) = a else {
                continue;
            };
            if n.header.ifindex != ifindex || n.header.family != family {
                continue;
            }
            let mut addr = None;
            let mut lladdr = None;
            for attr in n.attributes {
                match attr {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => {
                        addr = Some(IpAddr::V4(a))
                    }
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => {
                        addr = Some(IpAddr::V6(a))
                    }
                    NeighbourAttribute::LinkLayerAddress(l) => lladdr = Some(l),
                    _ => {}
                }
            }
            if let Some(addr) = addr {
                out.push(Neighbour {
                    addr,
                    state: n.header.state.into(),
                    lladdr,
                });
            }
        }
        Ok(out)
    }

    fn neighbour_message(ifindex: u32, addr: IpAddr) -> NeighbourMessage {
        let mut msg = NeighbourMessage::default();
        msg.header.ifindex = ifindex;
        let (family, dest) = match addr {
            IpAddr::V4(a) => (AddressFamily::Inet, NeighbourAddress::Inet(a)),
            IpAddr::V6(a) => (AddressFamily::Inet6, NeighbourAddress::Inet6(a)),
        };
        msg.header.family = family;
        msg.attributes.push(NeighbourAttribute::Destination(dest));
        msg
    }

    /// Delete the neighbour entry of `addr` on `ifindex` (gone already is
    /// fine).
    pub fn delete_neighbour(&mut self, ifindex: u32, addr: IpAddr) -> Result<()> {
        let msg = Self::neighbour_message(ifindex, addr);
        match self.request(
            RouteNetlinkMessage::DelNeighbour(msg),
            NLM_F_REQUEST | NLM_F_ACK,
        ) {
            Ok(_) => Ok(()),
            Err(e) if errno_in(&e) == Some(nix::errno::Errno::ENOENT as i32) => Ok(()),
            Err(e) => Err(e.context(format!("deleting the neighbour entry of {addr}"))),
        }
    }

    /// Ask the kernel to resolve `addr` on `ifindex` now, as if a packet were
    /// sent to it (`NTF_USE`): an absent or failed entry is created
    /// INCOMPLETE and a broadcast ARP request (IPv6: a neighbour
    /// solicitation) goes out at once.
    pub fn use_neighbour(&mut self, ifindex: u32, addr: IpAddr) -> Result<()> {
        let mut msg = Self::neighbour_message(ifindex, addr);
        msg.header.flags = NeighbourFlags::Use;
        msg.header.state = NeighbourState::None;
        self.request(
            RouteNetlinkMessage::NewNeighbour(msg),
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
        )
        .map(drop)
        .with_context(|| format!("asking the kernel to resolve {addr}"))
    }
}

/// The OS error number `e` carries: the first `std::io::Error` (netlink's
/// answers are built as such), `nix` errno or `libbpf_rs::Error` in its
/// chain. libbpf-rs keeps its errno in an `io::Error` it does not expose,
/// whose text ends in std's "(os error N)": read from that type alone.
/// Returns: the errno, or None if no error of the chain carries one.
pub fn errno_in(e: &anyhow::Error) -> Option<i32> {
    e.chain().find_map(|c| {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            io.raw_os_error()
        } else if let Some(n) = c.downcast_ref::<nix::errno::Errno>() {
            Some(*n as i32)
        } else if let Some(l) = c.downcast_ref::<libbpf_rs::Error>() {
            let text = l.to_string();
            let at = text.rfind("(os error ")? + "(os error ".len();
            text[at..].split(')').next()?.parse().ok()
        } else {
            None
        }
    })
}

/// The link kind of `name` (see [`Rtnl::link_kind`]); None on any error.
pub fn link_kind(name: &str) -> Option<String> {
    Rtnl::open().ok()?.link_kind(name).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::errno_in;

    #[test]
    fn the_errno_is_found_by_type_in_the_chain() {
        let e = anyhow::Error::new(std::io::Error::from_raw_os_error(2)).context("deleting");
        assert_eq!(errno_in(&e), Some(2));
        let e = anyhow::Error::new(nix::errno::Errno::EPERM).context("attaching");
        assert_eq!(errno_in(&e), Some(1));
        let e = anyhow::Error::new(libbpf_rs::Error::from_raw_os_error(13)).context("loading");
        assert_eq!(errno_in(&e), Some(13), "EACCES, not EPERM");
        // Text that merely says so is not an errno.
        assert_eq!(
            errno_in(&anyhow::anyhow!("Operation not permitted (os error 1)")),
            None
        );
    }
}
