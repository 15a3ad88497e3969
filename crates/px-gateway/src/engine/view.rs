//! What an operator may see of the engine's flows: the largest flows,
//! each as a [`FlowView`] (`px status`). Read only, on request, never on
//! the packet path: it scans the flow table once.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::port::Port;

/// One flow as `px status` shows it. Directions: `in` is what came from
/// the outer port (toward the b-network), `out` what came from the inner
/// port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowView {
    /// The outer (legacy network) end.
    pub outer: SocketAddr,
    /// The inner (b-network) end.
    pub inner: SocketAddr,
    /// TCP payload bytes received, inbound and outbound, whichever path
    /// carried them (user space or the kernel fast path).
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Of those, what the kernel fast path carried.
    #[serde(default)]
    pub kernel_bytes_in: u64,
    #[serde(default)]
    pub kernel_bytes_out: u64,
    /// Frames received (a GRO super-packet counts once).
    pub frames_in: u64,
    pub frames_out: u64,
    /// The largest segment size received each way (a super-packet's
    /// segment size, a plain segment's payload).
    pub largest_segment_in: u32,
    pub largest_segment_out: u32,
    /// The MSS each host announced in the handshake the gateway saw (the
    /// inner host's after the gateway raised it; `None`: not seen).
    pub inner_mss: Option<u16>,
    pub outer_mss: Option<u16>,
    /// Where the connection is: `handshake`, `established`, `closing`
    /// (a FIN seen), `reset`, or `signed` (TCP-MD5/AO: passed untouched).
    pub state: String,
    /// Inbound merging: the flow is bulk (its segments are merged), and
    /// the payload bytes held now.
    pub merging: bool,
    pub held_bytes: usize,
    /// Time since its last segment, in ms.
    pub idle_ms: u64,
    /// The segment size the kernel fast path cuts to in each direction it
    /// carries (`None`: that direction crosses user space).
    pub kernel_segment_in: Option<u16>,
    pub kernel_segment_out: Option<u16>,
    /// Why nothing of the flow can be translated, if so: `the inner host
    /// advertised MSS 1460` (no larger than the outer port's MSS although
    /// the inner port carries more; counted in `inner_mss_small`).
    #[serde(default)]
    pub not_translated: Option<String>,
    /// Times the flow (or a direction) came back from the kernel fast
    /// path, and why the last time (`flags`, `options`, `lone`, `adjust`,
    /// `other`: the kernel handed it back; `path_mtu`, `config`,
    /// `removed`, `backlog`: the engine took it back).
    #[serde(default)]
    pub hand_backs: u32,
    #[serde(default)]
    pub last_hand_back: Option<String>,
    /// Why the kernel fast path carries no direction of the flow (`None`
    /// while it carries one): `the fast path is off`, `closing`, `fewer
    /// segments than fast_path_after so far`, ...; `waiting for a quiet
    /// moment` once it qualifies.
    #[serde(default)]
    pub not_offloaded: Option<String>,
}

impl Engine {
    /// The `n` flows that carried the most payload bytes (both directions),
    /// largest first.
    /// A flow's bytes count what the kernel fast path carried of it: in
    /// directions since withdrawn, and (read from the datapath, one look
    /// per flow there) what it carries now.
    pub fn largest_flows(&self, n: usize, now: Instant) -> Vec<FlowView> {
        let mut all: Vec<(u64, u32, [u64; 2])> = self
            .flows
            .indices()
            .filter_map(|i| {
                let f = self.flows.get(i)?;
                let mut kernel = f.stats.kernel_bytes;
                if f.fast.in_kernel()
                    && let Some(p) = self.datapath.as_ref().and_then(|d| d.progress(&f.key))
                {
                    for (k, d) in kernel.iter_mut().zip(&p.dirs) {
                        *k += d.map_or(0, |d| d.bytes);
                    }
                }
                Some((f.stats.bytes.iter().chain(&kernel).sum::<u64>(), i, kernel))
            })
            .collect();
        all.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        all.into_iter()
            .take(n)
            .filter_map(|(_, i, kernel)| self.flows.get(i).map(|f| (f, i, kernel)))
            .map(|(f, idx, kernel)| {
                let (life, st) = (&f.conn.life, &f.stats);
                let state = if life.signed {
                    "signed"
                } else if life.reset {
                    "reset"
                } else if life.fin_outer || life.fin_inner {
                    "closing"
                } else if life.established {
                    "established"
                } else {
                    "handshake"
                };
                let (i, o) = (Port::Inner as usize, Port::Outer as usize);
                FlowView {
                    outer: f.key.outer(),
                    inner: f.key.inner(),
                    bytes_in: st.bytes[o] + kernel[o],
                    bytes_out: st.bytes[i] + kernel[i],
                    kernel_bytes_in: kernel[o],
                    kernel_bytes_out: kernel[i],
                    frames_in: st.frames[o],
                    frames_out: st.frames[i],
                    largest_segment_in: st.largest_segment[o],
                    largest_segment_out: st.largest_segment[i],
                    inner_mss: f.conn.handshake.inner_mss,
                    outer_mss: f.conn.handshake.outer_mss,
                    state: state.to_string(),
                    merging: f.merge.bulk,
                    held_bytes: f.merge.held.as_ref().map_or(0, |h| h.len),
                    idle_ms: now.saturating_duration_since(f.last_seen).min(Duration::from_secs(1 << 20)).as_millis()
                        as u64,
                    kernel_segment_in: f.fast.dir(Port::Outer).map(|d| d.segment),
                    kernel_segment_out: f.fast.dir(Port::Inner).map(|d| d.segment),
                    not_translated: self
                        .cfg
                        .untranslatable_inner_mss(f.conn.handshake.inner_mss, version_of(f.key.inner()))
                        .map(|m| format!("the inner host advertised MSS {m}")),
                    hand_backs: st.hand_backs,
                    last_hand_back: st.last_hand_back.map(str::to_string),
                    not_offloaded: (!f.fast.in_kernel()).then(|| {
                        match self.fast_path_plan_or_why(idx, now, super::fast_path::Held::Allowed) {
                            Ok(_) => "waiting for a quiet moment",
                            Err(why) => why,
                        }
                        .to_string()
                    }),
                }
            })
            .collect()
    }
}

fn version_of(a: SocketAddr) -> px_wire::IpVersion {
    if a.is_ipv4() { px_wire::IpVersion::V4 } else { px_wire::IpVersion::V6 }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use px_wire::offload::PacketMeta;
    use px_wire::tcp::flags;

    use crate::test_frames::{INNER_PORT, INNER_V4, INNER_V6, OUTER_PORT, OUTER_V4, OUTER_V6, Tcp};
    use crate::{Config, Engine, Port};

    /// A handshake (the inner host's SYN-ACK with MSS 8960), then `n`
    /// inbound segments of 1000 bytes and one outbound of 500, on the flow
    /// of the test frames (IPv4 or IPv6), the outer port moved by `port`.
    fn flow(e: &mut Engine, now: Instant, v6: bool, n: u32) {
        flow_with_mss(e, now, v6, n, 8960);
    }

    /// [`flow`], the inner host announcing `mss`.
    fn flow_with_mss(e: &mut Engine, now: Instant, v6: bool, n: u32, mss: u16) {
        let mut sa = Tcp::data(v6, Port::Inner, 0, 0);
        sa.flags = flags::SYN | flags::ACK;
        sa.opts = [2, 4].into_iter().chain(mss.to_be_bytes()).collect();
        let _ = e.handle_packet(now, Port::Inner, &mut sa.build(), PacketMeta::PLAIN);
        for i in 0..n {
            let mut f = Tcp::data(v6, Port::Outer, 1 + i * 1000, 1000).build();
            let _ = e.handle_packet(now, Port::Outer, &mut f, PacketMeta::PLAIN);
        }
        let mut f = Tcp::data(v6, Port::Inner, 1, 500).build();
        let _ = e.handle_packet(now, Port::Inner, &mut f, PacketMeta::PLAIN);
    }

    #[test]
    fn largest_flows_come_first_with_their_ends_sizes_and_state() {
        let now = Instant::now();
        let mut e = Engine::new(Config { bulk_after: 64, ..Config::default() }).unwrap();
        flow(&mut e, now, false, 2);
        flow(&mut e, now, true, 5);
        let later = now + Duration::from_millis(30);
        let v = e.largest_flows(10, later);
        assert_eq!(v.len(), 2);
        let big = &v[0];
        assert_eq!(big.outer, SocketAddr::new(OUTER_V6.into(), OUTER_PORT));
        assert_eq!(big.inner, SocketAddr::new(INNER_V6.into(), INNER_PORT));
        assert_eq!((big.bytes_in, big.frames_in, big.largest_segment_in), (5000, 5, 1000));
        assert_eq!((big.bytes_out, big.frames_out, big.largest_segment_out), (500, 2, 500));
        assert_eq!(big.inner_mss, Some(8960));
        assert_eq!(big.state, "established");
        assert_eq!(big.idle_ms, 30);
        assert_eq!(v[1].outer, SocketAddr::new(OUTER_V4.into(), OUTER_PORT));
        assert_eq!(v[1].inner, SocketAddr::new(INNER_V4.into(), INNER_PORT));
        assert_eq!(v[1].bytes_in, 2000);
        assert_eq!(e.largest_flows(1, later).len(), 1);
    }

    #[test]
    fn a_super_packet_counts_once_with_its_segment_size() {
        let now = Instant::now();
        let mut e = Engine::new(Config::default()).unwrap();
        flow(&mut e, now, false, 0);
        let mut f = Tcp::data(false, Port::Outer, 1, 4 * 1448).build();
        let meta = PacketMeta::tcp_gso(false, 1448, 34, 0);
        let _ = e.handle_packet(now, Port::Outer, &mut f, meta);
        let v = e.largest_flows(1, now);
        assert_eq!((v[0].bytes_in, v[0].frames_in, v[0].largest_segment_in), (4 * 1448, 1, 1448));
    }

    /// Issue 38 item 2: an inner host that advertises no more than the
    /// outer MSS (a path MTU it cached after a "too big") is named per
    /// flow and counted; one that advertises more is not, and neither is
    /// anything on a gateway whose inner port is no larger than its outer.
    #[test]
    fn a_flow_whose_inner_host_advertised_the_outer_mss_is_named_not_translated() {
        let now = Instant::now();
        let mut e = Engine::new(Config::default()).unwrap();
        flow_with_mss(&mut e, now, false, 1, 1460);
        flow_with_mss(&mut e, now, true, 2, 8940);
        let v = e.largest_flows(10, now);
        assert_eq!(v[0].not_translated, None, "{v:?}");
        assert_eq!(v[1].not_translated.as_deref(), Some("the inner host advertised MSS 1460"));
        assert_eq!(e.counters().inner_mss_small, 1);
        // IPv6's outer MSS is 1440: 1441 is more, 1440 is not.
        let mut e = Engine::new(Config::default()).unwrap();
        flow_with_mss(&mut e, now, true, 1, 1441);
        assert_eq!(e.largest_flows(1, now)[0].not_translated, None);
        flow_with_mss(&mut e, now, true, 1, 1440);
        assert_eq!(e.counters().inner_mss_small, 1);
        let mut e = Engine::new(Config { imtu: 1500, ..Config::default() }).unwrap();
        flow_with_mss(&mut e, now, false, 1, 1460);
        assert_eq!(e.largest_flows(1, now)[0].not_translated, None);
        assert_eq!(e.counters().inner_mss_small, 0);
    }
}
