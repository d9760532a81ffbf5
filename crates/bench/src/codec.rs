//! `hirt bench codec [--json] [--quick]`: GF(2^8) region kernels (ours, every kernel this CPU
//! runs, next to Intel ISA-L's `gf_vect_mad` in the same process) and the RLC encoder/decoder.
//!
//! Every figure is the fastest of many short batches (see [`crate::timing`]); the median is
//! printed beside it in the JSON. GB/s are 10^9 bytes of source region per second.

use std::hint::black_box;
use std::time::Duration;

use anyhow::Result;
use hirt_gf::Kernel;
use serde_json::{json, Value};

use crate::isal::Isal;
use crate::rlc_bench;
use crate::timing::{measure, Sample};

/// Region sizes: a small packet, a typical tunnel payload, a jumbo frame.
pub const SIZES: [usize; 3] = [64, 1280, 9000];

/// Configuration of `hirt bench codec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CodecBenchConfig {
    /// Print the results as JSON (ending with a `summary` object) instead of tables.
    pub json: bool,
    /// A short run (under 10 s): fewer batches per figure, so noisier numbers.
    pub quick: bool,
}

/// How long each figure is measured.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Per GF figure.
    pub gf: Duration,
    /// Per RLC figure.
    pub rlc: Duration,
    /// Source packets pushed per RLC throughput run (a multiple of the window).
    pub rlc_packets: usize,
}

impl Budget {
    /// Full run (~45 s) or `--quick` (< 10 s).
    pub fn new(quick: bool) -> Budget {
        if quick {
            Budget {
                gf: Duration::from_millis(60),
                rlc: Duration::from_millis(300),
                rlc_packets: 20_000,
            }
        } else {
            Budget {
                gf: Duration::from_millis(400),
                rlc: Duration::from_millis(2500),
                rlc_packets: 100_000,
            }
        }
    }
}

/// Runs the command.
pub fn run(args: CodecBenchConfig) -> Result<()> {
    let budget = Budget::new(args.quick);
    let report = collect(budget)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_tables(&report);
    }
    Ok(())
}

/// One GF mul_add figure.
struct GfFigure {
    implementation: &'static str,
    bytes: usize,
    sample: Sample,
}

impl GfFigure {
    fn gbps(&self) -> f64 {
        self.bytes as f64 / self.sample.best / 1e9
    }
    fn to_json(&self) -> Value {
        json!({
            "impl": self.implementation,
            "bytes": self.bytes,
            "gbps": round(self.gbps(), 2),
            "gbps_median": round(self.bytes as f64 / self.sample.median / 1e9, 2),
            "ns_per_call": round(self.sample.best * 1e9, 2),
        })
    }
}

/// A buffer of `len` bytes starting on a 64-byte boundary (the same for us and ISA-L, so neither
/// gets split cache lines the other does not).
struct Aligned {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, seed: u8) -> Aligned {
        let mut buf: Vec<u8> = (0..len + 64)
            .map(|i| (i as u8).wrapping_mul(167).wrapping_add(seed))
            .collect();
        let off = buf.as_mut_ptr().align_offset(64).min(63);
        Aligned { buf, off, len }
    }
    fn get(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

const COEF: u8 = 0x8e;

/// Measures every supported kernel of ours and every ISA-L variant at every size.
fn gf_figures(budget: Budget, isal: Option<&Isal>, errors: &mut Vec<String>) -> Vec<GfFigure> {
    let mut out = Vec::new();
    for &bytes in &SIZES {
        let src = Aligned::new(bytes, 1);
        let mut dst = Aligned::new(bytes, 2);
        // Both sides are timed through the same closure shape: pre-sliced buffers, one call
        // through a function pointer (ours: the kernel table; ISA-L: dlsym), which the
        // compiler can neither inline nor elide.
        let s = src.get();
        let d = dst.get_mut();
        for &k in Kernel::ALL.iter().filter(|k| k.is_supported()) {
            let sample = measure(budget.gf, || {
                k.mul_add(black_box(&mut *d), black_box(s), COEF)
            });
            out.push(GfFigure {
                implementation: k.name(),
                bytes,
                sample,
            });
        }
        if let Some(isal) = isal {
            let mut table = isal.table(COEF);
            for (v, name) in isal.mad_variants().enumerate() {
                // Cross-check before timing: ISA-L and we use the same field, so the bytes match.
                let mut ours = d.to_vec();
                hirt_gf::mul_add(&mut ours, s, COEF);
                let mut theirs = d.to_vec();
                isal.mad(v, &mut table, s, &mut theirs);
                if ours != theirs {
                    errors.push(format!(
                        "{name} differs from hirt-gf at {bytes} B; not timed"
                    ));
                    continue;
                }
                let sample = measure(budget.gf, || {
                    isal.mad(v, &mut table, black_box(s), black_box(&mut *d))
                });
                out.push(GfFigure {
                    implementation: name,
                    bytes,
                    sample,
                });
            }
        }
    }
    out
}

/// One RLC repair's worth of multiply-accumulate: W = 200 sources of 1280 B into one repair,
/// ours (`mul_add_many`, best kernel) against ISA-L's `gf_vect_dot_prod`.
fn multi_source(budget: Budget, isal: Option<&Isal>, errors: &mut Vec<String>) -> Vec<Value> {
    const W: usize = 200;
    const LEN: usize = 1280;
    let srcs: Vec<Aligned> = (0..W).map(|i| Aligned::new(LEN, i as u8)).collect();
    let views: Vec<&[u8]> = srcs.iter().map(|s| s.get()).collect();
    let coefs: Vec<u8> = (0..W).map(|i| (i as u8).wrapping_mul(29) | 2).collect();
    let mut dst = Aligned::new(LEN, 3);
    let mut rows = Vec::new();
    let mut push = |name: &str, s: Sample| {
        rows.push(json!({
            "impl": name,
            "sources": W,
            "bytes": LEN,
            "gbps": round((W * LEN) as f64 / s.best / 1e9, 2),
            "ns_per_repair": round(s.best * 1e9, 1),
        }))
    };
    let k = Kernel::best();
    let s = measure(budget.gf, || {
        dst.get_mut().fill(0);
        k.mul_add_many(black_box(dst.get_mut()), &views, &coefs)
    });
    push(&format!("{}/mul_add_many", k.name()), s);
    // The indexed form over a ring of slots (how a sliding-window encoder holds its window).
    let start = 77;
    let s = measure(budget.gf, || {
        dst.get_mut().fill(0);
        k.mul_add_terms(black_box(dst.get_mut()), W, |j| {
            let i = if start + j >= W {
                start + j - W
            } else {
                start + j
            };
            (views[i], coefs[i])
        })
    });
    push(&format!("{}/mul_add_terms", k.name()), s);
    // The naive form: one mul_add pass over the repair per source.
    let s = measure(budget.gf, || {
        dst.get_mut().fill(0);
        for (v, &c) in views.iter().zip(&coefs) {
            k.mul_add(black_box(dst.get_mut()), v, c);
        }
    });
    push(&format!("{}/mul_add x{W}", k.name()), s);
    if let Some(isal) = isal {
        let mut tables = isal.dot_tables(&coefs);
        let mut ptrs = Vec::with_capacity(W);
        let mut ours = vec![0u8; LEN];
        k.mul_add_many(&mut ours, &views, &coefs);
        isal.dot_prod(&mut tables, &views, &mut ptrs, dst.get_mut());
        if ours != dst.get() {
            errors.push("gf_vect_dot_prod differs from hirt-gf mul_add_many; not timed".into());
        } else {
            let s = measure(budget.gf, || {
                isal.dot_prod(&mut tables, &views, &mut ptrs, black_box(dst.get_mut()))
            });
            push("isal_dot_prod", s);
        }
    }
    rows
}

fn best_at(figs: &[GfFigure], bytes: usize, isal: bool) -> Option<&GfFigure> {
    figs.iter()
        .filter(|f| f.bytes == bytes && f.implementation.starts_with("isal") == isal)
        .max_by(|a, b| a.gbps().total_cmp(&b.gbps()))
}

/// Runs every measurement and assembles the JSON report.
pub fn collect(budget: Budget) -> Result<Value> {
    let mut errors = Vec::new();
    let isal = match Isal::load() {
        Ok(i) => Some(i),
        Err(e) => {
            errors.push(format!("ISA-L unavailable: {e}"));
            None
        }
    };
    let sched0 = crate::timing::SchedStat::read();
    let gf = gf_figures(budget, isal.as_ref(), &mut errors);
    let many = multi_source(budget, isal.as_ref(), &mut errors);
    let rlc = rlc_bench::run(budget, &mut errors);
    let contention = crate::timing::SchedStat::read()
        .zip(sched0)
        .map(|(b, a)| b.since(&a));
    if let Some(c) = &contention {
        if c.cpu_share < 0.7 {
            errors.push(format!(
                "machine busy: this run was on a CPU {:.0}% of its wall time (waiting for one \
                 {:.0}%); figures are likely low, rerun on an idle machine",
                c.cpu_share * 100.0,
                c.wait_share * 100.0
            ));
        }
    }

    let ours = best_at(&gf, 1280, false);
    let theirs = best_at(&gf, 1280, true);
    let mut summary = json!({
        "gf_best_kernel": ours.map(|f| f.implementation),
        "gf_best_gbps_1280": ours.map(|f| round(f.gbps(), 2)),
        "isal_best_impl": theirs.map(|f| f.implementation),
        "isal_best_gbps_1280": theirs.map(|f| round(f.gbps(), 2)),
        "ratio_ours_over_isal_1280": match (ours, theirs) {
            (Some(o), Some(t)) => json!(round(o.gbps() / t.gbps(), 3)),
            _ => Value::Null,
        },
    });
    for &bytes in &[64usize, 9000] {
        summary[format!("gf_best_gbps_{bytes}")] =
            json!(best_at(&gf, bytes, false).map(|f| round(f.gbps(), 2)));
        summary[format!("isal_best_gbps_{bytes}")] =
            json!(best_at(&gf, bytes, true).map(|f| round(f.gbps(), 2)));
    }
    if let Value::Object(extra) = &rlc.summary {
        for (k, v) in extra {
            summary[k.as_str()] = v.clone();
        }
    }
    Ok(json!({
        "machine": machine(),
        "contention": contention.map(|c| json!({
            "cpu_share": round(c.cpu_share, 3),
            "runqueue_wait_share": round(c.wait_share, 3),
        })),
        "method": "best of many ~300 us batches per figure (median alongside); GB/s = 1e9 source bytes/s",
        "gf_mul_add": gf.iter().map(GfFigure::to_json).collect::<Vec<_>>(),
        "gf_multi_source": many,
        "rlc_encoder_repair": rlc.repair,
        "rlc_throughput": rlc.throughput,
        "errors": errors,
        "summary": summary,
    }))
}

/// CPU model, core count and the SIMD features that pick our kernels.
fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let kernels: Vec<&str> = Kernel::ALL
        .iter()
        .filter(|k| k.is_supported())
        .map(|k| k.name())
        .collect();
    json!({ "cpu": cpu, "cores": cores, "kernels": kernels, "active_kernel": hirt_gf::active().name() })
}

fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

fn print_tables(r: &Value) {
    let m = &r["machine"];
    println!(
        "machine: {} ({} cores), kernels {}",
        m["cpu"], m["cores"], m["kernels"]
    );
    if let Some(c) = r["contention"]["cpu_share"].as_f64() {
        println!("this run was on a CPU {:.0}% of its wall time", c * 100.0);
    }
    println!("\nGF(2^8) mul_add (dst ^= c*src), GB/s, best batch [median]");
    print!("{:<14}", "impl");
    for b in SIZES {
        print!("{:>22}", format!("{b} B"));
    }
    println!();
    let rows = r["gf_mul_add"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for f in &rows {
        let n = f["impl"].as_str().unwrap_or("?").to_string();
        if !names.contains(&n) {
            names.push(n);
        }
    }
    for n in &names {
        print!("{n:<14}");
        for b in SIZES {
            match rows
                .iter()
                .find(|f| f["impl"] == n.as_str() && f["bytes"] == b)
            {
                Some(f) => print!(
                    "{:>22}",
                    format!(
                        "{:.2} [{:.2}]",
                        f["gbps"].as_f64().unwrap_or(0.0),
                        f["gbps_median"].as_f64().unwrap_or(0.0)
                    )
                ),
                None => print!("{:>22}", "-"),
            }
        }
        println!();
    }
    println!("\nOne repair over W=200 x 1280 B (multi-source multiply-accumulate)");
    for f in r["gf_multi_source"].as_array().cloned().unwrap_or_default() {
        println!(
            "  {:<20} {:>8.2} GB/s  {:>10.1} ns/repair",
            f["impl"].as_str().unwrap_or("?"),
            f["gbps"].as_f64().unwrap_or(0.0),
            f["ns_per_repair"].as_f64().unwrap_or(0.0)
        );
    }
    rlc_bench::print(r);
    for e in r["errors"].as_array().cloned().unwrap_or_default() {
        println!("note: {}", e.as_str().unwrap_or(""));
    }
    println!("\nsummary: {}", r["summary"]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_every_figure_and_the_summary() {
        let budget = Budget {
            gf: Duration::ZERO,
            rlc: Duration::ZERO,
            rlc_packets: 2048,
        };
        let r = collect(budget).expect("collect");
        let kernels = Kernel::ALL.iter().filter(|k| k.is_supported()).count();
        let ours = r["gf_mul_add"]
            .as_array()
            .expect("array")
            .iter()
            .filter(|f| !f["impl"].as_str().unwrap_or("isal").starts_with("isal"))
            .count();
        assert_eq!(ours, kernels * SIZES.len());
        assert_eq!(r["rlc_encoder_repair"].as_array().map(Vec::len), Some(3));
        assert_eq!(r["rlc_throughput"].as_array().map(Vec::len), Some(3));
        let s = &r["summary"];
        for key in ["gf_best_gbps_1280", "encode_mpps_3pct", "decode_mpps_3pct"] {
            assert!(
                s[key].as_f64().is_some_and(|v| v > 0.0),
                "{key}: {}",
                s[key]
            );
        }
        assert!(s.get("isal_best_gbps_1280").is_some());
        let errors = r["errors"].as_array().expect("errors");
        // Only notes about the environment, never a mismatch.
        let benign = |e: &str| e.starts_with("ISA-L unavailable") || e.starts_with("machine busy");
        assert!(
            errors.iter().all(|e| e.as_str().is_some_and(benign)),
            "{errors:?}"
        );
    }
}
