//! `cargo bench -p hirt-gf`: region mul_add per kernel at 64, 1280 and 9000 bytes, plus the
//! multi-source mul_add_many of an RLC repair (W = 200 sources of 1280 B).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hirt_gf::Kernel;

fn mul_add(c: &mut Criterion) {
    let mut g = c.benchmark_group("mul_add");
    for &len in &[64usize, 1280, 9000] {
        let src: Vec<u8> = (0..len).map(|i| (i * 37 + 1) as u8).collect();
        let mut dst = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        for &k in Kernel::ALL.iter().filter(|k| k.is_supported()) {
            g.bench_with_input(BenchmarkId::new(k.name(), len), &len, |b, _| {
                b.iter(|| k.mul_add(black_box(&mut dst), black_box(&src), black_box(0x8e)))
            });
        }
    }
    g.finish();
}

fn mul_add_many(c: &mut Criterion) {
    let mut g = c.benchmark_group("mul_add_many_w200_1280");
    let srcs: Vec<Vec<u8>> = (0..200)
        .map(|j| (0..1280).map(|i| (i * 37 + j * 11 + 1) as u8).collect())
        .collect();
    let views: Vec<&[u8]> = srcs.iter().map(|s| &s[..]).collect();
    let coefs: Vec<u8> = (0..200).map(|j| (j * 7 + 2) as u8 | 2).collect();
    let mut dst = vec![0u8; 1280];
    g.throughput(Throughput::Bytes(200 * 1280));
    for &k in Kernel::ALL.iter().filter(|k| k.is_supported()) {
        g.bench_function(k.name(), |b| {
            b.iter(|| k.mul_add_many(black_box(&mut dst), black_box(&views), black_box(&coefs)))
        });
    }
    g.finish();
}

criterion_group!(benches, mul_add, mul_add_many);
criterion_main!(benches);
