//! The generator's replay (`bench/dpdk/px_dpdk_gen.c`), sans-I/O: the same
//! frames in the same order into an engine whose clock is the wall clock of
//! a forwarder that takes one frame every `pace_ns`.
//!
//! Why it matters: a trace's flows are written in trace time (800 flows of
//! 1–2 Gbps, 1.2 Tbps together; each sends a 64 KB TSO burst about every
//! 350 µs), and a merge's hold ends after 500 µs of the gateway's own
//! clock. One core forwards about 24 Gbps, so replaying all 800 flows at
//! once plays the trace 50 times slower than it was written: every flow
//! then sends its 64 KB bursts 17 ms apart (a 30 Mbps flow with the bursts
//! of a 1.5 Gbps one, which no sender makes), and the tail of every burst
//! waits out the hold alone: yield 0.85 where the engine on the trace's own
//! clock makes 0.95. The generator therefore replays the flows a window
//! at a time ([`Window`]): each flow at its trace rate for about
//! [`ON_NS`] of trace time, then the next flows, the window's size fitted
//! to how fast the forwarder takes frames ([`lap_budget`]).

use std::time::{Duration, Instant};

use px_gateway::{Config, Engine, Port};
use px_wire::offload::Checksum;

use super::TraceFrames;
use crate::drive::{drain, feed, open_flows, open_windows};
use crate::replay::{FlowIds, PassStep};
use crate::trace::Chunk;

/// How long (trace time) a window of flows is replayed before the next.
pub const ON_NS: u64 = 10_000_000;
/// The window's size before the first fit.
pub const FIRST_WINDOW: usize = 8;
/// A window's lap holds at least this many frames (more flows if need
/// be): a zero-copy memif client holds a sent frame until the peer has read
/// its slot, and the generator cannot move a frame on while it is held:
/// with a short lap it waits for its own frames, and the forwarder's ring
/// holds at most a lap.
pub const MIN_LAP_FRAMES: usize = 512;

/// How many flows the replay sends at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtOnce {
    /// Every flow, lap after lap (the replay before windows).
    All,
    /// A window of this many flows.
    Fixed(usize),
    /// A window fitted after each to the forwarder's pace ([`lap_budget`]).
    Fitted,
}

impl AtOnce {
    /// The generator's `--at-once` value.
    pub fn gen_arg(self) -> String {
        match self {
            AtOnce::All => "all".into(),
            AtOnce::Fixed(k) => k.to_string(),
            AtOnce::Fitted => "fit".into(),
        }
    }
}

impl std::str::FromStr for AtOnce {
    type Err = String;

    fn from_str(s: &str) -> Result<AtOnce, String> {
        match s {
            "all" => Ok(AtOnce::All),
            "fit" => Ok(AtOnce::Fitted),
            _ => match s.parse::<usize>() {
                Ok(k) if k >= 1 => Ok(AtOnce::Fixed(k)),
                _ => Err(format!("{s:?}: give fit, all, or a number of flows (1 or more)")),
            },
        }
    }
}

/// Frames a window's lap should hold so that it takes as long as the
/// trace's lap (`lap_ns`), the forwarder having taken `frames` frames in
/// `wall_ns`: then every flow of the window moves at its trace rate.
pub fn lap_budget(frames: u64, wall_ns: u64, lap_ns: u64) -> usize {
    (frames as f64 * lap_ns as f64 / wall_ns.max(1) as f64) as usize
}

/// Laps of the trace each window is replayed for: [`ON_NS`] of trace time.
pub fn laps_per_window(lap_ns: u64) -> u64 {
    ON_NS.div_ceil(lap_ns.max(1)).max(1)
}

/// A lap's length in trace time: from the first frame to one mean gap
/// after the last.
pub fn lap_ns(c: &Chunk) -> u64 {
    let (Some(a), Some(b)) = (c.frames.first(), c.frames.last()) else { return 0 };
    let n = c.frames.len() as u64;
    if n < 2 { 1 } else { (b.t_ns - a.t_ns) * n / (n - 1) }
}

/// The flows `[start, end)` replayed next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: usize,
    pub end: usize,
}

impl Window {
    /// The window after this one: `k` flows from where this one ended
    /// (wrapping to flow 0), more while its lap holds fewer than `budget`
    /// frames or [`MIN_LAP_FRAMES`]; `per_flow[i]` is flow i's frames in a
    /// lap.
    pub fn next(self, k: usize, budget: usize, per_flow: &[usize]) -> Window {
        let start = if self.end >= per_flow.len() { 0 } else { self.end };
        let (mut end, mut frames, least) = (start, 0, budget.max(MIN_LAP_FRAMES));
        while end < per_flow.len() && (end - start < k || frames < least) {
            frames += per_flow[end];
            end += 1;
        }
        Window { start, end }
    }
}

/// What the engine made of the paced replay.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PacedRun {
    pub yield_: f64,
    /// Holds sent because their 500 µs ran out.
    pub timeouts: u64,
    /// Flows sent at once, mean over the windows.
    pub mean_at_once: f64,
    pub frames: u64,
}

/// Feeds `frames` frames of the generator's replay of `t` (inbound) into a
/// fresh engine, one every `pace_ns` of the engine's clock.
pub fn replay(t: &TraceFrames, ecfg: &Config, at_once: AtOnce, pace_ns: f64, frames: u64) -> PacedRun {
    let mut engine = Engine::new(ecfg.clone()).expect("benchmark engine configuration is valid");
    let (mut syns, mut synacks) = (Chunk::default(), Chunk::default());
    super::copy_chunk(&t.syns, &mut syns);
    super::copy_chunk(&t.synacks, &mut synacks);
    open_flows(&mut engine, [&mut syns, &mut synacks], Port::Outer, Checksum::Valid);
    let base = Instant::now();
    open_windows(&mut engine, &t.data, Port::Outer, Checksum::Valid, base);
    let primed = engine.counters().clone();

    let mut ids = FlowIds::default();
    let flow_of = ids.ids_of(&t.data);
    let flows = ids.len();
    let step = PassStep::of(&t.data, &flow_of, flows);
    let lap = lap_ns(&t.data);
    let laps = laps_per_window(lap);
    // The frames as the generator holds them: moved on once per send.
    let mut cur = Chunk::default();
    super::copy_chunk(&t.data, &mut cur);
    let mut sent_before = vec![false; cur.frames.len()];
    let mut k = match at_once {
        AtOnce::All => flows,
        AtOnce::Fixed(k) => k.clamp(1, flows),
        AtOnce::Fitted => FIRST_WINDOW.min(flows),
    };
    let mut per_flow = vec![0usize; flows];
    flow_of.iter().for_each(|&i| per_flow[i as usize] += 1);
    let mut budget = 0;
    let mut w = Window { start: flows, end: flows }.next(k, budget, &per_flow);
    let (mut sent, mut windows, mut k_sum) = (0u64, 0u64, 0u64);
    let mut work = Chunk::default();
    while sent < frames {
        let members: Vec<usize> =
            (0..cur.frames.len()).filter(|&i| (w.start..w.end).contains(&(flow_of[i] as usize))).collect();
        let before = sent;
        for _ in 0..laps {
            work.clear();
            for &i in &members {
                if sent >= frames {
                    break;
                }
                if sent_before[i] {
                    step.advance_frame(cur.frame_mut(i), flow_of[i]);
                }
                sent_before[i] = true;
                let f = cur.frames[i];
                let offset = work.data.len();
                work.data.extend_from_slice(&cur.data[f.offset..f.offset + f.len]);
                let t_ns = (sent as f64 * pace_ns) as u64;
                work.frames.push(crate::trace::FrameRef { offset, t_ns, ..f });
                sent += 1;
            }
            feed(&mut engine, &mut work, Port::Outer, Checksum::Valid, base);
        }
        windows += 1;
        k_sum += (w.end - w.start) as u64;
        if at_once == AtOnce::Fitted {
            let wall = ((sent - before) as f64 * pace_ns) as u64;
            k = 1;
            budget = lap_budget(sent - before, wall, lap);
        }
        w = w.next(k, budget, &per_flow);
    }
    engine.flush_all(base + Duration::from_nanos((sent as f64 * pace_ns) as u64) + ecfg.merge_timeout);
    drain(&mut engine);
    let mut c = engine.counters().clone();
    c.inner_tcp_data_out -= primed.inner_tcp_data_out;
    c.inner_tcp_full_out -= primed.inner_tcp_full_out;
    PacedRun {
        yield_: c.conversion_yield(),
        timeouts: c.flushes(px_gateway::FlushReason::Timeout),
        mean_at_once: k_sum as f64 / windows.max(1) as f64,
        frames: sent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TraceConfig;
    use crate::vs_dpdk::trace_frames;

    fn inbound(flows: usize, packets: usize) -> TraceFrames {
        let cfg = TraceConfig { flows, ..TraceConfig::inbound_default() };
        let mut t = trace_frames(&cfg, packets, 9000, 1500);
        t.synacks.append(&t.data.receiver_acks());
        t
    }

    fn engine() -> Config {
        Config { imtu: 9000, emtu: 1500, max_flows: 1 << 16, ..Config::default() }
    }

    #[test]
    fn a_laps_budget_is_what_the_forwarder_takes_in_a_trace_lap() {
        // 20 000 frames in 10 ms: 2 Mpps; a 1 ms lap then holds 2000.
        assert_eq!(lap_budget(20_000, 10_000_000, 1_000_000), 2000);
        assert_eq!(lap_budget(20_000, 0, 1_000_000), 20_000_000_000);
        // A window of 3 flows of 1000 frames, or as many as the budget needs.
        let w = Window { start: 9, end: 9 };
        assert_eq!(w.next(1, 2500, &[1000; 9]), Window { start: 0, end: 3 });
        assert_eq!(w.next(2, 0, &[1000; 9]), Window { start: 0, end: 2 });
    }

    #[test]
    fn at_once_reads_what_the_generator_takes() {
        for s in ["fit", "all", "16"] {
            assert_eq!(s.parse::<AtOnce>().unwrap().gen_arg(), s);
        }
        assert!("0".parse::<AtOnce>().is_err());
        assert!("some".parse::<AtOnce>().unwrap_err().contains("fit, all"));
    }

    #[test]
    fn windows_cover_every_flow_and_wrap() {
        let per_flow = [1000; 7];
        let mut w = Window { start: 7, end: 7 };
        let mut seen = vec![0; 7];
        for _ in 0..5 {
            w = w.next(3, 0, &per_flow);
            (w.start..w.end).for_each(|i| seen[i] += 1);
        }
        // 0-3, 3-6, 6-7, 0-3, 3-6.
        assert_eq!(seen, [2, 2, 2, 2, 2, 2, 1]);
        // A lap of at least MIN_LAP_FRAMES frames: more flows than asked.
        let w = Window { start: 0, end: 0 }.next(1, 0, &[300, 200, 20, 300]);
        assert_eq!((w.start, w.end), (0, 3));
        assert_eq!(laps_per_window(ON_NS / 4), 4);
        assert_eq!(laps_per_window(ON_NS * 3), 1);
    }

    /// The cause of issue 37's inbound yield of 0.85: 800 flows at once,
    /// one frame every 493 ns (px's 2.03 Mpps on memif), leave the tail of
    /// every burst to the hold's timeout; the same frames a window at a
    /// time, each flow at its trace rate, merge as on the trace's clock.
    #[test]
    fn replaying_every_flow_at_once_slows_them_until_holds_time_out() {
        let t = inbound(800, 100_000);
        let all = replay(&t, &engine(), AtOnce::All, 493.0, 400_000);
        let fitted = replay(&t, &engine(), AtOnce::Fitted, 493.0, 400_000);
        assert!(all.yield_ < 0.88, "all at once: {all:?}");
        assert!(fitted.yield_ >= 0.93, "a window at a time: {fitted:?}");
        assert!(fitted.timeouts * 4 < all.timeouts, "{fitted:?} against {all:?}");
        assert!((8.0..40.0).contains(&fitted.mean_at_once), "{fitted:?}");
    }
}
