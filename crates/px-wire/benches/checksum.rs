//! The payload loops against `memcpy` of the same bytes, in the L1/L2
//! cache: `copy_and_sum` (a split piece, a merged segment's payload: copy
//! and one's complement sum in one pass) and `Sum::of` (sum only), for a
//! 1448-byte piece and an 8948-byte segment.
//! `cargo bench -p px-wire --bench checksum`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use px_wire::checksum::{Sum, copy_and_sum};

fn bench(c: &mut Criterion) {
    for len in [1448usize, 8948] {
        let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; len];
        let mut g = c.benchmark_group(format!("payload_{len}"));
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function("memcpy", |b| b.iter(|| dst.copy_from_slice(black_box(&src))));
        g.bench_function("copy_and_sum", |b| b.iter(|| copy_and_sum(&mut dst, black_box(&src))));
        g.bench_function("sum", |b| b.iter(|| Sum::of(black_box(&src))));
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
