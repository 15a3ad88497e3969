//! What the engine counts: every packet in is accounted for as forwarded,
//! absorbed into a merge, cut into pieces, or dropped for a named reason.

use px_wire::caravan::Malformed;
use serde::Serialize;

use crate::port::Port;

/// Why the engine dropped a packet. It drops only what a router would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// IPv4 or IPv6 headers inconsistent beyond repair.
    Malformed,
    /// Too big for the egress with DF set (an ICMP error was due).
    TooBigDf,
    /// IPv6 and too big for the egress (an ICMPv6 PTB was due).
    TooBigV6,
    /// Too big for the egress and of a kind the engine cannot cut.
    TooBigUncuttable,
    /// IEEE 802.1D link-local control frame (01:80:C2:00:00:00-0F: STP,
    /// LACP, LLDP, pause...), which a bridge never forwards.
    LinkLocal,
    /// Addressed to the gateway host's own MAC: the host's stack takes it.
    ForHost,
}

impl DropReason {
    pub const ALL: [DropReason; 6] = [
        DropReason::Malformed,
        DropReason::TooBigDf,
        DropReason::TooBigV6,
        DropReason::TooBigUncuttable,
        DropReason::LinkLocal,
        DropReason::ForHost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::TooBigDf => "too_big_df",
            DropReason::TooBigV6 => "too_big_v6",
            DropReason::TooBigUncuttable => "too_big_uncuttable",
            DropReason::LinkLocal => "link_local",
            DropReason::ForHost => "for_host",
        }
    }
}

/// Why held data was sent before it filled a whole inner segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushReason {
    /// The merge timeout expired.
    Timeout,
    /// PSH or FIN on the last piece.
    PshFin,
    /// RST, SYN, URG or CWR arrived for the flow.
    ControlFlag,
    /// A segment that is not the next in sequence (retransmission, reorder).
    OutOfOrder,
    /// A pure ACK of the flow (sent after the data it follows).
    PureAck,
    /// The next segment cannot join (options, ACK, ECN, TTL, DF differ...).
    Unmergeable,
    /// The flow was evicted (table full or idle).
    Evicted,
    /// Held bytes reached the configured bound.
    MemoryPressure,
    /// The engine was asked to flush everything (shutdown).
    Shutdown,
    /// The flow moves to the kernel fast path (nothing may stay held).
    FastPath,
}

impl FlushReason {
    pub const ALL: [FlushReason; 10] = [
        FlushReason::Timeout,
        FlushReason::PshFin,
        FlushReason::ControlFlag,
        FlushReason::OutOfOrder,
        FlushReason::PureAck,
        FlushReason::Unmergeable,
        FlushReason::Evicted,
        FlushReason::MemoryPressure,
        FlushReason::Shutdown,
        FlushReason::FastPath,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FlushReason::Timeout => "timeout",
            FlushReason::PshFin => "psh_fin",
            FlushReason::ControlFlag => "control_flag",
            FlushReason::OutOfOrder => "out_of_order",
            FlushReason::PureAck => "pure_ack",
            FlushReason::Unmergeable => "unmergeable",
            FlushReason::Evicted => "evicted",
            FlushReason::MemoryPressure => "memory_pressure",
            FlushReason::Shutdown => "shutdown",
            FlushReason::FastPath => "fast_path",
        }
    }
}

/// Per-port packet and byte counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

/// Hold-time histogram, log-linear: values under 8 µs have a bucket each;
/// above, every power of two is cut into 8 equal buckets, so a quantile read
/// from it is at most 12.5 % above the true value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HoldHistogram {
    #[serde(with = "serde_buckets")]
    pub buckets: [u64; HOLD_BUCKETS],
}

/// 8 exact buckets plus 8 per octave from 8 µs to 2^27 µs (over two minutes).
pub const HOLD_BUCKETS: usize = 8 + 8 * 24;

impl Default for HoldHistogram {
    fn default() -> Self {
        HoldHistogram { buckets: [0; HOLD_BUCKETS] }
    }
}

mod serde_buckets {
    use serde::Serializer;
    pub fn serialize<S: Serializer>(b: &[u64; super::HOLD_BUCKETS], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(b.iter())
    }
}

impl HoldHistogram {
    fn bucket(micros: u64) -> usize {
        if micros < 8 {
            return micros as usize;
        }
        let octave = 63 - micros.leading_zeros() as usize; // >= 3
        let sub = ((micros >> (octave - 3)) & 7) as usize;
        (8 + (octave - 3) * 8 + sub).min(HOLD_BUCKETS - 1)
    }

    /// Exclusive upper bound of bucket `i`, in µs.
    fn upper(i: usize) -> u64 {
        if i < 8 {
            return i as u64 + 1;
        }
        let octave = (i - 8) / 8 + 3;
        let sub = ((i - 8) % 8) as u64;
        (8 + sub + 1) << (octave - 3)
    }

    pub fn record(&mut self, micros: u64) {
        self.buckets[Self::bucket(micros)] += 1;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Upper bound (µs) of the bucket holding quantile `q` (0..=1).
    pub fn quantile_upper_us(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let target = ((n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= target {
                return Self::upper(i);
            }
        }
        Self::upper(HOLD_BUCKETS - 1)
    }
}

/// Every counter of one engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counters {
    /// What arrived on and left by each port.
    pub inner: PortCounters,
    pub outer: PortCounters,
    /// Input packets passed on as they were (possibly with an MSS rewrite).
    pub forwarded: u64,
    /// Input TCP segments whose payload went into held merges.
    pub merged_in: u64,
    /// Merged segments sent to the inner port.
    pub merged_out: u64,
    /// GSO frames of inner-MSS pieces passed on from GRO super-packets
    /// without copying their payload ([`crate::Verdict::ForwardPart`]);
    /// each piece also counts in `merged_out`, the input in `merged_in`.
    pub merged_gso_out: u64,
    /// TCP data packets sent to the inner port (merged or not).
    pub inner_tcp_data_out: u64,
    /// ... of which carried exactly the inner MSS: the conversion yield's numerator.
    pub inner_tcp_full_out: u64,
    /// Input TCP segments cut into pieces in software. (A segment handed
    /// to the I/O layer with a segment size counts as forwarded and in
    /// `gso_out`, so that every input is counted exactly once.)
    pub split_in: u64,
    /// Pieces produced by software splits.
    pub split_out: u64,
    /// Super-packets handed to the I/O layer with a segment size (GSO).
    pub gso_out: u64,
    /// IPv4 packets fragmented, and fragments produced.
    pub fragmented_in: u64,
    pub fragments_out: u64,
    pub mss_raised: u64,
    pub mss_clamped: u64,
    pub syn_without_mss: u64,
    /// SYNs on an established connection that had not ended, passed on
    /// untouched without changing what the flow knows (RFC 5961 §4: the
    /// end host answers them with a challenge ACK).
    pub syns_ignored: u64,
    /// Connections whose inner host advertised an MSS no larger than the
    /// outer port's (`emtu` − 40, IPv6 − 60) although the inner port
    /// carries more: nothing from outside can be merged toward it, the
    /// connection is passed on untranslated. On a b-network of large-MTU
    /// hosts, the usual cause is a path MTU the host cached toward the
    /// peer after a "too big" (the gateway's own, for a non-TCP packet
    /// with DF set); see `docs/operations.md`.
    pub inner_mss_small: u64,
    /// Segments of TCP-MD5 / TCP-AO flows, passed on untouched (or given
    /// the router's treatment when too big).
    pub signed_passed: u64,
    /// Packets to or from a neighbour b-network with a verified iMTU
    /// (`crate::imtu`), passed on untouched: no merge, no split, no MSS
    /// rewrite, caravans unopened.
    pub imtu_passed: u64,
    /// Echo probes sent toward a destination of a verified neighbour to
    /// confirm that its own path carries the verified size
    /// (`crate::confirm`).
    pub imtu_probes: u64,
    /// Replies to those probes that arrived whole with their mark: the
    /// destination's packets pass untouched from then on.
    pub imtu_confirmed: u64,
    /// ICMP errors about those probes (a smaller hop on the way), taken by
    /// the gateway: the inner host whose address the probe bore did not
    /// send it.
    pub imtu_probe_errors: u64,
    pub pmtu_learned: u64,
    pub icmp_sent: u64,
    pub icmp_rate_limited: u64,
    pub icmp_no_source: u64,
    /// ICMP errors not sent because RFC 1812 §4.3.2.7 / RFC 4443 §2.4(e)
    /// forbid them (about an ICMP error, a non-first fragment, a multicast
    /// or broadcast destination, a source that is not a unicast host).
    pub icmp_suppressed: u64,
    /// ICMP "too big" not learned (RFC 5927): a bad checksum, a quote that
    /// is not TCP, no flow of this gateway, a sequence number outside the
    /// flow's window (or the flow's checks for this second spent,
    /// `ICMP_CHECKS_PER_SEC`), or an MTU not below the quoted packet's size.
    pub pmtu_ignored: u64,
    /// ICMP "too big" quoting a flow this worker does not carry, passed to
    /// the other workers to validate.
    pub pmtu_passed_on: u64,
    /// In-window "too big" errors waiting for a second one to confirm them
    /// (`PmtuReplica::confirm`): a blind guess passes once, not twice.
    pub pmtu_unconfirmed: u64,
    /// ICMP "too big" errors about TCP, taken by the gateway (learned from
    /// or not, as the counters above say) and not passed to the host they
    /// were addressed to: the gateway sizes every TCP packet it passes.
    pub pmtu_taken: u64,
    /// Segments with a bad TCP checksum, passed on unmerged (or, if too big
    /// for the egress, cut with every piece's checksum spoiled).
    pub bad_checksum: u64,
    /// Frames that are not IP (ARP, LLDP...), passed on.
    pub non_ip: u64,
    pub flows_created: u64,
    pub flows_evicted: u64,
    pub flows_expired: u64,
    pub flush: [u64; 10],
    pub drop: [u64; DropReason::ALL.len()],
    pub hold: HoldHistogram,
    /// PX-caravans built and opened (`docs/caravan.md`).
    pub caravan: CaravanCounters,
    /// Flows given to the kernel fast path and taken back (`crate::fast_path`).
    pub fast_path: FastPathCounters,
}

/// What the engine did with the kernel fast path. What the kernel carried
/// is counted here for flows that came back (`kernel_*`); the gateway adds
/// what it carries now from its own maps.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FastPathCounters {
    /// Flows installed in the kernel.
    pub installed: u64,
    /// Installs the datapath refused: its table was full, or it failed.
    pub table_full: u64,
    pub install_failed: u64,
    /// Flows handed back by the kernel, by reason (index:
    /// [`ReturnReason::ALL`](crate::fast_path::ReturnReason::ALL)).
    pub returned: [u64; 5],
    /// Flows taken back because a control segment (SYN, FIN, RST, URG)
    /// of theirs was read from a socket queue filled before the install.
    pub backlog: u64,
    /// Segments of flows in the kernel that reached user space without
    /// being handed back (read from a socket queue filled before the
    /// install: the handover's only reordering; or passed on by the kernel
    /// as a router would), forwarded as a router would.
    pub passed_on: u64,
    /// ICMP errors quoting a flow in the kernel, checked against windows
    /// read from it (the flow stays).
    pub icmp_catch_ups: u64,
    /// Reads of the inner host's window from the kernel, for flows whose
    /// outbound direction it carries (a segment from outside lay beyond
    /// the engine's copy; at most one a millisecond per flow).
    pub window_reads: u64,
    /// Flows the engine took back itself: a changed path MTU, a reload or
    /// stop, the flow leaving the table.
    pub reclaimed_pmtu: u64,
    pub reclaimed_config: u64,
    pub reclaimed_removed: u64,
    /// What the kernel carried for flows since taken back: packets
    /// (super-packets once), wire segments in and out, TCP payload bytes.
    pub kernel_packets: u64,
    pub kernel_segs_in: u64,
    pub kernel_segs_out: u64,
    pub kernel_bytes: u64,
    /// Data segments the kernel sent toward the inner port, and those of
    /// the full inner size (the yield's parts).
    pub kernel_data_in: u64,
    pub kernel_full_out: u64,
}

impl Counters {
    pub fn port(&self, p: Port) -> &PortCounters {
        match p {
            Port::Inner => &self.inner,
            Port::Outer => &self.outer,
        }
    }

    pub(crate) fn port_mut(&mut self, p: Port) -> &mut PortCounters {
        match p {
            Port::Inner => &mut self.inner,
            Port::Outer => &mut self.outer,
        }
    }

    /// One frame of `len` bytes received on `p`.
    pub(crate) fn count_rx(&mut self, p: Port, len: usize) {
        let pc = self.port_mut(p);
        pc.rx_packets += 1;
        pc.rx_bytes += len as u64;
    }

    /// One frame of `len` bytes sent out of `p`.
    pub(crate) fn count_tx(&mut self, p: Port, len: usize) {
        let pc = self.port_mut(p);
        pc.tx_packets += 1;
        pc.tx_bytes += len as u64;
    }

    pub fn flushes(&self, r: FlushReason) -> u64 {
        self.flush[r as usize]
    }

    pub fn drops(&self, r: DropReason) -> u64 {
        self.drop[r as usize]
    }

    pub fn total_drops(&self) -> u64 {
        self.drop.iter().sum()
    }

    /// Received packets accounted for, each exactly once: forwarded,
    /// merged, cut, fragmented, dropped by reason, packed into a caravan or
    /// opened as one. Equals `inner.rx_packets + outer.rx_packets`.
    pub fn received_accounted(&self) -> u64 {
        self.forwarded
            + self.merged_in
            + self.split_in
            + self.fragmented_in
            + self.total_drops()
            + self.caravan.packed_in
            + self.caravan.opened
            + self.pmtu_taken
    }

    /// The paper's conversion yield: the share of TCP data packets sent to
    /// the inner port whose payload is exactly the inner MSS, by the engine
    /// and by the kernel fast path for flows since taken back.
    pub fn conversion_yield(&self) -> f64 {
        let data = self.inner_tcp_data_out + self.fast_path.kernel_data_in;
        let full = self.inner_tcp_full_out + self.fast_path.kernel_full_out;
        if data == 0 { 0.0 } else { full as f64 / data as f64 }
    }

    /// Adds another engine's counters (for per-worker totals).
    pub fn accumulate(&mut self, o: &Counters) {
        for (a, b) in [(&mut self.inner, &o.inner), (&mut self.outer, &o.outer)] {
            a.rx_packets += b.rx_packets;
            a.rx_bytes += b.rx_bytes;
            a.tx_packets += b.tx_packets;
            a.tx_bytes += b.tx_bytes;
        }
        let pairs: [(&mut u64, u64); 35] = [
            (&mut self.forwarded, o.forwarded),
            (&mut self.merged_in, o.merged_in),
            (&mut self.merged_out, o.merged_out),
            (&mut self.merged_gso_out, o.merged_gso_out),
            (&mut self.inner_tcp_data_out, o.inner_tcp_data_out),
            (&mut self.inner_tcp_full_out, o.inner_tcp_full_out),
            (&mut self.split_in, o.split_in),
            (&mut self.split_out, o.split_out),
            (&mut self.gso_out, o.gso_out),
            (&mut self.fragmented_in, o.fragmented_in),
            (&mut self.fragments_out, o.fragments_out),
            (&mut self.mss_raised, o.mss_raised),
            (&mut self.mss_clamped, o.mss_clamped),
            (&mut self.syn_without_mss, o.syn_without_mss),
            (&mut self.syns_ignored, o.syns_ignored),
            (&mut self.inner_mss_small, o.inner_mss_small),
            (&mut self.signed_passed, o.signed_passed),
            (&mut self.imtu_passed, o.imtu_passed),
            (&mut self.imtu_probes, o.imtu_probes),
            (&mut self.imtu_confirmed, o.imtu_confirmed),
            (&mut self.imtu_probe_errors, o.imtu_probe_errors),
            (&mut self.pmtu_learned, o.pmtu_learned),
            (&mut self.icmp_sent, o.icmp_sent),
            (&mut self.icmp_rate_limited, o.icmp_rate_limited),
            (&mut self.icmp_no_source, o.icmp_no_source),
            (&mut self.icmp_suppressed, o.icmp_suppressed),
            (&mut self.pmtu_ignored, o.pmtu_ignored),
            (&mut self.pmtu_passed_on, o.pmtu_passed_on),
            (&mut self.pmtu_unconfirmed, o.pmtu_unconfirmed),
            (&mut self.pmtu_taken, o.pmtu_taken),
            (&mut self.bad_checksum, o.bad_checksum),
            (&mut self.non_ip, o.non_ip),
            (&mut self.flows_created, o.flows_created),
            (&mut self.flows_evicted, o.flows_evicted),
            (&mut self.flows_expired, o.flows_expired),
        ];
        for (a, b) in pairs {
            *a += b;
        }
        for (a, b) in self.flush.iter_mut().zip(o.flush) {
            *a += b;
        }
        for (a, b) in self.drop.iter_mut().zip(o.drop) {
            *a += b;
        }
        for (a, b) in self.hold.buckets.iter_mut().zip(o.hold.buckets) {
            *a += b;
        }
        self.caravan.accumulate(&o.caravan);
        self.fast_path.accumulate(&o.fast_path);
    }
}

impl FastPathCounters {
    /// Adds another engine's counters to these.
    pub fn accumulate(&mut self, o: &FastPathCounters) {
        let pairs: [(&mut u64, u64); 16] = [
            (&mut self.installed, o.installed),
            (&mut self.table_full, o.table_full),
            (&mut self.install_failed, o.install_failed),
            (&mut self.backlog, o.backlog),
            (&mut self.passed_on, o.passed_on),
            (&mut self.icmp_catch_ups, o.icmp_catch_ups),
            (&mut self.window_reads, o.window_reads),
            (&mut self.reclaimed_pmtu, o.reclaimed_pmtu),
            (&mut self.reclaimed_config, o.reclaimed_config),
            (&mut self.reclaimed_removed, o.reclaimed_removed),
            (&mut self.kernel_packets, o.kernel_packets),
            (&mut self.kernel_segs_in, o.kernel_segs_in),
            (&mut self.kernel_segs_out, o.kernel_segs_out),
            (&mut self.kernel_bytes, o.kernel_bytes),
            (&mut self.kernel_full_out, o.kernel_full_out),
            (&mut self.kernel_data_in, o.kernel_data_in),
        ];
        for (a, b) in pairs {
            *a += b;
        }
        for (a, b) in self.returned.iter_mut().zip(o.returned) {
            *a += b;
        }
    }
}

/// What the engine counts about caravans.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CaravanCounters {
    /// Inbound datagrams packed into caravans (those sent alone included).
    pub packed_in: u64,
    /// Caravans sent to the inner port (two datagrams or more).
    pub built: u64,
    /// ... of which were full: the next datagram of the flow's last size
    /// would not have fitted the iMTU. The caravan yield's numerator.
    pub built_full: u64,
    /// Datagrams in the caravans built (datagrams per caravan = this / built).
    pub built_datagrams: u64,
    /// Holds that ended with one datagram, sent plain.
    pub singles: u64,
    /// Holds sent because the merge timeout expired.
    pub timeouts: u64,
    /// Holds sent early because a datagram's headers did not match (TTL,
    /// TOS, DF, IPv4 ID out of sequence) or it could not be packed.
    pub mismatches: u64,
    /// Holds sent early for memory or table bounds.
    pub pressure: u64,
    /// Inbound plain datagrams toward caravan-capable hosts whose DSCP was
    /// the caravan codepoint, remarked to 0 (RFC 2474 §6: a boundary node
    /// re-marks codepoints it does not honour).
    pub remarked: u64,
    /// Outbound caravans unpacked, and datagrams they gave.
    pub opened: u64,
    pub opened_datagrams: u64,
    /// Datagrams of opened caravans too big for the egress (eMTU or learned
    /// path MTU), given the router's treatment: IPv4 without DF fragmented
    /// (the fragments count in `fragments_out`) ...
    pub too_big_fragmented: u64,
    /// ... anything else dropped, with an ICMP "fragmentation needed" /
    /// "packet too big" back to the inner host where one is allowed. These
    /// are datagrams, not received packets: their caravan is counted once,
    /// in `opened`, and they count neither in `fragmented_in` nor in `drop`.
    pub too_big_dropped: u64,
    /// Outbound caravans dropped whole, by [`Malformed`] reason.
    pub malformed: [u64; 6],
}

impl CaravanCounters {
    /// Share of built caravans that were full (the paper's yield, for UDP).
    pub fn caravan_yield(&self) -> f64 {
        if self.built == 0 { 0.0 } else { self.built_full as f64 / self.built as f64 }
    }

    /// Mean datagrams per caravan built.
    pub fn datagrams_per_caravan(&self) -> f64 {
        if self.built == 0 { 0.0 } else { self.built_datagrams as f64 / self.built as f64 }
    }

    pub fn malformed(&self, r: Malformed) -> u64 {
        self.malformed[r as usize]
    }

    pub fn accumulate(&mut self, o: &CaravanCounters) {
        let pairs: [(&mut u64, u64); 13] = [
            (&mut self.packed_in, o.packed_in),
            (&mut self.built, o.built),
            (&mut self.built_full, o.built_full),
            (&mut self.built_datagrams, o.built_datagrams),
            (&mut self.singles, o.singles),
            (&mut self.timeouts, o.timeouts),
            (&mut self.mismatches, o.mismatches),
            (&mut self.pressure, o.pressure),
            (&mut self.remarked, o.remarked),
            (&mut self.opened, o.opened),
            (&mut self.opened_datagrams, o.opened_datagrams),
            (&mut self.too_big_fragmented, o.too_big_fragmented),
            (&mut self.too_big_dropped, o.too_big_dropped),
        ];
        for (a, b) in pairs {
            *a += b;
        }
        for (a, b) in self.malformed.iter_mut().zip(o.malformed) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles() {
        let mut h = HoldHistogram::default();
        for _ in 0..99 {
            h.record(10);
        }
        h.record(900);
        assert_eq!(h.quantile_upper_us(0.5), 11);
        assert_eq!(h.quantile_upper_us(0.99), 11);
        assert_eq!(h.quantile_upper_us(1.0), 960);
        for v in [0u64, 7, 8, 9, 15, 16, 100, 199, 200, 1000, 123_456] {
            let b = HoldHistogram::bucket(v);
            let up = HoldHistogram::upper(b);
            assert!(v < up, "{v} < {up}");
            assert!(up as f64 <= (v as f64) * 1.125 + 1.0, "{v}: bound {up} too loose");
            if b > 0 {
                assert!(HoldHistogram::upper(b - 1) <= v, "{v} in bucket {b}");
            }
        }
    }

    #[test]
    fn yield_is_share_of_full() {
        let c = Counters { inner_tcp_data_out: 10, inner_tcp_full_out: 9, ..Counters::default() };
        assert!((c.conversion_yield() - 0.9).abs() < 1e-12);
        assert_eq!(Counters::default().conversion_yield(), 0.0);
    }

    #[test]
    fn accumulate_adds() {
        let mut a = Counters { merged_out: 1, ..Counters::default() };
        a.drop[0] = 2;
        let b = a.clone();
        a.accumulate(&b);
        assert_eq!(a.merged_out, 2);
        assert_eq!(a.drop[0], 4);
    }
}
