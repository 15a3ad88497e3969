//! Per-frame CPU costs of px-io's pure functions (no syscalls): decoding and
//! encoding the virtio-net header, the symmetric flow hash, and completing a
//! partial checksum. `cargo bench -p px-io --bench hot_path`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use px_io::{PacketMeta, VnetHeader, symmetric_flow_hash, worker_for};
use px_wire::offload::{Checksum, complete_partial};

fn frame_v4(payload: usize) -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([198, 51, 100, 1], [203, 0, 113, 1], 64)
        .tcp(40000, 443, 1, 65535)
        .write(&mut f, &vec![7u8; payload])
        .unwrap();
    f
}

fn frame_v6() -> Vec<u8> {
    let mut f = Vec::new();
    let (s, d) = (
        [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    );
    etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv6(s, d, 64)
        .tcp(40000, 443, 1, 65535)
        .write(&mut f, &[7u8; 1400])
        .unwrap();
    f
}

fn bench(c: &mut Criterion) {
    let meta = PacketMeta::tcp_gso(false, 1448, 34, 66);
    let hdr = meta.to_bytes();
    c.bench_function("vnet_parse", |b| b.iter(|| PacketMeta::parse(black_box(&hdr))));
    c.bench_function("vnet_encode", |b| b.iter(|| black_box(&meta).to_bytes()));

    let (v4, v6) = (frame_v4(1400), frame_v6());
    c.bench_function("flow_hash_v4", |b| b.iter(|| worker_for(symmetric_flow_hash(black_box(&v4)).unwrap_or(0), 2)));
    c.bench_function("flow_hash_v6", |b| b.iter(|| symmetric_flow_hash(black_box(&v6))));

    let mut g = c.benchmark_group("finish_checksum");
    for payload in [1400usize, 64_000] {
        let mut f = frame_v4(payload);
        g.throughput(Throughput::Bytes(f.len() as u64));
        g.bench_function(format!("tcp_{payload}"), |b| {
            b.iter(|| complete_partial(black_box(&mut f), Checksum::Partial { start: 34, offset: 16 }))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
