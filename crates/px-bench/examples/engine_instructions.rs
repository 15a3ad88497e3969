//! One fixed pass of the engine over the 800-flow trace, for counting
//! instructions: `valgrind --tool=callgrind` on a release build of this
//! example gives a figure that is the same run after run, whatever else the
//! machine does (this VM has no PMU, and wall-clock times on it are noise).
//! Merge: the inbound trace's bulk flows, opened by their handshakes first;
//! split: the outbound trace, cut in software. Prints the engine's output
//! counts, so that two builds can be checked to do the same work.
//!
//! `cargo build --release -p px-bench --example engine_instructions`, then
//! `valgrind --tool=callgrind target/release/examples/engine_instructions`.

use std::time::{Duration, Instant};

use px_bench::trace::{Chunk, Trace, TraceConfig};
use px_gateway::{Config, Engine, Port};
use px_wire::offload::{Checksum, PacketMeta};

fn run(engine: &mut Engine, c: &mut Chunk, from: Port, base: Instant) -> usize {
    let mut out = 0;
    for i in 0..c.frames.len() {
        let now = base + Duration::from_nanos(c.frames[i].t_ns);
        while let Some(d) = engine.poll_timeout().filter(|d| *d <= now) {
            engine.handle_timeout(d);
        }
        let v =
            engine.handle_packet(now, from, c.frame_mut(i), PacketMeta { csum: Checksum::Valid, ..PacketMeta::PLAIN });
        while let Some(t) = engine.poll_transmit() {
            out += 1;
            engine.recycle(t.buf);
        }
        let _ = std::hint::black_box(v);
    }
    out
}

fn pass(cfg: TraceConfig, from: Port, packets: usize, engine_cfg: Config) -> (usize, u64) {
    let mut t = Trace::new(cfg, 8948);
    let [mut syns, mut synacks] = t.handshakes(1460, 8960);
    let mut c = Chunk::default();
    t.fill(&mut c, packets, usize::MAX);
    let mut e = Engine::new(engine_cfg).expect("the default configuration is valid");
    let base = Instant::now();
    run(&mut e, &mut syns, from, base);
    run(&mut e, &mut synacks, from.other(), base);
    let out = run(&mut e, &mut c, from, base);
    e.flush_all(base + Duration::from_secs(3600));
    (out, e.counters().merged_out)
}

fn main() {
    let merge = pass(
        TraceConfig { small_share: 0.0, ..TraceConfig::inbound_default() },
        Port::Outer,
        200_000,
        Config::default(),
    );
    let split =
        pass(TraceConfig::outbound_default(), Port::Inner, 30_000, Config { outer_gso: false, ..Config::default() });
    println!("merge: {} frames out, {} merged; split: {} frames out", merge.0, merge.1, split.0);
}
