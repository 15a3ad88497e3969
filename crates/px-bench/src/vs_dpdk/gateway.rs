//! The figures of `px bench gateway --datapath dpdk`: the gateway against
//! DPDK's own GRO/GSO and against plain forwarding, on the same memif I/O,
//! CPU and trace (px-lab's `gateway_bench::dpdk` runs the rounds).
//!
//! Each round is one forwarder ([`Forwarder`]) on one trace ([`TraceKind`]);
//! the generator and sink (`bench/dpdk/px_dpdk_gen.c`) report what went in
//! and what came out ([`GenReport`]). The rounds are interleaved and
//! repeated, so every ratio here pairs rounds of the same repeat: the
//! report ([`Report`]) gives medians over the repeats, their spread, and
//! the issue's targets as ratios of one run.
//!
//! Definitions (the same in the JSON, the table and `docs/dpdk-bench.md`):
//! - **Gbps in**: the wire frames the generator handed to the forwarder
//!   (Ethernet header to the end of the IP packet), from the first data
//!   frame sent to the last one received.
//! - **yield** (the paper's conversion yield): on the inner side, the share
//!   of TCP data frames whose payload is a full inner segment (inbound,
//!   mixed and bulk traces); for the outbound trace, the share of outer-side
//!   data frames at the full outer segment (what splitting makes).
//! - **CPU share**: the forwarding thread's CPU time over the round's wall
//!   time (a polling thread is near 1.0); **busy share**: the share of its
//!   loop's cycles spent in iterations that moved a frame, where the
//!   forwarder reports it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Spread, TraceFrames, trace_frames, write_pcap};
use crate::trace::TraceConfig;

/// The forwarder of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Forwarder {
    /// Plain I/O forwarding (`px_dpdk_fwd --mode io`): the ceiling.
    Limit,
    /// `px gateway --datapath dpdk`.
    Px,
    /// DPDK's GRO inbound and GSO outbound (`px_dpdk_fwd --mode gro`).
    Baseline,
}

impl Forwarder {
    pub const ALL: [Forwarder; 3] = [Forwarder::Limit, Forwarder::Px, Forwarder::Baseline];

    pub fn name(self) -> &'static str {
        match self {
            Forwarder::Limit => "limit",
            Forwarder::Px => "px",
            Forwarder::Baseline => "baseline",
        }
    }
}

impl std::str::FromStr for Forwarder {
    type Err = String;

    fn from_str(s: &str) -> Result<Forwarder, String> {
        Forwarder::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown round {s:?} (limit, px or baseline)"))
    }
}

/// The trace of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceKind {
    /// The benchmark trace's 1448-byte segments into the outer port (merge).
    Inbound,
    /// Its 8948-byte segments into the inner port (split).
    Outbound,
    /// Both at once, each direction's share of bytes as in the traces.
    Mixed,
    /// Inbound, a few bulk flows only (`--bulk-flows`, no small flows).
    Bulk,
}

impl TraceKind {
    pub const ALL: [TraceKind; 4] = [TraceKind::Inbound, TraceKind::Outbound, TraceKind::Mixed, TraceKind::Bulk];

    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Inbound => "inbound",
            TraceKind::Outbound => "outbound",
            TraceKind::Mixed => "mixed",
            TraceKind::Bulk => "bulk",
        }
    }

    /// The yield that says how well this trace was converted: the inner
    /// side's, except for the outbound trace (the outer side's).
    pub fn yield_of(self, g: &GenReport) -> f64 {
        match self {
            TraceKind::Outbound => g.outer_yield,
            _ => g.inner_yield,
        }
    }
}

impl std::str::FromStr for TraceKind {
    type Err = String;

    fn from_str(s: &str) -> Result<TraceKind, String> {
        TraceKind::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown trace {s:?} (inbound, outbound, mixed or bulk)"))
    }
}

/// One side's counts of a generator run (`ports[]` of its JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GenPort {
    pub side: String,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub rx_data_frames: u64,
    pub rx_full_frames: u64,
    pub rx_payload: u64,
    pub max_frame: u64,
    pub oversize: u64,
    /// Frames whose checksums were checked (every Nth: `--verify-every`).
    #[serde(default)]
    pub verified: u64,
    pub bad_csum: u64,
    pub unknown_flow: u64,
    pub misrouted: u64,
}

/// What `px_dpdk_gen` reported for one round (its JSON, the fields used).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GenReport {
    #[serde(default)]
    pub dpdk_version: String,
    pub seconds: f64,
    pub frames_in: u64,
    pub bytes_in: u64,
    pub payload_in: u64,
    pub frames_out: u64,
    pub payload_out: u64,
    pub gbps_in: f64,
    pub mpps_in: f64,
    pub mpps_out: f64,
    pub payload_gbps: f64,
    pub inner_yield: f64,
    pub outer_yield: f64,
    pub flows: u64,
    pub flows_exact: u64,
    pub out_of_order: u64,
    /// Share of TX bursts the forwarder's ring did not take whole: near 0,
    /// the generator was what limited the round.
    pub tx_short_share: f64,
    /// Bursts cut short because a frame of the window was still in the
    /// forwarder's ring (zero copy: not the generator's to rewrite yet).
    #[serde(default)]
    pub in_flight_waits: u64,
    #[serde(default)]
    pub tx_bursts: u64,
    pub laps: [u64; 2],
    /// Flows sent at once (a window at a time), mean over the windows, per
    /// direction (inbound, outbound); absent from older generators.
    #[serde(default)]
    pub at_once_mean: [f64; 2],
    /// The flows' pace against their trace rates (trace time / wall time
    /// over the windows; 1: as fast as in the trace), per direction.
    #[serde(default)]
    pub flow_pace: [f64; 2],
    pub ports: Vec<GenPort>,
    pub ok: bool,
    pub failures: Vec<String>,
}

impl GenReport {
    /// Parses the generator's JSON line.
    pub fn parse(text: &str) -> Result<GenReport, String> {
        serde_json::from_str(text.trim()).map_err(|e| format!("px_dpdk_gen output is not its JSON: {e}"))
    }

    /// Whether the round moved every byte intact: every flow's payload
    /// arrived (per flow: bytes in = bytes out), nothing corrupt, oversize,
    /// of an unknown flow or out of the wrong port.
    pub fn moved_every_byte(&self) -> bool {
        self.ok
            && self.flows > 0
            && self.flows_exact == self.flows
            && self.payload_out == self.payload_in
            && self.ports.iter().all(|p| p.bad_csum + p.oversize + p.unknown_flow + p.misrouted == 0)
    }
}

/// One round: a forwarder on a trace, in one repeat.
#[derive(Debug, Clone, Serialize)]
pub struct RoundRun {
    pub forwarder: Forwarder,
    pub trace: TraceKind,
    pub repeat: u32,
    pub generator: GenReport,
    /// The forwarding thread's CPU time / the round's wall time.
    pub cpu_share: f64,
    /// Busy cycles / cycles of the forwarder's loop, where it reports them.
    pub busy_share: Option<f64>,
    /// `/proc/loadavg`'s 1-minute figure at the end of the round.
    pub load_1m: f64,
    /// What the forwarder reported at its exit (px_dpdk_fwd's JSON, px
    /// gateway's `--stats-file`), as it was.
    pub forwarder_stats: serde_json::Value,
}

impl RoundRun {
    fn yield_(&self) -> f64 {
        self.trace.yield_of(&self.generator)
    }
}

/// The pcaps of one trace: data frames, the senders' SYNs, the receivers'
/// SYN-ACKs (the generator's `--in`/`--out`, `-syn`, `-synack`).
#[derive(Debug, Clone)]
pub struct TracePcaps {
    pub data: PathBuf,
    pub syn: PathBuf,
    pub synack: PathBuf,
    pub frames: usize,
    pub bytes: u64,
    pub flows: usize,
}

impl TracePcaps {
    /// Writes `frames` as `<dir>/<name>.pcap`, `<name>-syn.pcap`,
    /// `<name>-synack.pcap`.
    pub fn write(dir: &Path, name: &str, frames: &TraceFrames, flows: usize) -> std::io::Result<TracePcaps> {
        let p = |s: &str| dir.join(format!("{name}{s}.pcap"));
        let t = TracePcaps {
            data: p(""),
            syn: p("-syn"),
            synack: p("-synack"),
            frames: frames.data.frames.len(),
            bytes: frames.data.frames.iter().map(|f| f.len as u64).sum(),
            flows,
        };
        write_pcap(&t.data, &frames.data)?;
        write_pcap(&t.syn, &frames.syns)?;
        write_pcap(&t.synack, &frames.synacks)?;
        Ok(t)
    }
}

/// How big the traces are.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TraceSizes {
    /// Bulk flows of the benchmark trace (the paper: 800).
    pub flows: usize,
    /// Its inbound frames (1448-byte segments).
    pub inbound_frames: usize,
    /// Its outbound frames (8948-byte segments).
    pub outbound_frames: usize,
    /// Flows of the bulk trace.
    pub bulk_flows: usize,
    /// Its frames.
    pub bulk_frames: usize,
}

/// The pcaps of every trace, written once per run.
#[derive(Debug, Clone)]
pub struct TraceFiles {
    pub inbound: TracePcaps,
    pub outbound: TracePcaps,
    pub bulk: TracePcaps,
}

impl TraceFiles {
    /// Generates the traces (the benchmark trace of px-bench, both
    /// directions; the bulk trace: `bulk_flows` flows, no small flows) and
    /// writes their pcaps into `dir`.
    pub fn write(dir: &Path, s: &TraceSizes, imtu: u16, emtu: u16) -> std::io::Result<TraceFiles> {
        let inbound = TraceConfig { flows: s.flows, ..TraceConfig::inbound_default() };
        let outbound = TraceConfig { flows: s.flows, ..TraceConfig::outbound_default() };
        let bulk = TraceConfig { flows: s.bulk_flows, small_share: 0.0, ..TraceConfig::inbound_default() };
        // Toward the inside, the receivers' ACKs with their largest window
        // follow their SYN-ACKs (the gateway takes data from outside only
        // inside what the receiver allows: `Chunk::receiver_acks`).
        let with_acks = |cfg: &TraceConfig, n: usize| {
            let mut f = trace_frames(cfg, n, imtu, emtu);
            f.synacks.append(&f.data.receiver_acks());
            f
        };
        Ok(TraceFiles {
            inbound: TracePcaps::write(dir, "inbound", &with_acks(&inbound, s.inbound_frames), s.flows)?,
            outbound: TracePcaps::write(
                dir,
                "outbound",
                &trace_frames(&outbound, s.outbound_frames, imtu, emtu),
                s.flows,
            )?,
            bulk: TracePcaps::write(dir, "bulk", &with_acks(&bulk, s.bulk_frames), s.bulk_flows)?,
        })
    }

    /// The generator's trace arguments for `kind`.
    pub fn gen_args(&self, kind: TraceKind) -> Vec<std::ffi::OsString> {
        let mut v = Vec::new();
        let mut add = |flag: &str, t: &TracePcaps| {
            for (suffix, p) in [("", &t.data), ("-syn", &t.syn), ("-synack", &t.synack)] {
                v.push(format!("--{flag}{suffix}").into());
                v.push(p.clone().into_os_string());
            }
        };
        match kind {
            TraceKind::Inbound => add("in", &self.inbound),
            TraceKind::Outbound => add("out", &self.outbound),
            TraceKind::Mixed => {
                add("in", &self.inbound);
                add("out", &self.outbound);
            }
            TraceKind::Bulk => add("in", &self.bulk),
        }
        v
    }

    /// Distinct data flows the forwarder sees on `kind` (for DPDK GRO's
    /// table size): the bulk flows, plus the benchmark trace's small flows.
    pub fn flows(&self, kind: TraceKind) -> usize {
        match kind {
            TraceKind::Bulk => self.bulk.flows,
            TraceKind::Mixed => self.inbound.flows + self.outbound.flows,
            _ => self.inbound.flows,
        }
    }
}

/// A figure the issue sets a target for: its value (a ratio of rounds of
/// the same repeat, median over the repeats) and the target.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub what: &'static str,
    pub value: Option<f64>,
    pub spread: Option<Spread>,
    pub target: f64,
    pub met: bool,
}

/// How the run was set up (the JSON's `setup`).
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    pub forwarding_cpu: usize,
    pub generator_cpu: usize,
    pub seconds: f64,
    pub repeats: u32,
    pub traces: TraceSizes,
    pub imtu: u16,
    pub emtu: u16,
    pub hold_us: u64,
    pub io: String,
    pub dpdk_version: String,
    pub load_average_start: String,
    pub load_average_end: String,
    pub order: &'static str,
    /// How the generator replays the flows (`--at-once`).
    pub replay: String,
    pub gbps: &'static str,
    pub yield_definition: &'static str,
    pub cpu_share: &'static str,
    /// What the sink checked.
    pub checks: String,
}

/// Everything one `px bench gateway --datapath dpdk` measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub runs: Vec<RoundRun>,
    /// Forwarders that did not run, and why (e.g. px built without DPDK).
    pub absent: Vec<(Forwarder, String)>,
    pub setup: Setup,
}

/// One figure of a round.
type Figure = fn(&RoundRun) -> f64;

/// The figures the JSON's top level has for every forwarder and trace.
const FIGURES: [(&str, Figure); 6] = [
    ("gbps", |r| r.generator.gbps_in),
    ("mpps", |r| r.generator.mpps_in),
    ("yield", RoundRun::yield_),
    ("cpu_share", |r| r.cpu_share),
    ("tx_short_share", |r| r.generator.tx_short_share),
    ("payload_gbps", |r| r.generator.payload_gbps),
];

impl Report {
    fn of(&self, f: Forwarder, t: TraceKind) -> impl Iterator<Item = &RoundRun> {
        self.runs.iter().filter(move |r| r.forwarder == f && r.trace == t)
    }

    /// Median and range of a figure over the repeats, if that round ran.
    pub fn spread(&self, f: Forwarder, t: TraceKind, fig: Figure) -> Option<Spread> {
        let v: Vec<f64> = self.of(f, t).map(fig).collect();
        (!v.is_empty()).then(|| Spread::of(v))
    }

    /// `a`'s figure over `b`'s, paired by repeat (rounds of one repeat ran
    /// back to back): median and range of the per-repeat ratios.
    pub fn ratio(&self, t: TraceKind, a: Forwarder, b: Forwarder, fig: Figure) -> Option<Spread> {
        let v: Vec<f64> = self
            .of(a, t)
            .filter_map(|x| {
                let y = self.of(b, t).find(|y| y.repeat == x.repeat)?;
                let d = fig(y);
                (d > 0.0).then(|| fig(x) / d)
            })
            .collect();
        (!v.is_empty()).then(|| Spread::of(v))
    }

    /// Rounds that did not move every byte intact, with the generator's reasons.
    pub fn failed(&self) -> Vec<&RoundRun> {
        self.runs.iter().filter(|r| !r.generator.moved_every_byte()).collect()
    }

    /// The issue's targets, as ratios in this run.
    pub fn targets(&self) -> Vec<Target> {
        use Forwarder::*;
        use TraceKind::*;
        let gbps = |r: &RoundRun| r.generator.gbps_in;
        let ratio = |what, t, a, b, target| {
            let s = self.ratio(t, a, b, gbps);
            Target { what, value: s.map(|s| s.median), spread: s, target, met: s.is_some_and(|s| s.median >= target) }
        };
        let yield_ = |what, t, target| {
            let s = self.spread(Px, t, RoundRun::yield_);
            Target { what, value: s.map(|s| s.median), spread: s, target, met: s.is_some_and(|s| s.median >= target) }
        };
        vec![
            ratio("inbound: px Gbps / baseline Gbps", Inbound, Px, Baseline, 3.0),
            yield_("inbound: px yield", Inbound, 0.93),
            ratio("inbound: px Gbps / limit Gbps", Inbound, Px, Limit, 0.4),
            ratio("outbound: px Gbps / limit Gbps", Outbound, Px, Limit, 0.4),
            yield_("bulk: px yield", Bulk, 0.97),
        ]
    }

    /// The JSON of `--json`: `<forwarder>_<trace>_<figure>` medians at the
    /// top (`null` for a round that did not run), their spreads, the
    /// targets, every round, the setup.
    pub fn json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for t in TraceKind::ALL {
            for f in Forwarder::ALL {
                for (name, fig) in FIGURES {
                    let s = self.spread(f, t, fig);
                    out.insert(format!("{}_{}_{name}", f.name(), t.name()), json!(s.map(|s| s.median)));
                    out.insert(format!("{}_{}_{name}_spread", f.name(), t.name()), json!(s));
                }
                let busy: Vec<f64> = self.of(f, t).filter_map(|r| r.busy_share).collect();
                let busy = (!busy.is_empty()).then(|| Spread::of(busy).median);
                out.insert(format!("{}_{}_busy_share", f.name(), t.name()), json!(busy));
            }
        }
        let loads: Vec<f64> = self.runs.iter().map(|r| r.load_1m).collect();
        out.insert("load_average".into(), json!((!loads.is_empty()).then(|| Spread::of(loads).median)));
        out.insert("targets".into(), json!(self.targets()));
        out.insert("all_rounds_moved_every_byte".into(), json!(self.failed().is_empty()));
        out.insert(
            "absent".into(),
            json!(self.absent.iter().map(|(f, why)| json!({"forwarder": f, "reason": why})).collect::<Vec<_>>()),
        );
        out.insert("rounds".into(), json!(self.runs));
        out.insert("setup".into(), json!(self.setup));
        serde_json::Value::Object(out)
    }

    /// The table: one row per trace and forwarder, medians [min – max].
    pub fn table(&self) -> String {
        let st = &self.setup;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "px bench gateway --datapath dpdk — {} I/O, forwarder on CPU {}, generator on CPU {}, {} s per round, \
             {} repeat(s) interleaved; load {} → {}\n",
            st.io,
            st.forwarding_cpu,
            st.generator_cpu,
            st.seconds,
            st.repeats,
            st.load_average_start,
            st.load_average_end
        );
        let _ = writeln!(
            s,
            "  {:<9} {:<9} {:>24} {:>8} {:>7} {:>6} {:>6} {:>6}  bytes",
            "trace", "round", "Gbps in [min – max]", "Mpps", "yield", "CPU", "busy", "refused"
        );
        for t in TraceKind::ALL {
            for f in Forwarder::ALL {
                let Some(g) = self.spread(f, t, |r| r.generator.gbps_in) else { continue };
                let m = |fig: Figure| self.spread(f, t, fig).map_or(f64::NAN, |s| s.median);
                let busy: Vec<f64> = self.of(f, t).filter_map(|r| r.busy_share).collect();
                let busy = if busy.is_empty() { "-".to_string() } else { format!("{:.2}", Spread::of(busy).median) };
                let exact = self.of(f, t).all(|r| r.generator.moved_every_byte());
                let _ = writeln!(
                    s,
                    "  {:<9} {:<9} {:>8.2} [{:>6.2} – {:>6.2}] {:>8.3} {:>7.3} {:>6.2} {:>6} {:>6.2}  {}",
                    t.name(),
                    f.name(),
                    g.median,
                    g.min,
                    g.max,
                    m(|r| r.generator.mpps_in),
                    m(RoundRun::yield_),
                    m(|r| r.cpu_share),
                    busy,
                    m(|r| r.generator.tx_short_share),
                    if exact { "all moved" } else { "LOST/CORRUPT" },
                );
            }
        }
        let _ = writeln!(
            s,
            "\n  (Gbps in: wire frames into the forwarder; yield: inner-side full-segment share, outbound: \
             outer-side; CPU: the forwarding thread's CPU share; busy: its loop's busy share; refused: share of the \
             generator's bursts the forwarder's ring refused, near 0 = the generator limited the round)"
        );
        let _ = writeln!(s, "\n  targets (ratios of rounds of the same repeat, median [min – max]):");
        for t in self.targets() {
            let v = match t.spread {
                Some(sp) => format!("{:.3} [{:.3} – {:.3}]", sp.median, sp.min, sp.max),
                None => "not measured".to_string(),
            };
            let _ = writeln!(
                s,
                "    {:<36} {:<26} target ≥ {:<5} {}",
                t.what,
                v,
                t.target,
                if t.value.is_none() {
                    "-"
                } else if t.met {
                    "met"
                } else {
                    "NOT MET"
                }
            );
        }
        for (f, why) in &self.absent {
            let _ = writeln!(s, "\n  {} round absent: {why}", f.name());
        }
        for line in self.failure_lines() {
            let _ = writeln!(s, "\n  {line}");
        }
        s
    }

    /// One line per round that did not move every byte, and why (the
    /// table's end; `px bench gateway --json` says them on stderr).
    pub fn failure_lines(&self) -> Vec<String> {
        self.failed()
            .iter()
            .map(|r| {
                format!(
                    "{} on {} (repeat {}) did not move every byte: {}",
                    r.forwarder.name(),
                    r.trace.name(),
                    r.repeat + 1,
                    r.generator.failures.join("; ")
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(gbps: f64, inner: f64, outer: f64) -> GenReport {
        GenReport {
            seconds: 1.0,
            frames_in: 10,
            payload_in: 100,
            payload_out: 100,
            gbps_in: gbps,
            inner_yield: inner,
            outer_yield: outer,
            flows: 2,
            flows_exact: 2,
            ports: vec![GenPort::default(), GenPort::default()],
            ok: true,
            ..GenReport::default()
        }
    }

    fn run(f: Forwarder, t: TraceKind, repeat: u32, g: GenReport) -> RoundRun {
        RoundRun {
            forwarder: f,
            trace: t,
            repeat,
            generator: g,
            cpu_share: 1.0,
            busy_share: Some(0.5),
            load_1m: 2.0,
            forwarder_stats: serde_json::Value::Null,
        }
    }

    fn setup() -> Setup {
        Setup {
            forwarding_cpu: 1,
            generator_cpu: 0,
            seconds: 1.0,
            repeats: 3,
            traces: TraceSizes { flows: 8, inbound_frames: 10, outbound_frames: 10, bulk_flows: 2, bulk_frames: 10 },
            imtu: 9000,
            emtu: 1500,
            hold_us: 500,
            io: "memif".into(),
            dpdk_version: "test".into(),
            load_average_start: String::new(),
            load_average_end: String::new(),
            order: "",
            replay: String::new(),
            gbps: "",
            yield_definition: "",
            cpu_share: "",
            checks: String::new(),
        }
    }

    /// The issue's keys are all there; ratios pair rounds of one repeat;
    /// the outbound trace's yield is the outer side's.
    #[test]
    fn json_has_the_issues_keys_and_pairs_by_repeat() {
        use Forwarder::*;
        use TraceKind::*;
        let mut runs = Vec::new();
        for rep in 0..3 {
            let k = f64::from(rep + 1);
            for t in TraceKind::ALL {
                runs.push(run(Limit, t, rep, report(40.0 * k, 0.0, 0.0)));
                runs.push(run(Px, t, rep, report(20.0 * k, 0.95, 0.99)));
                runs.push(run(Baseline, t, rep, report(5.0 * k, 0.7, 0.8)));
            }
        }
        let r = Report { runs, absent: vec![], setup: setup() };
        let j = r.json();
        for t in ["inbound", "outbound", "mixed"] {
            for k in ["limit_{}_gbps", "px_{}_gbps", "baseline_{}_gbps", "px_{}_yield", "baseline_{}_yield"] {
                let key = k.replace("{}", t);
                assert!(j[&key].as_f64().is_some(), "{key} missing: {}", j[&key]);
            }
        }
        assert_eq!(j["px_bulk_yield"], json!(0.95));
        assert_eq!(j["px_outbound_yield"], json!(0.99), "outbound: the outer side's yield");
        assert_eq!(j["load_average"], json!(2.0));
        assert_eq!(j["px_inbound_gbps"], json!(40.0), "median of 20, 40, 60");
        // Each repeat's px/baseline is 4 whatever the repeat's level: paired.
        let ratio = r.ratio(Inbound, Px, Baseline, |r| r.generator.gbps_in).unwrap();
        assert_eq!((ratio.min, ratio.max), (4.0, 4.0));
        let t = r.targets();
        assert!(t[0].met && t[1].met && t[2].met && t[3].met && !t[4].met, "{t:?}");
        assert!(r.failed().is_empty() && j["all_rounds_moved_every_byte"] == json!(true));
        assert!(r.table().contains("NOT MET"));
    }

    /// A round that lost a flow's bytes, or saw a corrupt frame, is a
    /// failed round, named in the table.
    #[test]
    fn a_round_that_lost_bytes_fails() {
        let mut lost = report(1.0, 0.9, 0.9);
        lost.flows_exact = 1;
        let mut corrupt = report(1.0, 0.9, 0.9);
        corrupt.ports[1].bad_csum = 1;
        let mut short = report(1.0, 0.9, 0.9);
        short.payload_out = 99;
        for g in [lost, corrupt, short] {
            assert!(!g.moved_every_byte());
            let r = Report { runs: vec![run(Forwarder::Px, TraceKind::Inbound, 0, g)], absent: vec![], setup: setup() };
            assert_eq!(r.failed().len(), 1);
            assert!(r.table().contains("did not move every byte"));
            assert_eq!(r.json()["all_rounds_moved_every_byte"], json!(false));
        }
        assert!(report(1.0, 0.9, 0.9).moved_every_byte());
    }

    /// A forwarder that did not run leaves `null`s, not zeros.
    #[test]
    fn absent_rounds_are_null() {
        let r = Report {
            runs: vec![run(Forwarder::Limit, TraceKind::Inbound, 0, report(10.0, 0.0, 0.0))],
            absent: vec![(Forwarder::Px, "px was built without DPDK".into())],
            setup: setup(),
        };
        let j = r.json();
        assert!(j["px_inbound_gbps"].is_null() && j["limit_inbound_gbps"] == json!(10.0));
        assert!(r.table().contains("px round absent: px was built without DPDK"));
        assert!(r.targets().iter().all(|t| !t.met && t.value.is_none()));
    }

    /// The generator's JSON (as px_dpdk_gen prints it) parses.
    #[test]
    fn parses_the_generators_json() {
        let text = r#"{"tool":"px_dpdk_gen","dpdk_version":"DPDK 22.11.11","lcore":0,"tsc_hz":2600000000,
            "burst":32,"verify":true,"directions":"inbound","seconds_requested":2.000,"seconds":2.01,
            "tx_seconds":2.0,"frames_in":10,"bytes_in":15140,"payload_in":14480,"frames_out":2,
            "payload_out":14480,"gbps_in":0.06,"mpps_in":0.000005,"mpps_out":0.000001,"payload_gbps":0.05,
            "inner_yield":0.5,"outer_yield":0.0,"flows":1,"flows_exact":1,"out_of_order":0,"tx_bursts":1,
            "tx_short_share":0.0,"in_flight_waits":0,"laps":[3,0],"ports":[{"side":"outer","tx_frames":10,
            "tx_bytes":15140,"rx_frames":0,"rx_bytes":0,"rx_data_frames":0,"rx_full_frames":0,"rx_payload":0,
            "max_frame":0,"oversize":0,"bad_csum":0,"no_payload":1,"not_tcp4":0,"unknown_flow":0,
            "misrouted":0},{"side":"inner","tx_frames":0,"tx_bytes":0,"rx_frames":2,"rx_bytes":14584,
            "rx_data_frames":2,"rx_full_frames":1,"rx_payload":14480,"max_frame":9014,"oversize":0,
            "bad_csum":0,"no_payload":1,"not_tcp4":0,"unknown_flow":0,"misrouted":0}],"ok":true,"failures":[]}"#;
        let g = GenReport::parse(text).unwrap();
        assert!(g.moved_every_byte());
        assert_eq!((g.inner_yield, g.ports[1].max_frame, g.laps), (0.5, 9014, [3, 0]));
        assert!(GenReport::parse("px_dpdk_gen: oops").is_err());
    }
}
