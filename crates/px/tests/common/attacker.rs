//! An attacker on the outer side of the gateway lab, for the root tests
//! that send crafted frames (`hostile_lab.rs`, `blind_sweep_lab.rs`): a
//! fourth namespace whose veth joins the legacy host's link through a
//! bridge in the legacy namespace, so its frames reach the gateway's outer
//! port as any outside host's would; frames built by hand (checksums
//! computed here, or left wrong on purpose); and a counter of marked
//! frames on an interface.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use px_io::{PacketSocket, Poller, RxBatch, SocketConfig};
use px_lab::{Netns, send_frame};
use px_wire::offload::PacketMeta;

use super::*;

/// The attacker's end of its link, its peer in the legacy namespace, and
/// the bridge that joins the peer to the legacy host's link.
pub const ATK_DEV: &str = "px-ae";
pub const ATK_PEER: &str = "px-la";
pub const BRIDGE: &str = "px-lbr";

/// The MAC address of `dev` in `ns`.
pub fn mac_bytes(ns: &Netns, dev: &str) -> [u8; 6] {
    let out = ns.ip(&["-br", "link", "show", "dev", dev]).unwrap();
    let m = out.split_whitespace().nth(2).unwrap_or_else(|| panic!("no MAC in {out:?}"));
    let mut mac = [0u8; 6];
    for (b, h) in mac.iter_mut().zip(m.split(':')) {
        *b = u8::from_str_radix(h, 16).unwrap();
    }
    mac
}

/// The ones' complement sum of `data` (RFC 1071), added to `acc`.
pub fn sum(data: &[u8], mut acc: u32) -> u32 {
    let mut c = data.chunks_exact(2);
    for w in &mut c {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = c.remainder() {
        acc += u32::from(*b) << 8;
    }
    acc
}

/// A sum folded and complemented: the checksum field.
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// An address of a crafted packet.
#[derive(Clone, Copy)]
pub enum Ip {
    V4([u8; 4]),
    V6([u8; 16]),
}

pub fn v4(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

/// Ethernet + IP header + `l4` (its checksum at `csum_at`, if any, filled
/// from the pseudo-header) with `tos` (DSCP << 2 | ECN).
#[allow(clippy::too_many_arguments)]
pub fn frame(
    dst: [u8; 6],
    src: [u8; 6],
    s: Ip,
    d: Ip,
    proto: u8,
    tos: u8,
    mut l4: Vec<u8>,
    csum_at: Option<usize>,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 40 + l4.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(at) = csum_at {
        let (sb, db): (&[u8], &[u8]) = match (&s, &d) {
            (Ip::V4(s), Ip::V4(d)) => (s, d),
            (Ip::V6(s), Ip::V6(d)) => (s, d),
            _ => unreachable!(),
        };
        let pseudo = sum(sb, sum(db, u32::from(proto) + l4.len() as u32));
        let c = fold(sum(&l4, pseudo));
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    match (s, d) {
        (Ip::V4(s), Ip::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let tl = (20 + l4.len()) as u16;
            let mut h = [0x45, tos, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            h[2..4].copy_from_slice(&tl.to_be_bytes());
            h[12..16].copy_from_slice(&s);
            h[16..20].copy_from_slice(&d);
            let c = fold(sum(&h, 0));
            h[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&h);
        }
        (Ip::V6(s), Ip::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            f.extend_from_slice(&[0x60 | (tos >> 4), tos << 4, 0, 0]);
            f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            f.extend_from_slice(&[proto, 64]);
            f.extend_from_slice(&s);
            f.extend_from_slice(&d);
        }
        _ => unreachable!(),
    }
    f.extend_from_slice(&l4);
    f
}

/// A TCP header (+ options, no payload); checksum left for [`frame`].
pub fn tcp(sport: u16, dport: u16, seq: u32, ack: u32, flags: u8, opts: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(20 + opts.len());
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.push((((20 + opts.len()) / 4) as u8) << 4);
    t.push(flags);
    t.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t
}

/// Sends `f`, retrying a full queue for a while; counts a frame it gave up on.
pub fn send(sock: &PacketSocket, f: &[u8], failures: &mut u64) {
    for _ in 0..200 {
        match send_frame(sock, &PacketMeta::PLAIN, f) {
            Ok(()) => return,
            Err(_) => std::thread::sleep(Duration::from_micros(50)),
        }
    }
    *failures += 1;
}

/// The legacy host's link and a veth to the attacker joined by a bridge
/// in the legacy namespace; the legacy host's addresses move to the bridge.
pub fn attach_attacker(lab: &mut GwLab) -> px_lab::NsId {
    let atk = lab.line.topo.add_ns("atk").expect("attacker namespace");
    lab.line.topo.add_veth((lab.legacy, ATK_PEER), (atk, ATK_DEV), EMTU).expect("attacker link");
    let l = lab.ns(lab.legacy);
    let ip = |args: &[&str]| l.ip(args).unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
    // No netfilter on the bridge: with br_netfilter loaded (by anything
    // on the machine) it would validate IP headers and drop the malformed
    // frames before they reach the gateway; a wire does not.
    for key in ["iptables", "ip6tables", "arptables"] {
        let _ = l.set_sysctl(&format!("net.bridge.bridge-nf-call-{key}"), "0");
    }
    ip(&[
        "link",
        "add",
        BRIDGE,
        "type",
        "bridge",
        "stp_state",
        "0",
        "forward_delay",
        "0",
        "nf_call_iptables",
        "0",
        "nf_call_ip6tables",
        "0",
        "nf_call_arptables",
        "0",
    ]);
    ip(&["link", "set", BRIDGE, "mtu", &EMTU.to_string()]);
    ip(&["addr", "flush", "dev", LEGACY_DEV]);
    ip(&["link", "set", LEGACY_DEV, "master", BRIDGE]);
    ip(&["link", "set", ATK_PEER, "master", BRIDGE]);
    ip(&["link", "set", BRIDGE, "up"]);
    ip(&["addr", "add", &format!("{LEGACY_V4}/24"), "dev", BRIDGE]);
    ip(&["addr", "add", &format!("{LEGACY_V6}/64"), "dev", BRIDGE, "nodad"]);
    // The attacker sends wire-sized frames, as the hosts do.
    let off = px_lab::Offloads { tso: Some(false), gso: Some(false), gro: Some(false) };
    lab.ns(atk).set_offloads(ATK_DEV, off).unwrap();
    atk
}

/// Sets the IPv4 identification of a frame built by [`frame`] and its
/// header checksum to match: a mark the receiving side can count.
pub fn set_ipv4_id(f: &mut [u8], id: u16) {
    f[18..20].copy_from_slice(&id.to_be_bytes());
    f[24..26].copy_from_slice(&[0, 0]);
    let c = fold(sum(&f[14..34], 0));
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Which frames of an interface a [`Marked`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Arriving on it.
    In,
    /// Leaving by it.
    Out,
}

/// Whether IPv4 frame `f` carries TCP whose payload starts with `n` bytes
/// of `b`. Read by hand, not through `px_wire`'s checked views: the frames
/// counted here are malformed on purpose (a total length of 0 among them).
fn tcp_payload_starts_with(f: &[u8], b: u8, n: usize) -> bool {
    let Some(&vihl) = f.get(14) else { return false };
    let l4 = 14 + usize::from(vihl & 0x0f) * 4;
    if f.get(23) != Some(&6) {
        return false;
    }
    let Some(&off) = f.get(l4 + 12) else { return false };
    let start = l4 + usize::from(off >> 4) * 4;
    f.get(start..start + n).is_some_and(|p| p.iter().all(|&x| x == b))
}

/// Counts, on a background thread, the IPv4 frames with identification
/// `id` that pass `dev` one way until dropped or [`Marked::stop`].
pub struct Marked {
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Marked {
    pub fn start(ns: &Netns, dev: &str, id: u16, way: Way) -> Marked {
        Marked::start_with_payload(ns, dev, id, way, None)
    }

    /// As [`Marked::start`], counting only TCP frames whose payload starts
    /// with 16 bytes of `payload`: a frame of a live flow may carry the
    /// same identification by chance (its IDs run through all 65,536).
    pub fn start_with_payload(ns: &Netns, dev: &str, id: u16, way: Way, payload: Option<u8>) -> Marked {
        let cfg = SocketConfig { vnet_hdr: false, ignore_outgoing: false, ..SocketConfig::default() };
        let dev = dev.to_string();
        let sock = ns.run(move || PacketSocket::open(&dev, &cfg)).unwrap().expect("marked-frame counter socket");
        let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (s, n) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            let mut batch = RxBatch::new(32, px_io::MAX_FRAME);
            let mut poller = Poller::new();
            poller.add(std::os::fd::AsFd::as_fd(&sock));
            loop {
                let last = s.load(Ordering::Relaxed);
                let _ = poller.wait(Some(Duration::from_millis(20)));
                while sock.recv_batch(&mut batch).is_ok_and(|k| k > 0) {
                    for p in batch.iter().flatten() {
                        let f = p.frame;
                        let out = p.pkt_type == px_io::PacketType::Outgoing;
                        if out == (way == Way::Out)
                            && f.len() >= 34
                            && f[12..14] == [8, 0]
                            && f[18..20] == id.to_be_bytes()
                            && payload.is_none_or(|b| tcp_payload_starts_with(f, b, 16))
                        {
                            n.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if last {
                    return;
                }
            }
        });
        Marked { stop, seen, thread: Some(thread) }
    }

    /// Stops counting (after what is still queued) and returns the count.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.seen.load(Ordering::Relaxed)
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
