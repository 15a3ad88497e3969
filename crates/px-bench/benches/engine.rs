//! Criterion benches of the engine's hot paths on a fixed piece of the
//! 800-flow trace, each beside `memcpy` of the same payload bytes: merge
//! (inbound), software split and GSO hand-off (outbound).

use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use px_bench::trace::{Chunk, Trace, TraceConfig};
use px_gateway::{Config, Engine, Port};
use px_wire::offload::{Checksum, PacketMeta};

fn chunk(cfg: TraceConfig, packets: usize) -> Chunk {
    let mut t = Trace::new(cfg, 8948);
    let mut c = Chunk::default();
    t.fill(&mut c, packets, usize::MAX);
    c
}

fn run(engine: &mut Engine, c: &mut Chunk, from: Port, base: Instant) {
    for i in 0..c.frames.len() {
        let now = base + Duration::from_nanos(c.frames[i].t_ns);
        while let Some(d) = engine.poll_timeout().filter(|d| *d <= now) {
            engine.handle_timeout(d);
        }
        let v =
            engine.handle_packet(now, from, c.frame_mut(i), PacketMeta { csum: Checksum::Valid, ..PacketMeta::PLAIN });
        while let Some(t) = engine.poll_transmit() {
            engine.recycle(t.buf);
        }
        let _ = std::hint::black_box(v);
    }
}

fn merge(cr: &mut Criterion) {
    let c = chunk(TraceConfig { small_share: 0.0, ..TraceConfig::inbound_default() }, 4096);
    let mut g = cr.benchmark_group("merge_800_flows");
    g.throughput(Throughput::Bytes(c.payload_bytes));
    g.bench_function("engine", |b| {
        b.iter_batched(
            || {
                (
                    Engine::new(Config::default()).unwrap(),
                    Chunk { data: c.data.clone(), frames: c.frames.clone(), payload_bytes: 0 },
                )
            },
            |(mut e, mut c)| run(&mut e, &mut c, Port::Outer, Instant::now()),
            BatchSize::LargeInput,
        )
    });
    let mut sinks = vec![vec![0u8; 8948]; 1024];
    g.bench_function("memcpy_same_payload", |b| {
        b.iter(|| {
            let mut at = vec![0usize; sinks.len()];
            for f in &c.frames {
                let p = &c.data[f.offset + f.payload_at as usize..f.offset + f.len];
                let k = f.flow as usize % sinks.len();
                let a = if at[k] + p.len() > 8948 { 0 } else { at[k] };
                sinks[k][a..a + p.len()].copy_from_slice(p);
                at[k] = a + p.len();
            }
            std::hint::black_box(&sinks);
        })
    });
    g.finish();
}

fn split(cr: &mut Criterion) {
    let c = chunk(TraceConfig::outbound_default(), 1024);
    let mut g = cr.benchmark_group("split_8948_to_1448");
    g.throughput(Throughput::Bytes(c.payload_bytes));
    for (name, gso) in [("software", false), ("gso_handoff", true)] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let e = Engine::new(Config { outer_gso: gso, ..Config::default() }).unwrap();
                    (e, Chunk { data: c.data.clone(), frames: c.frames.clone(), payload_bytes: 0 })
                },
                |(mut e, mut c)| run(&mut e, &mut c, Port::Inner, Instant::now()),
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3));
    targets = merge, split
}
criterion_main!(benches);
