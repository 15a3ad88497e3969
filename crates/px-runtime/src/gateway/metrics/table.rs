//! Every metric family the gateway exports, as a table: its name, type,
//! help, the engine counters it shows, and how its samples are made from a
//! [`Scrape`]. The renderer walks [`FAMILIES`] in order, and so do the
//! tests that check that every engine counter is exported exactly once,
//! that `docs/metrics.md` lists every family, and that the Grafana
//! dashboard (`contrib/grafana/px-gateway.json`) asks only for exported
//! names.

use px_gateway::{Counters, DropReason, FlushReason, HoldHistogram, Port};

use super::snapshot::{ReloadResult, Scrape, WorkerSnapshot};

/// Prometheus metric types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Samples of one family: (labels without braces, value).
pub(super) type Rows = Vec<(String, f64)>;

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// The engine counters it shows: paths in the serialized
    /// [`px_gateway::Counters`] (`inner.rx_packets`, `flush`, ...). Empty
    /// for what is not an engine counter.
    pub counters: &'static [&'static str],
    pub(super) rows: fn(&Scrape) -> Rows,
}

impl Family {
    /// The sample names the family writes (a histogram writes three).
    pub fn sample_names(&self) -> Vec<String> {
        match self.kind {
            Kind::Histogram => ["_bucket", "_sum", "_count"].iter().map(|s| format!("{}{s}", self.name)).collect(),
            _ => vec![self.name.to_string()],
        }
    }
}

/// One row per worker, labelled `worker`.
fn per_worker(s: &Scrape, f: impl Fn(&WorkerSnapshot) -> u64) -> Rows {
    s.workers.iter().enumerate().map(|(i, w)| (format!("worker=\"{i}\""), f(w) as f64)).collect()
}

/// An engine counter per worker.
fn counter(s: &Scrape, f: fn(&Counters) -> u64) -> Rows {
    per_worker(s, |w| f(&w.counters))
}

/// Rows per worker and a label of `label` taking each (name, value) `f` gives.
fn per_worker_by(s: &Scrape, label: &str, f: impl Fn(&WorkerSnapshot) -> Vec<(&'static str, u64)>) -> Rows {
    let mut rows = Vec::new();
    for (i, w) in s.workers.iter().enumerate() {
        for (name, v) in f(w) {
            rows.push((format!("worker=\"{i}\",{label}=\"{name}\""), v as f64));
        }
    }
    rows
}

/// One row per port from values by `Port as usize`.
fn by_port(v: [u64; 2]) -> Rows {
    [("inner", Port::Inner), ("outer", Port::Outer)]
        .iter()
        .map(|(name, p)| (format!("port=\"{name}\""), v[*p as usize] as f64))
        .collect()
}

/// Rows per worker, port and direction from a port's (rx, tx) pair.
fn per_port(s: &Scrape, f: impl Fn(&WorkerSnapshot, Port) -> (u64, u64)) -> Rows {
    let mut rows = Vec::new();
    for (i, w) in s.workers.iter().enumerate() {
        for (name, port) in [("inner", Port::Inner), ("outer", Port::Outer)] {
            let (rx, tx) = f(w, port);
            rows.push((format!("worker=\"{i}\",port=\"{name}\",direction=\"rx\""), rx as f64));
            rows.push((format!("worker=\"{i}\",port=\"{name}\",direction=\"tx\""), tx as f64));
        }
    }
    rows
}

/// Wire counts per worker, port and direction, and the kernel fast path's
/// (labelled `worker="kernel"`) when it is attached: together, each
/// port's device counts.
fn wire_rows(s: &Scrape, f: fn(&px_gateway::PortCounters) -> (u64, u64)) -> Rows {
    let mut rows = per_port(s, |w, p| f(w.wire(p)));
    if let Some(k) = &s.kernel {
        for (name, port) in [("inner", Port::Inner), ("outer", Port::Outer)] {
            let (rx, tx) = f(&k.ports[port as usize]);
            rows.push((format!("worker=\"kernel\",port=\"{name}\",direction=\"rx\""), rx as f64));
            rows.push((format!("worker=\"kernel\",port=\"{name}\",direction=\"tx\""), tx as f64));
        }
    }
    rows
}

fn single(v: f64) -> Rows {
    vec![(String::new(), v)]
}

/// `part / whole` as one sample; none while `whole` is 0 (a yield of 0
/// with no traffic would read as the worst yield, not as no data).
fn ratio(part: u64, whole: u64) -> Rows {
    if whole == 0 { Vec::new() } else { single(part as f64 / whole as f64) }
}

/// Upper bounds (µs) of the hold-time histogram's `le` buckets: powers of
/// two from 1 µs to 16 ms (the merge timeout is at most 10 ms).
const HOLD_LE_US: [u64; 15] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

/// Cumulative `le` rows of the engine's hold histogram (log-linear, see
/// [`px_gateway::HoldHistogram`]; each bound above is one of its bucket
/// edges, so a count is exact for the whole microseconds below its bound).
/// The engine keeps no sum of hold times: `_sum` is an upper estimate,
/// each hold counted at the `le` bound above it (twice the last bound
/// beyond it).
fn hold_rows(s: &Scrape) -> Rows {
    // The bucket a value falls in, as the engine files it.
    let bucket_of = |us: u64| {
        let mut h = HoldHistogram::default();
        h.record(us);
        h.buckets.iter().position(|&c| c > 0).unwrap_or(0)
    };
    let mut rows = Vec::new();
    for (i, w) in s.workers.iter().enumerate() {
        let b = &w.counters.hold.buckets;
        let count = w.counters.hold.count();
        let (mut below, mut sum_us) = (0u64, 0u64);
        for le in HOLD_LE_US {
            let n: u64 = b[..=bucket_of(le - 1)].iter().sum();
            sum_us += (n - below) * le;
            below = n;
            rows.push((format!("_bucket|worker=\"{i}\",le=\"{}\"", le as f64 / 1e6), n as f64));
        }
        sum_us += (count - below) * 2 * HOLD_LE_US[HOLD_LE_US.len() - 1];
        rows.push((format!("_bucket|worker=\"{i}\",le=\"+Inf\""), count as f64));
        rows.push((format!("_sum|worker=\"{i}\""), sum_us as f64 / 1e6));
        rows.push((format!("_count|worker=\"{i}\""), count as f64));
    }
    rows
}

use Kind::{Counter, Gauge, Histogram};

/// One unlabelled sample if `v` was read.
fn maybe(v: Option<f64>) -> Rows {
    v.map(single).unwrap_or_default()
}

/// Every family the gateway exports, in the order rendered.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "px_build_info",
        kind: Gauge,
        help: "Always 1; the px version the gateway runs, as a label.",
        counters: &[],
        rows: |_| vec![(format!("version=\"{}\"", super::process::VERSION), 1.0)],
    },
    Family {
        name: "px_gateway_packets_total",
        kind: Counter,
        help: "Frames on the wire received (direction rx) and sent (tx), per worker and port: a GRO or GSO super-packet counts as its segments, as ip -s link counts them; worker=\"kernel\": what the kernel fast path redirected (the sum over workers is the device's count).",
        counters: &[],
        rows: |s| wire_rows(s, |c| (c.rx_packets, c.tx_packets)),
    },
    Family {
        name: "px_gateway_bytes_total",
        kind: Counter,
        help: "Bytes on the wire (Ethernet header included, no FCS) received (direction rx) and sent (tx), per worker and port, as ip -s link counts them; worker=\"kernel\": what the kernel fast path redirected.",
        counters: &[],
        rows: |s| wire_rows(s, |c| (c.rx_bytes, c.tx_bytes)),
    },
    Family {
        name: "px_gateway_super_packets_total",
        kind: Counter,
        help: "Frames the gateway's packet sockets received (rx) and the engine sent (tx), per worker and port: a GRO or GSO super-packet counts once.",
        counters: &["inner.rx_packets", "inner.tx_packets", "outer.rx_packets", "outer.tx_packets"],
        rows: |s| per_port(s, |w, p| (w.counters.port(p).rx_packets, w.counters.port(p).tx_packets)),
    },
    Family {
        name: "px_gateway_super_packet_bytes_total",
        kind: Counter,
        help: "Bytes of the frames counted by px_gateway_super_packets_total (each super-packet's headers once).",
        counters: &["inner.rx_bytes", "inner.tx_bytes", "outer.rx_bytes", "outer.tx_bytes"],
        rows: |s| per_port(s, |w, p| (w.counters.port(p).rx_bytes, w.counters.port(p).tx_bytes)),
    },
    Family {
        name: "px_gateway_forwarded_total",
        kind: Counter,
        help: "Input packets passed on as they came (an MSS rewrite aside).",
        counters: &["forwarded"],
        rows: |s| counter(s, |c| c.forwarded),
    },
    Family {
        name: "px_gateway_conversion_yield_ratio",
        kind: Gauge,
        help: "Share of TCP data packets sent to the inner port that carry exactly the inner MSS (all workers); no sample before the first.",
        counters: &[],
        rows: |s| ratio(s.total.counters.inner_tcp_full_out, s.total.counters.inner_tcp_data_out),
    },
    Family {
        name: "px_gateway_merged_in_total",
        kind: Counter,
        help: "Input segments merged into held segments.",
        counters: &["merged_in"],
        rows: |s| counter(s, |c| c.merged_in),
    },
    Family {
        name: "px_gateway_merged_out_total",
        kind: Counter,
        help: "Merged segments sent to the inner port.",
        counters: &["merged_out"],
        rows: |s| counter(s, |c| c.merged_out),
    },
    Family {
        name: "px_gateway_merged_gso_out_total",
        kind: Counter,
        help: "GSO frames of inner-MSS pieces passed on from GRO super-packets without copying their payload.",
        counters: &["merged_gso_out"],
        rows: |s| counter(s, |c| c.merged_gso_out),
    },
    Family {
        name: "px_gateway_inner_tcp_data_out_total",
        kind: Counter,
        help: "TCP data packets sent to the inner port (the conversion yield's denominator).",
        counters: &["inner_tcp_data_out"],
        rows: |s| counter(s, |c| c.inner_tcp_data_out),
    },
    Family {
        name: "px_gateway_inner_tcp_full_out_total",
        kind: Counter,
        help: "TCP data packets sent to the inner port with exactly the inner MSS (the yield's numerator).",
        counters: &["inner_tcp_full_out"],
        rows: |s| counter(s, |c| c.inner_tcp_full_out),
    },
    Family {
        name: "px_gateway_split_in_total",
        kind: Counter,
        help: "Segments cut in software.",
        counters: &["split_in"],
        rows: |s| counter(s, |c| c.split_in),
    },
    Family {
        name: "px_gateway_split_out_total",
        kind: Counter,
        help: "Pieces produced by software splits.",
        counters: &["split_out"],
        rows: |s| counter(s, |c| c.split_out),
    },
    Family {
        name: "px_gateway_gso_out_total",
        kind: Counter,
        help: "Super-packets handed to the kernel with a segment size (GSO).",
        counters: &["gso_out"],
        rows: |s| counter(s, |c| c.gso_out),
    },
    Family {
        name: "px_gateway_fragmented_in_total",
        kind: Counter,
        help: "IPv4 packets fragmented.",
        counters: &["fragmented_in"],
        rows: |s| counter(s, |c| c.fragmented_in),
    },
    Family {
        name: "px_gateway_fragments_out_total",
        kind: Counter,
        help: "IPv4 fragments produced.",
        counters: &["fragments_out"],
        rows: |s| counter(s, |c| c.fragments_out),
    },
    Family {
        name: "px_gateway_mss_raised_total",
        kind: Counter,
        help: "SYN MSS options raised (inbound).",
        counters: &["mss_raised"],
        rows: |s| counter(s, |c| c.mss_raised),
    },
    Family {
        name: "px_gateway_mss_clamped_total",
        kind: Counter,
        help: "SYN MSS options clamped (outbound).",
        counters: &["mss_clamped"],
        rows: |s| counter(s, |c| c.mss_clamped),
    },
    Family {
        name: "px_gateway_syn_without_mss_total",
        kind: Counter,
        help: "SYNs without an MSS option (left alone).",
        counters: &["syn_without_mss"],
        rows: |s| counter(s, |c| c.syn_without_mss),
    },
    Family {
        name: "px_gateway_inner_mss_small_total",
        kind: Counter,
        help: "Connections not translated: the inner host advertised an MSS no larger than the outer port's (a cached path MTU?).",
        counters: &["inner_mss_small"],
        rows: |s| counter(s, |c| c.inner_mss_small),
    },
    Family {
        name: "px_gateway_syns_ignored_total",
        kind: Counter,
        help: "SYNs on live connections passed untouched (RFC 5961).",
        counters: &["syns_ignored"],
        rows: |s| counter(s, |c| c.syns_ignored),
    },
    Family {
        name: "px_gateway_signed_passed_total",
        kind: Counter,
        help: "TCP-MD5/AO segments passed untouched.",
        counters: &["signed_passed"],
        rows: |s| counter(s, |c| c.signed_passed),
    },
    Family {
        name: "px_gateway_imtu_passed_total",
        kind: Counter,
        help: "Packets to or from a neighbour b-network with a verified iMTU, passed untouched.",
        counters: &["imtu_passed"],
        rows: |s| counter(s, |c| c.imtu_passed),
    },
    Family {
        name: "px_gateway_imtu_probes_total",
        kind: Counter,
        help: "Echo probes sent to confirm that a verified neighbour's destination carries the verified size.",
        counters: &["imtu_probes"],
        rows: |s| counter(s, |c| c.imtu_probes),
    },
    Family {
        name: "px_gateway_imtu_confirmed_total",
        kind: Counter,
        help: "Probe replies that arrived whole with their mark: the destination passes untouched.",
        counters: &["imtu_confirmed"],
        rows: |s| counter(s, |c| c.imtu_confirmed),
    },
    Family {
        name: "px_gateway_imtu_probe_errors_total",
        kind: Counter,
        help: "ICMP errors about the gateway's own probes, taken (not passed to the inner host).",
        counters: &["imtu_probe_errors"],
        rows: |s| counter(s, |c| c.imtu_probe_errors),
    },
    Family {
        name: "px_gateway_pmtu_learned_total",
        kind: Counter,
        help: "Path MTUs learned from ICMP.",
        counters: &["pmtu_learned"],
        rows: |s| counter(s, |c| c.pmtu_learned),
    },
    Family {
        name: "px_gateway_pmtu_ignored_total",
        kind: Counter,
        help: "ICMP too-big errors not believed (RFC 5927).",
        counters: &["pmtu_ignored"],
        rows: |s| counter(s, |c| c.pmtu_ignored),
    },
    Family {
        name: "px_gateway_pmtu_passed_on_total",
        kind: Counter,
        help: "ICMP too-big errors passed to the other workers.",
        counters: &["pmtu_passed_on"],
        rows: |s| counter(s, |c| c.pmtu_passed_on),
    },
    Family {
        name: "px_gateway_pmtu_unconfirmed_total",
        kind: Counter,
        help: "In-window ICMP too-big errors held until a second one confirms them.",
        counters: &["pmtu_unconfirmed"],
        rows: |s| counter(s, |c| c.pmtu_unconfirmed),
    },
    Family {
        name: "px_gateway_pmtu_taken_total",
        kind: Counter,
        help: "ICMP too-big errors about TCP taken by the gateway, not passed to the host.",
        counters: &["pmtu_taken"],
        rows: |s| counter(s, |c| c.pmtu_taken),
    },
    Family {
        name: "px_gateway_icmp_suppressed_total",
        kind: Counter,
        help: "ICMP errors RFC 1812/4443 forbid, not sent.",
        counters: &["icmp_suppressed"],
        rows: |s| counter(s, |c| c.icmp_suppressed),
    },
    Family {
        name: "px_gateway_icmp_errors_total",
        kind: Counter,
        help: "ICMP errors the gateway owed: sent, or not sent (rate_limited, no_source address configured).",
        counters: &["icmp_sent", "icmp_rate_limited", "icmp_no_source"],
        rows: |s| {
            per_worker_by(s, "result", |w| {
                let c = &w.counters;
                vec![("sent", c.icmp_sent), ("rate_limited", c.icmp_rate_limited), ("no_source", c.icmp_no_source)]
            })
        },
    },
    Family {
        name: "px_gateway_bad_checksum_total",
        kind: Counter,
        help: "Segments with bad TCP checksums passed unmerged.",
        counters: &["bad_checksum"],
        rows: |s| counter(s, |c| c.bad_checksum),
    },
    Family {
        name: "px_gateway_non_ip_total",
        kind: Counter,
        help: "Frames that are not IP (ARP, LLDP...), passed on.",
        counters: &["non_ip"],
        rows: |s| counter(s, |c| c.non_ip),
    },
    Family {
        name: "px_gateway_flows_created_total",
        kind: Counter,
        help: "Flows the engine started tracking.",
        counters: &["flows_created"],
        rows: |s| counter(s, |c| c.flows_created),
    },
    Family {
        name: "px_gateway_flows_removed_total",
        kind: Counter,
        help: "Flows forgotten (their held data sent), by reason: evicted (table full) or expired (idle).",
        counters: &["flows_evicted", "flows_expired"],
        rows: |s| {
            per_worker_by(s, "reason", |w| {
                vec![("evicted", w.counters.flows_evicted), ("expired", w.counters.flows_expired)]
            })
        },
    },
    Family {
        name: "px_gateway_flushes_total",
        kind: Counter,
        help: "Held segments sent before they were full, by reason (shutdown: at exit or on a configuration reload).",
        counters: &["flush"],
        rows: |s| per_worker_by(s, "reason", |w| FlushReason::ALL.map(|r| (r.name(), w.counters.flushes(r))).to_vec()),
    },
    Family {
        name: "px_gateway_drops_total",
        kind: Counter,
        help: "Packets dropped, by reason (a router's drops only).",
        counters: &["drop"],
        rows: |s| per_worker_by(s, "reason", |w| DropReason::ALL.map(|r| (r.name(), w.counters.drops(r))).to_vec()),
    },
    Family {
        name: "px_gateway_hold_seconds",
        kind: Histogram,
        help: "How long held data (TCP merges, caravans) waited before it was sent; _sum is an upper estimate.",
        counters: &["hold.buckets"],
        rows: hold_rows,
    },
    Family {
        name: "px_gateway_caravan_packed_in_total",
        kind: Counter,
        help: "Inbound datagrams packed into caravans (those sent alone included).",
        counters: &["caravan.packed_in"],
        rows: |s| counter(s, |c| c.caravan.packed_in),
    },
    Family {
        name: "px_gateway_caravans_built_total",
        kind: Counter,
        help: "Caravans (two datagrams or more) sent to the inner port.",
        counters: &["caravan.built"],
        rows: |s| counter(s, |c| c.caravan.built),
    },
    Family {
        name: "px_gateway_caravans_built_full_total",
        kind: Counter,
        help: "Caravans built full (the caravan yield's numerator).",
        counters: &["caravan.built_full"],
        rows: |s| counter(s, |c| c.caravan.built_full),
    },
    Family {
        name: "px_gateway_caravan_datagrams_built_total",
        kind: Counter,
        help: "Datagrams in the caravans built.",
        counters: &["caravan.built_datagrams"],
        rows: |s| counter(s, |c| c.caravan.built_datagrams),
    },
    Family {
        name: "px_gateway_caravan_singles_total",
        kind: Counter,
        help: "Caravan holds that ended with one datagram, sent plain.",
        counters: &["caravan.singles"],
        rows: |s| counter(s, |c| c.caravan.singles),
    },
    Family {
        name: "px_gateway_caravan_flushes_total",
        kind: Counter,
        help: "Caravan holds sent before they were full, by reason.",
        counters: &["caravan.timeouts", "caravan.mismatches", "caravan.pressure"],
        rows: |s| {
            per_worker_by(s, "reason", |w| {
                let c = &w.counters.caravan;
                vec![("timeout", c.timeouts), ("mismatch", c.mismatches), ("pressure", c.pressure)]
            })
        },
    },
    Family {
        name: "px_gateway_caravan_remarked_total",
        kind: Counter,
        help: "Inbound plain datagrams carrying the caravan DSCP, remarked to 0.",
        counters: &["caravan.remarked"],
        rows: |s| counter(s, |c| c.caravan.remarked),
    },
    Family {
        name: "px_gateway_caravans_opened_total",
        kind: Counter,
        help: "Outbound caravans unpacked.",
        counters: &["caravan.opened"],
        rows: |s| counter(s, |c| c.caravan.opened),
    },
    Family {
        name: "px_gateway_caravan_datagrams_opened_total",
        kind: Counter,
        help: "Datagrams from the caravans unpacked.",
        counters: &["caravan.opened_datagrams"],
        rows: |s| counter(s, |c| c.caravan.opened_datagrams),
    },
    Family {
        name: "px_gateway_caravan_datagrams_too_big_total",
        kind: Counter,
        help: "Datagrams of unpacked caravans too big for the outside, fragmented or dropped (ICMP sent) as a router would.",
        counters: &["caravan.too_big_fragmented", "caravan.too_big_dropped"],
        rows: |s| {
            per_worker_by(s, "result", |w| {
                let c = &w.counters.caravan;
                vec![("fragmented", c.too_big_fragmented), ("dropped", c.too_big_dropped)]
            })
        },
    },
    Family {
        name: "px_gateway_caravan_yield_ratio",
        kind: Gauge,
        help: "Share of caravans built that were full (all workers); no sample before the first.",
        counters: &[],
        rows: |s| ratio(s.total.counters.caravan.built_full, s.total.counters.caravan.built),
    },
    Family {
        name: "px_gateway_caravans_malformed_total",
        kind: Counter,
        help: "Outbound caravans dropped whole, by reason.",
        counters: &["caravan.malformed"],
        rows: |s| {
            per_worker_by(s, "reason", |w| {
                px_wire::caravan::Malformed::ALL.map(|r| (r.name(), w.counters.caravan.malformed(r))).to_vec()
            })
        },
    },
    Family {
        name: "px_gateway_held_bytes",
        kind: Gauge,
        help: "Payload bytes held now.",
        counters: &[],
        rows: |s| per_worker(s, |w| w.held_bytes as u64),
    },
    Family {
        name: "px_gateway_flows",
        kind: Gauge,
        help: "Flows tracked now.",
        counters: &[],
        rows: |s| per_worker(s, |w| w.flows as u64),
    },
    Family {
        name: "px_gateway_socket_drops_total",
        kind: Counter,
        help: "Frames the kernel dropped on the gateway's sockets.",
        counters: &[],
        rows: |s| per_worker(s, |w| w.socket_drops),
    },
    Family {
        name: "px_gateway_send_errors_total",
        kind: Counter,
        help: "Frames that could not be sent.",
        counters: &[],
        rows: |s| per_worker(s, |w| w.send_errors),
    },
    Family {
        name: "px_gateway_rx_errors_total",
        kind: Counter,
        help: "Frames received truncated or with a bad vnet header.",
        counters: &[],
        rows: |s| per_worker(s, |w| w.rx_errors),
    },
    Family {
        name: "px_gateway_merge_timeout_seconds",
        kind: Gauge,
        help: "The merge timeout each worker's engine runs with now (changes on a reload).",
        counters: &[],
        rows: |s| {
            s.workers
                .iter()
                .enumerate()
                .map(|(i, w)| (format!("worker=\"{i}\""), w.merge_timeout_us as f64 / 1e6))
                .collect()
        },
    },
    Family {
        name: "px_gateway_config_reloads_total",
        kind: Counter,
        help: "Configuration reloads (SIGHUP), by result: applied, refused (a field that cannot change live), invalid.",
        counters: &[],
        rows: |s| {
            ReloadResult::ALL
                .iter()
                .map(|r| (format!("result=\"{}\"", r.name()), s.reloads[*r as usize] as f64))
                .collect()
        },
    },
    Family {
        name: "px_gateway_carrier_lost_total",
        kind: Counter,
        help: "Times a port lost its carrier (looked at every 20 ms; a port held down by link-fault pass-through or taken down by an operator does not count).",
        counters: &[],
        rows: |s| by_port(s.link.carrier_lost),
    },
    Family {
        name: "px_gateway_link_fault_pass_through_total",
        kind: Counter,
        help: "Times link-fault pass-through took a port down because the other one lost its carrier ([link_fault] pass_through).",
        counters: &[],
        rows: |s| by_port(s.link.pass_through),
    },
    Family {
        name: "px_gateway_link_fault_held_down",
        kind: Gauge,
        help: "1 while link-fault pass-through holds a port down.",
        counters: &[],
        rows: |s| by_port(s.link.held_down),
    },
    Family {
        name: "process_cpu_seconds_total",
        kind: Counter,
        help: "Total user and system CPU time spent in seconds.",
        counters: &[],
        rows: |s| maybe(s.process.cpu_seconds),
    },
    Family {
        name: "process_resident_memory_bytes",
        kind: Gauge,
        help: "Resident memory size in bytes.",
        counters: &[],
        rows: |s| maybe(s.process.resident_bytes.map(|v| v as f64)),
    },
    Family {
        name: "process_virtual_memory_bytes",
        kind: Gauge,
        help: "Virtual memory size in bytes.",
        counters: &[],
        rows: |s| maybe(s.process.virtual_bytes.map(|v| v as f64)),
    },
    Family {
        name: "process_start_time_seconds",
        kind: Gauge,
        help: "Start time of the process since unix epoch in seconds.",
        counters: &[],
        rows: |s| maybe(s.process.start_time_seconds),
    },
    Family {
        name: "process_open_fds",
        kind: Gauge,
        help: "Number of open file descriptors.",
        counters: &[],
        rows: |s| maybe(s.process.open_fds.map(|v| v as f64)),
    },
    Family {
        name: "process_max_fds",
        kind: Gauge,
        help: "Maximum number of open file descriptors.",
        counters: &[],
        rows: |s| maybe(s.process.max_fds.map(|v| v as f64)),
    },
    Family {
        name: "process_threads",
        kind: Gauge,
        help: "Number of OS threads in the process.",
        counters: &[],
        rows: |s| maybe(s.process.threads.map(|v| v as f64)),
    },
    Family {
        name: "px_capture_records_total",
        kind: Counter,
        help: "Packets written to the capture file (--capture).",
        counters: &[],
        rows: |s| single(s.capture_written as f64),
    },
    Family {
        name: "px_capture_dropped_total",
        kind: Counter,
        help: "Capture records given up (never the packets), by reason: queue_full, write_error.",
        counters: &[],
        rows: |s| {
            vec![
                ("reason=\"queue_full\"".to_string(), s.total.capture_dropped as f64),
                ("reason=\"write_error\"".to_string(), s.capture_write_errors as f64),
            ]
        },
    },
    Family {
        name: "px_gateway_fast_path_flows",
        kind: Gauge,
        help: "Flows the kernel fast path carries now (in one direction or both).",
        counters: &[],
        rows: |s| per_worker(s, |w| w.in_kernel as u64),
    },
    Family {
        name: "px_gateway_fast_path_installs_total",
        kind: Counter,
        help: "Flows (or directions of one) given to the kernel fast path, by result: installed, table_full, failed.",
        counters: &["fast_path.installed", "fast_path.table_full", "fast_path.install_failed"],
        rows: |s| {
            per_worker_by(s, "result", |w| {
                let f = &w.counters.fast_path;
                vec![("installed", f.installed), ("table_full", f.table_full), ("failed", f.install_failed)]
            })
        },
    },
    Family {
        name: "px_gateway_fast_path_returns_total",
        kind: Counter,
        help: "Directions the kernel handed back to user space, by reason (flags, options, lone, small, adjust, other).",
        counters: &["fast_path.returned"],
        rows: |s| {
            per_worker_by(s, "reason", |w| {
                px_gateway::fast_path::ReturnReason::ALL
                    .iter()
                    .map(|r| (r.name(), w.counters.fast_path.returned[*r as usize]))
                    .collect()
            })
        },
    },
    Family {
        name: "px_gateway_fast_path_reclaims_total",
        kind: Counter,
        help: "Flows the engine took back from the kernel itself, by reason: path_mtu, config, removed, backlog (a control segment read from a queue filled before the install).",
        counters: &[
            "fast_path.reclaimed_pmtu",
            "fast_path.reclaimed_config",
            "fast_path.reclaimed_removed",
            "fast_path.backlog",
        ],
        rows: |s| {
            per_worker_by(s, "reason", |w| {
                let f = &w.counters.fast_path;
                vec![
                    ("path_mtu", f.reclaimed_pmtu),
                    ("config", f.reclaimed_config),
                    ("removed", f.reclaimed_removed),
                    ("backlog", f.backlog),
                ]
            })
        },
    },
    Family {
        name: "px_gateway_fast_path_passed_on_total",
        kind: Counter,
        help: "Segments of flows in the kernel that reached user space without being handed back, forwarded as a router would.",
        counters: &["fast_path.passed_on"],
        rows: |s| counter(s, |c| c.fast_path.passed_on),
    },
    Family {
        name: "px_gateway_fast_path_icmp_checks_total",
        kind: Counter,
        help: "ICMP errors quoting a flow in the kernel, checked against windows read from the kernel.",
        counters: &["fast_path.icmp_catch_ups"],
        rows: |s| counter(s, |c| c.fast_path.icmp_catch_ups),
    },
    Family {
        name: "px_gateway_fast_path_window_reads_total",
        kind: Counter,
        help: "Reads of the inner host's window from the kernel, for flows whose outbound packets it carries (a segment from outside lay beyond the engine's copy; at most one a millisecond per flow).",
        counters: &["fast_path.window_reads"],
        rows: |s| counter(s, |c| c.fast_path.window_reads),
    },
    Family {
        name: "px_gateway_fast_path_bytes_total",
        kind: Counter,
        help: "TCP payload bytes the kernel fast path carried (flows there now and flows since taken back).",
        counters: &["fast_path.kernel_bytes"],
        rows: |s| {
            single((s.total.counters.fast_path.kernel_bytes + s.kernel.as_ref().map_or(0, |k| k.live.bytes)) as f64)
        },
    },
    Family {
        name: "px_gateway_fast_path_packets_total",
        kind: Counter,
        help: "What the kernel fast path carried, by kind: super_packets (as received, once each), segments_in and segments_out (wire segments as received and as sent), data_to_inner and full_to_inner (data segments toward the inner port, and those of the full inner size: its yield).",
        counters: &[
            "fast_path.kernel_packets",
            "fast_path.kernel_segs_in",
            "fast_path.kernel_segs_out",
            "fast_path.kernel_data_in",
            "fast_path.kernel_full_out",
        ],
        rows: |s| {
            let f = &s.total.counters.fast_path;
            let l = s.kernel.as_ref().map(|k| k.live).unwrap_or_default();
            [
                ("super_packets", f.kernel_packets + l.packets),
                ("segments_in", f.kernel_segs_in + l.segs_in),
                ("segments_out", f.kernel_segs_out + l.segs_out),
                ("data_to_inner", f.kernel_data_in + l.data_in),
                ("full_to_inner", f.kernel_full_out + l.full_in),
            ]
            .into_iter()
            .map(|(k, v)| (format!("kind=\"{k}\""), v as f64))
            .collect()
        },
    },
    Family {
        name: "px_gateway_fast_path_program_packets_total",
        kind: Counter,
        help: "Packets the fast path's TC program saw on the ports, by what became of them (crate::fast_path::REASONS: resized, as_is, no_flow, ...).",
        counters: &[],
        rows: |s| match &s.kernel {
            Some(k) => crate::fast_path::REASONS
                .iter()
                .zip(k.reasons)
                .map(|(r, v)| (format!("reason=\"{r}\""), v as f64))
                .collect(),
            None => Vec::new(),
        },
    },
];

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;
    use crate::gateway::metrics::render::render;
    use crate::gateway::metrics::sample_scrape;

    /// Leaf paths of a serialized value (`inner.rx_packets`; an array is a leaf).
    fn leaves(v: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    leaves(v, &p, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }

    /// Every counter the engine keeps is exported by exactly one family,
    /// and every family's claim names a real counter (a counter added to
    /// `px_gateway::Counters` fails here until it has a metric).
    #[test]
    fn every_engine_counter_is_exported() {
        let mut all = Vec::new();
        leaves(&serde_json::to_value(Counters::default()).unwrap(), "", &mut all);
        assert!(all.len() > 30, "{all:?}");
        for path in &all {
            let by: Vec<_> = FAMILIES.iter().filter(|f| f.counters.contains(&path.as_str())).map(|f| f.name).collect();
            assert_eq!(by.len(), 1, "engine counter `{path}` exported by {by:?}");
        }
        for f in FAMILIES {
            for c in f.counters {
                assert!(all.iter().any(|p| p == c), "{} claims `{c}`, which the engine does not have", f.name);
            }
        }
        // Reasons are labels: every reason the engine names appears.
        let text = render(&sample_scrape());
        for r in DropReason::ALL {
            assert!(text.contains(&format!("px_gateway_drops_total{{worker=\"0\",reason=\"{}\"}}", r.name())));
        }
        for r in FlushReason::ALL {
            assert!(text.contains(&format!("px_gateway_flushes_total{{worker=\"0\",reason=\"{}\"}}", r.name())));
        }
    }

    /// Names follow the conventions `promtool` does not check by itself.
    #[test]
    fn names_follow_prometheus_conventions() {
        let mut seen = std::collections::HashSet::new();
        for f in FAMILIES {
            assert!(seen.insert(f.name), "{} twice", f.name);
            assert!(
                f.name.starts_with("px_gateway_")
                    || f.name.starts_with("px_capture_")
                    || f.name.starts_with("process_")
                    || f.name == "px_build_info",
                "{}",
                f.name
            );
            assert!(f.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'), "{}", f.name);
            assert_eq!(f.kind == Kind::Counter, f.name.ends_with("_total"), "{}: _total on counters only", f.name);
            assert!(!f.help.is_empty());
        }
    }

    #[test]
    fn docs_list_every_family() {
        let doc = include_str!("../../../../../docs/metrics.md");
        for f in FAMILIES {
            assert!(doc.contains(&format!("| `{}` | {} |", f.name, f.kind.name())), "docs/metrics.md lacks {}", f.name);
        }
    }

    /// Every PromQL expression of the Grafana dashboard (and of its
    /// template variables).
    fn dashboard_queries() -> Vec<String> {
        fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        match (k.as_str(), v) {
                            ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                            _ => walk(v, out),
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        let dash: serde_json::Value =
            serde_json::from_str(include_str!("../../../../../contrib/grafana/px-gateway.json")).unwrap();
        let mut out = Vec::new();
        walk(&dash, &mut out);
        out
    }

    /// Metric names in a PromQL expression: identifiers starting `px_`
    /// (label names and functions never do).
    fn metric_names(expr: &str) -> Vec<&str> {
        let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
        let mut names = Vec::new();
        let mut rest = expr;
        while let Some(i) = rest.find(|c: char| is_ident(c)) {
            let tail = &rest[i..];
            let end = tail.find(|c: char| !is_ident(c)).unwrap_or(tail.len());
            let word = &tail[..end];
            // Not inside a quoted label value: those follow `"`.
            if word.starts_with("px_") && !rest[..i].ends_with('"') {
                names.push(word);
            }
            rest = &tail[end..];
        }
        names
    }

    #[test]
    fn dashboard_asks_only_for_exported_metrics() {
        let exported: Vec<String> = FAMILIES.iter().flat_map(|f| f.sample_names()).collect();
        let queries = dashboard_queries();
        assert!(queries.len() > 20, "{queries:?}");
        let mut used = std::collections::BTreeSet::new();
        for q in &queries {
            let names = metric_names(q);
            assert!(!names.is_empty(), "no px_ metric in {q}");
            for n in names {
                assert!(
                    exported.iter().any(|e| e == n),
                    "the dashboard asks for {n}, which the gateway does not export: {q}"
                );
                used.insert(n.to_string());
            }
        }
        // What the dashboard is for: throughput and packets per port,
        // yield, held bytes, flows, drops by reason, caravans, the kernel
        // fast path.
        for must in [
            "px_gateway_bytes_total",
            "px_gateway_packets_total",
            "px_gateway_inner_tcp_full_out_total",
            "px_gateway_held_bytes",
            "px_gateway_flows",
            "px_gateway_drops_total",
            "px_gateway_caravans_built_total",
            "px_gateway_caravans_opened_total",
            "px_gateway_fast_path_flows",
            "px_gateway_fast_path_bytes_total",
            "px_gateway_fast_path_program_packets_total",
        ] {
            assert!(used.contains(must), "the dashboard has no panel on {must}");
        }
        assert_eq!(
            metric_names("sum by (reason) (rate(px_gateway_drops_total{reason=\"px_x\"}[5m]))"),
            ["px_gateway_drops_total"]
        );
    }

    /// The dashboard's expressions parse as PromQL: each becomes a
    /// recording rule (Grafana's variables replaced) for `promtool check
    /// rules`; skipped with a message where promtool is missing.
    #[test]
    fn dashboard_queries_parse_as_promql() {
        let mut rules = String::from("groups:\n  - name: px-gateway-dashboard\n    rules:\n");
        for (i, q) in dashboard_queries().iter().enumerate() {
            if q.starts_with("label_values(") {
                continue;
            }
            let q = q.replace("$__rate_interval", "1m").replace("$instance", ".*");
            let _ = writeln!(rules, "      - record: px:dashboard_{i}\n        expr: '{}'", q.replace('\'', "''"));
        }
        let path = std::env::temp_dir().join(format!("px-dashboard-rules-{}.yml", std::process::id()));
        std::fs::write(&path, rules).unwrap();
        let out = std::process::Command::new("promtool").args(["check", "rules"]).arg(&path).output();
        let _ = std::fs::remove_file(&path);
        let Ok(out) = out else {
            eprintln!("SKIP dashboard_queries_parse_as_promql: promtool not found (apt-get install prometheus)");
            return;
        };
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
