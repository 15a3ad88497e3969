//! What the ECMP run measures: the flows' stalls from their progress
//! samples, the traffic per gateway link, the routers' routes and FIB
//! choices (flow hash symmetry), the routers' BGP and BFD events, the
//! surviving gateway's yield from its metrics endpoint, and the result
//! assembled from the scenario's raw outcome ([`summarize`]).

use std::time::{Duration, Instant};

use px_netns::netns::Netns;
use px_netns::traffic::{ReceivedFlow, SentFlow, TrafficError};

use super::config::{BFD_MULTIPLIER, HASH_SEED, HOST_A, HOST_L, Lab, METRICS_PORT};
use super::{EcmpOptions, EcmpResult, HashSymmetry, RawSample, Sample, Transfer};
use crate::RunError;

/// A flow whose bytes stop for this long is counted as stalled.
const STALL: Duration = Duration::from_millis(60);

/// What the scenario saw, before it is measured.
pub(super) struct Outcome {
    /// The flow hash check (its `flows_merged_before_kill` still 0).
    pub(super) hash: HashSymmetry,
    /// Share of L → A flows whose receiver got merged segments before the kill.
    pub(super) merged: f64,
    /// `ra`'s BIRD log.
    pub(super) ra_log: String,
    /// The senders, A → L first.
    pub(super) sent: Vec<Result<SentFlow, TrafficError>>,
    /// The receivers of A → L.
    pub(super) got_l: Result<Vec<ReceivedFlow>, TrafficError>,
    /// The receivers of L → A.
    pub(super) got_a: Result<Vec<ReceivedFlow>, TrafficError>,
    /// When gw1 was killed (s since the flows started).
    pub(super) kill_at: f64,
    /// When it was started again.
    pub(super) restart_at: f64,
    /// Every flow's progress and each link's bytes over time.
    pub(super) samples_raw: Vec<RawSample>,
    /// From the kill until `ra`'s route had one next hop, ms.
    pub(super) route_converged_ms: Option<f64>,
    /// gw2's yield before the kill.
    pub(super) yield_before: Option<f64>,
    /// gw2's yield from the kill to the restart.
    pub(super) yield_after: Option<f64>,
    /// gw2's data packets to the inner port in that window.
    pub(super) data_after: u64,
}

/// The result: each sender matched with its receiver by flow number and
/// checked, the stalls after the kill and the restart, the flaps.
pub(super) fn summarize(o: &EcmpOptions, out: Outcome) -> Result<EcmpResult, RunError> {
    let mut hash = out.hash;
    let n = o.flows;
    hash.flows_merged_before_kill = out.merged;
    // One BFD session goes down for the kill; any other is a flap.
    let ra_events = routing_events(&out.ra_log);
    let bfd_flaps = bgp_downs(&ra_events).saturating_sub(1);
    let mut received = out.got_l.map_err(|e| format!("A to L: {e}"))?;
    received.extend(out.got_a.map_err(|e| format!("L to A: {e}"))?);
    // Match each sender with its receiver by flow number.
    let mut transfers = Vec::new();
    let mut exact = true;
    for (i, s) in out.sent.into_iter().enumerate() {
        let flow = if i < n { i as u64 } else { 100 + (i - n) as u64 };
        let s = s.map_err(|e| format!("flow {flow}: {e}"))?;
        let r = received.iter().find(|r| r.flow == flow).ok_or(format!("flow {flow}: not received"))?;
        let (ss, rs) = (s.sha256.clone().unwrap_or_default(), r.sha256.clone().unwrap_or_default());
        exact &= s.bytes == r.bytes && !ss.is_empty() && ss == rs;
        transfers.push(Transfer {
            direction: if i < n { "a_to_l" } else { "l_to_a" },
            flow,
            bytes: r.bytes,
            sent_sha256: ss,
            received_sha256: rs,
            failover_stall_ms: 0.0,
            failback_stall_ms: 0.0,
            receiver_mss: r.stats.rcv_mss,
        });
    }
    // Stalls per flow, from the progress samples (receivers were accepted
    // in any order: index `k` of the progress is the k-th accepted flow of
    // that direction, so stalls are matched to a direction, not a flow).
    let times: Vec<f64> = out.samples_raw.iter().map(|s| s.0).collect();
    let mut fail = Vec::new();
    let mut back = Vec::new();
    for k in 0..2 * n {
        let p: Vec<u64> = out.samples_raw.iter().map(|s| s.1[k]).collect();
        fail.push(stall_after(&times, &p, out.kill_at, STALL.as_secs_f64()));
        back.push(stall_after(&times, &p, out.restart_at, STALL.as_secs_f64()));
    }
    for (i, t) in transfers.iter_mut().enumerate() {
        t.failover_stall_ms = fail[i] * 1e3;
        t.failback_stall_ms = back[i] * 1e3;
    }
    let mut stalled: Vec<f64> = fail.iter().copied().filter(|s| *s > 0.0).map(|s| s * 1e3).collect();
    stalled.sort_by(f64::total_cmp);
    let failback_ms = back.iter().copied().fold(0.0, f64::max) * 1e3;
    Ok(EcmpResult {
        transfers_exact: exact,
        stalled_flows: stalled.len(),
        failover_ms: stalled.last().copied().unwrap_or(0.0),
        failover_median_ms: stalled.get(stalled.len() / 2).copied().unwrap_or(0.0),
        route_converged_ms: out.route_converged_ms,
        failback_ms,
        failback_stalled_flows: back.iter().filter(|s| **s > 0.0).count(),
        yield_before_failover: out.yield_before,
        yield_after_failover: out.yield_after,
        gw2_data_out_after: out.data_after,
        transfers,
        hash,
        bfd: (o.bfd_ms, BFD_MULTIPLIER),
        bfd_flaps,
        ra_events,
        kill_at_s: out.kill_at,
        restart_at_s: out.restart_at,
        samples: bin_samples(&out.samples_raw, 0.1),
    })
}

/// Of the established connections to `port` in `ns` (the receivers of
/// L → A), the share whose receive MSS estimate is above 8000: they get
/// merged segments. Read with `ss -ti` (`rcvmss:`).
pub(super) fn merged_share(ns: &Netns, port: u16) -> f64 {
    let filter = format!("( sport = :{port} )");
    let out = ns.exec("ss", &["-tinH", "state", "established", &filter]).unwrap_or_default();
    let mss: Vec<u32> =
        out.split_whitespace().filter_map(|w| w.strip_prefix("rcvmss:").and_then(|v| v.parse().ok())).collect();
    if mss.is_empty() {
        return 0.0;
    }
    mss.iter().filter(|m| **m > 8000).count() as f64 / mss.len() as f64
}

/// The routing events of a BIRD log (`debug protocols { states }`): the
/// state changes of the BGP and BFD protocols.
pub(super) fn routing_events(log: &str) -> Vec<String> {
    log.lines().filter(|l| l.contains("State changed to")).map(str::to_owned).collect()
}

/// BGP sessions that went down, from [`routing_events`].
pub(super) fn bgp_downs(events: &[String]) -> usize {
    events.iter().filter(|l| l.contains("State changed to down")).count()
}

/// The longest time a counter stood still, counted from `event`: among
/// the stretches without progress that began no later than 0.3 s after
/// `event` and last at least `min` seconds, the latest end, minus
/// `event`. 0 if the flow never stood still that long.
pub fn stall_after(times: &[f64], progress: &[u64], event: f64, min: f64) -> f64 {
    let changes: Vec<f64> =
        (1..times.len().min(progress.len())).filter(|&i| progress[i] > progress[i - 1]).map(|i| times[i]).collect();
    let mut worst: f64 = 0.0;
    for w in changes.windows(2) {
        let (from, to) = (w[0], w[1]);
        if to > event && from <= event + 0.3 && to - from >= min {
            worst = worst.max(to - event);
        }
    }
    worst
}

/// Mbit/s per gateway link in bins of `bin` seconds.
pub(super) fn bin_samples(raw: &[RawSample], bin: f64) -> Vec<Sample> {
    let mut out = Vec::new();
    let Some(first) = raw.first() else { return out };
    let (mut t_prev, mut prev) = (first.0, first.2);
    for (t, _, links) in raw {
        if t - t_prev >= bin {
            let dt = t - t_prev;
            let mbps = |i: usize| links[i].saturating_sub(prev[i]) as f64 * 8.0 / dt / 1e6;
            out.push(Sample { t_s: *t, gw1_mbps: mbps(0), gw2_mbps: mbps(1) });
            (t_prev, prev) = (*t, *links);
        }
    }
    out
}

/// Bytes received plus sent on each of `devs`, from the calling thread's
/// namespace.
pub(super) fn link_bytes(devs: &[&str; 2]) -> [u64; 2] {
    devs.map(|d| px_netns::counters::dev_counters_here(d).map_or(0, |c| c.rx_bytes + c.tx_bytes))
}

/// Waits until `ns`'s route to `prefix` has `paths` next hops.
pub(super) fn wait_multipath(ns: &Netns, prefix: &str, paths: usize, timeout: Duration) -> Result<(), RunError> {
    let t0 = Instant::now();
    loop {
        let out = ns.ip(&["-4", "route", "show", prefix])?;
        let hops = out.matches("nexthop").count();
        let have = if hops == 0 && out.contains(" via ") { 1 } else { hops };
        if have == paths {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            return Err(RunError::Step(format!(
                "{}: route {prefix} has {have} next hops, not {paths}: {out}",
                ns.name()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Which gateway link (`g1` → 0, `g2` → 1) a router's FIB picks for a
/// forwarded TCP packet.
fn fib_choice(ns: &Netns, dst: &str, src: &str, iif: &str, sport: u16, dport: u16) -> Result<usize, RunError> {
    let (sp, dp) = (sport.to_string(), dport.to_string());
    let out = ns.ip(&["route", "get", dst, "from", src, "iif", iif, "ipproto", "tcp", "sport", &sp, "dport", &dp])?;
    if out.contains("dev g1") {
        Ok(0)
    } else if out.contains("dev g2") {
        Ok(1)
    } else {
        Err(RunError::Step(format!("{}: no gateway link in `{}`", ns.name(), out.trim())))
    }
}

/// Asks both routers' FIBs which link each direction of `tuples` 5-tuples
/// takes, with equal seeds and then with `rx`'s seed changed (restored
/// afterwards).
pub(super) fn hash_symmetry(lab: &Lab, tuples: usize, policy: u32) -> Result<HashSymmetry, RunError> {
    let ports: Vec<(u16, u16)> = (0..tuples as u32)
        .map(|i| {
            let x = i.wrapping_mul(0x9e37_79b9) ^ 0x5bd1_e995;
            (32768 + (x % 28000) as u16, [5001, 443, 80, 179][(x >> 20) as usize % 4])
        })
        .collect();
    let measure = || -> Result<(f64, f64), RunError> {
        let (mut same, mut on1) = (0usize, 0usize);
        for &(sp, dp) in &ports {
            let fwd = fib_choice(lab.ns(lab.ra), HOST_L, HOST_A, "a0", sp, dp)?;
            let rev = fib_choice(lab.ns(lab.rx), HOST_A, HOST_L, "l0", dp, sp)?;
            same += usize::from(fwd == rev);
            on1 += usize::from(fwd == 0);
        }
        let n = ports.len().max(1) as f64;
        Ok((same as f64 / n, on1 as f64 / n))
    };
    let (same_seed, on_link1) = measure()?;
    let rx = lab.ns(lab.rx);
    rx.set_sysctl("net.ipv4.fib_multipath_hash_seed", &(HASH_SEED ^ 0x00ff_ff00).to_string())?;
    let different = measure();
    rx.set_sysctl("net.ipv4.fib_multipath_hash_seed", &HASH_SEED.to_string())?;
    Ok(HashSymmetry {
        policy,
        tuples: ports.len(),
        same_seed,
        different_seeds: different?.0,
        on_link1,
        flows_merged_before_kill: 0.0,
    })
}

/// The counters of a gateway's metrics endpoint the run needs.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct GwMetrics {
    pub(super) data_out: u64,
    pub(super) full_out: u64,
}

impl GwMetrics {
    pub(super) fn yield_since(&self, before: &GwMetrics) -> Option<f64> {
        let d = self.data_out.checked_sub(before.data_out)?;
        let f = self.full_out.checked_sub(before.full_out)?;
        (d > 0).then(|| f as f64 / d as f64)
    }
}

/// Reads a gateway's Prometheus endpoint from inside its namespace.
pub(super) fn scrape(ns: &Netns) -> Result<GwMetrics, RunError> {
    let m = super::super::scrape(
        ns,
        &format!("127.0.0.1:{METRICS_PORT}"),
        &["px_gateway_inner_tcp_data_out_total", "px_gateway_inner_tcp_full_out_total"],
    )?;
    Ok(GwMetrics { data_out: m[0], full_out: m[1] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_that_stops_and_resumes_has_its_stall_measured_from_the_event() {
        let times: Vec<f64> = (0..100).map(|i| f64::from(i) * 0.01).collect();
        // Progress every sample except 0.30..0.55.
        let p: Vec<u64> = times
            .iter()
            .scan(0u64, |acc, t| {
                if !(0.30..0.55).contains(t) {
                    *acc += 10;
                }
                Some(*acc)
            })
            .collect();
        let s = stall_after(&times, &p, 0.32, 0.06);
        assert!((s - (0.55 - 0.32)).abs() < 0.011, "{s}");
        // A flow that never stops: 0.
        let steady: Vec<u64> = (0..100).collect();
        assert_eq!(stall_after(&times, &steady, 0.32, 0.06), 0.0);
        // A stall long before the event does not count.
        assert_eq!(stall_after(&times, &p, 0.9, 0.06), 0.0);
    }

    #[test]
    fn flaps_are_the_downs_besides_the_kill() {
        let log = "2026-11-27 13:05:35.726 <TRACE> bfd1: State changed to up\n\
                   2026-11-27 13:05:40.185 <TRACE> via1: State changed to up\n\
                   2026-11-27 13:05:41.000 <INFO> something else\n\
                   2026-11-27 13:05:44.672 <TRACE> via1: State changed to down\n\
                   2026-11-27 13:05:46.672 <TRACE> via2: State changed to down\n";
        let ev = routing_events(log);
        assert_eq!(ev.len(), 4);
        assert_eq!(bgp_downs(&ev).saturating_sub(1), 1);
    }

    #[test]
    fn bins_turn_byte_counters_into_rates() {
        let raw: Vec<RawSample> =
            (0..=20u32).map(|i| (f64::from(i) * 0.01, vec![], [u64::from(i) * 12_500, 0])).collect();
        let s = bin_samples(&raw, 0.1);
        assert_eq!(s.len(), 2);
        assert!((s[0].gw1_mbps - 10.0).abs() < 1e-6, "{:?}", s[0]);
        assert_eq!(s[0].gw2_mbps, 0.0);
    }
}
