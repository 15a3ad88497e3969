//! `px bench engine --vs dpdk`: the engine and DPDK 22.11's GRO/GSO on the
//! same frames, alternating run by run, both pinned to one CPU (ours with
//! `sched_setaffinity`, the harness with `taskset` and EAL `-l`).
//!
//! Without DPDK the engine side still runs; the DPDK side is reported absent
//! (exit 3 and the reason; with `--json`, `"dpdk": null` and `dpdk_absent`).

use std::path::PathBuf;
use std::process::ExitCode;

use px_bench::BenchConfig;
use px_bench::vs_dpdk::{self, DPDK_SEMANTICS, DpdkRun, HarnessArgs, SideRun, Spread};
use px_gateway::{Config, Port};
use px_wire::offload::Checksum;
use serde_json::json;

use super::bench::EngineArgs;

/// Inbound and outbound packets the comparison holds in memory at most.
const MAX_IN: u64 = 300_000;
const MAX_OUT: u64 = 30_000;

/// Exit status when the DPDK side could not run (as `bench/dpdk/build.sh`).
const EXIT_ABSENT: u8 = 3;

struct PxRun {
    merge: SideRun,
    split: SideRun,
    yield_: f64,
}

/// Where the repository (for `bench/dpdk/`) and `target/` are.
fn repo_and_target() -> (PathBuf, PathBuf) {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = match repo.canonicalize() {
        Ok(r) if r.join("bench/dpdk/build.sh").exists() => r,
        _ => PathBuf::from("."),
    };
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo.join("target"));
    (repo, target)
}

pub fn run(a: &EngineArgs, cfg: &BenchConfig) -> Result<ExitCode, String> {
    if cfg.rx_csum != Checksum::Valid {
        return Err("--vs dpdk: the harness takes received checksums as verified; use --rx-csum verified".into());
    }
    let cpu = a.cpu.unwrap_or_else(px_lab::exp::cpu::rx_cpu);
    let (n_in, n_out) = (a.packets.min(MAX_IN) as usize, a.split_packets.min(MAX_OUT) as usize);
    let inner_mss = cfg.engine.imtu as usize - 52;
    let (imtu, emtu) = (cfg.engine.imtu, cfg.engine.emtu);
    let say = |m: &str| {
        if !a.json {
            eprintln!("px bench engine --vs dpdk: {m}");
        }
    };
    say(&format!("generating {n_in} inbound + {n_out} outbound frames…"));
    let inbound = vs_dpdk::trace_frames(&cfg.inbound, n_in, imtu, emtu);
    let outbound = vs_dpdk::trace_frames(&cfg.outbound, n_out, imtu, emtu);
    let (repo, target) = repo_and_target();
    let dir = target.join("dpdk");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (gro_pcap, gso_pcap) = (dir.join("px-bench-inbound.pcap"), dir.join("px-bench-outbound.pcap"));
    // The DPDK side: build (or find) the harness and write the pcaps.
    let harness = vs_dpdk::harness(&repo, &target).and_then(|exe| {
        say(&format!("harness {}", exe.display()));
        vs_dpdk::write_pcap(&gro_pcap, &inbound.data).map_err(|e| format!("{}: {e}", gro_pcap.display()))?;
        vs_dpdk::write_pcap(&gso_pcap, &outbound.data).map_err(|e| format!("{}: {e}", gso_pcap.display()))?;
        Ok(exe)
    });
    let mut absent = harness.as_ref().err().cloned();
    if let Some(r) = &absent {
        say(&format!("DPDK side absent: {r}"));
    }
    px_lab::exp::cpu::pin_current_thread(cpu)?;
    let soft = Config { outer_gso: false, ..cfg.engine.clone() };
    let mut work = px_bench::trace::Chunk::default();
    let (mut px_runs, mut dpdk_runs): (Vec<PxRun>, Vec<DpdkRun>) = (Vec::new(), Vec::new());
    for i in 0..a.runs {
        let mut ours = || {
            let (merge, c) = vs_dpdk::engine_run(&inbound, &mut work, Port::Outer, &cfg.engine, cfg.rx_csum);
            let (split, _) = vs_dpdk::engine_run(&outbound, &mut work, Port::Inner, &soft, cfg.rx_csum);
            px_runs.push(PxRun { merge, split, yield_: c.conversion_yield() });
        };
        // Alternate who goes first, so neither always inherits the other's cache.
        if i % 2 == 0 {
            ours();
        }
        if let (Ok(exe), None) = (&harness, &absent) {
            let h = HarnessArgs {
                exe,
                gro_pcap: &gro_pcap,
                gso_pcap: &gso_pcap,
                lcore: cpu,
                hold_us: cfg.engine.merge_timeout.as_micros() as u64,
                mtu: cfg.engine.emtu,
                imtu: cfg.engine.imtu,
            };
            match vs_dpdk::dpdk_run(&h) {
                Ok(r) => dpdk_runs.push(r),
                Err(e) => {
                    say(&format!("DPDK side failed: {e}"));
                    absent = Some(e);
                }
            }
        }
        if i % 2 == 1 {
            ours();
        }
        say(&format!("run {}/{} done", i + 1, a.runs));
    }
    if absent.is_none() {
        let _ = std::fs::remove_file(&gro_pcap);
        let _ = std::fs::remove_file(&gso_pcap);
    }
    let px = |f: fn(&PxRun) -> f64| Spread::of(px_runs.iter().map(f).collect());
    let dp = |f: fn(&DpdkRun) -> f64| Spread::of(dpdk_runs.iter().map(f).collect());
    let (pm, ps, py) = (px(|r| r.merge.gbps), px(|r| r.split.gbps), px(|r| r.yield_));
    let (pm_pps, ps_pps) = (px(|r| r.merge.mpps), px(|r| r.split.mpps));
    let dpdk = absent.is_none().then(|| {
        let (dm, ds) = (dp(|r| r.merge.gbps), dp(|r| r.split.gbps));
        let nocsum = |s: &SideRun, c: f64| s.gbps * s.seconds / (s.seconds - c).max(1e-12);
        let last = dpdk_runs.last().expect("at least one run");
        json!({
            "dpdk_merge_gbps": dm.median, "dpdk_split_gbps": ds.median,
            "dpdk_merge_mpps": dp(|r| r.merge.mpps).median, "dpdk_split_mpps": dp(|r| r.split.mpps).median,
            "dpdk_yield": dp(|r| r.merge_yield).median,
            "dpdk_merge_gbps_spread": dm, "dpdk_split_gbps_spread": ds,
            "dpdk_merge_gbps_without_csum": dpdk_runs.iter().map(|r| nocsum(&r.merge, r.merge_csum_seconds)).collect::<Vec<_>>(),
            "dpdk_split_gbps_without_csum": dpdk_runs.iter().map(|r| nocsum(&r.split, r.split_csum_seconds)).collect::<Vec<_>>(),
            "merge_ratio": pm.median / dm.median, "split_ratio": ps.median / ds.median,
            "dpdk_version": last.dpdk_version, "dpdk_merge_out_max_ip_len": last.merge_out_max_ip_len,
            "dpdk_merge_out_of_order": last.merge_out_of_order, "dpdk_split_out_max_ip_len": last.split_out_max_ip_len,
            "dpdk_runs": dpdk_runs,
        })
    });
    let setup = json!({
        "cpu": cpu, "runs": a.runs, "flows": a.flows, "inbound_packets": n_in, "outbound_packets": n_out,
        "inbound_payload_bytes": inbound.data.payload_bytes, "outbound_payload_bytes": outbound.data.payload_bytes,
        "imtu": cfg.engine.imtu, "emtu": cfg.engine.emtu, "hold_us": cfg.engine.merge_timeout.as_micros() as u64,
        "rx_csum": "verified (both sides: NIC CHECKSUM_UNNECESSARY)",
        "handshakes": "px is handed each bulk flow's SYN and SYN-ACK first, untimed (it merges toward an inner host only once it knows that host's MSS); the pcaps carry the data frames only",
        "timed": "px: handle_packet + timers + drain + final flush over the whole trace, checksums completed inline; \
                  dpdk: rte_gro_reassemble + timeout flushes + re-segmentation to the iMTU + checksum recomputation \
                  (gro), rte_gso_segment + checksum recomputation (gso); loading frames is untimed on both sides",
        "order": "alternating: px first on even runs, DPDK first on odd runs",
        "statistic": "median over runs, spread = [min, max]",
    });
    if a.json {
        let mut o = json!({
            "px_merge_gbps": pm.median, "px_split_gbps": ps.median,
            "px_merge_mpps": pm_pps.median, "px_split_mpps": ps_pps.median, "px_yield": py.median,
            "px_merge_gbps_spread": pm, "px_split_gbps_spread": ps,
            "px_runs": px_runs.iter().map(|r| json!({"merge": r.merge, "split": r.split, "yield": r.yield_})).collect::<Vec<_>>(),
            "dpdk_semantics": DPDK_SEMANTICS, "setup": setup, "dpdk": dpdk.is_some(), "runs": a.runs,
        });
        match (&dpdk, o.as_object_mut()) {
            (Some(serde_json::Value::Object(d)), Some(m)) => m.extend(d.clone()),
            (_, Some(m)) => {
                m.insert("dpdk".into(), serde_json::Value::Null);
                m.insert("dpdk_absent".into(), json!(absent));
            }
            _ => {}
        }
        println!("{o}");
    } else {
        println!(
            "px bench engine --vs dpdk — CPU {cpu}, {} flows, {n_in} inbound ({} B) + {n_out} outbound ({} B) frames, \
             iMTU {} / eMTU {}, hold {} µs, {} run(s) alternating: median [min – max]\n",
            a.flows,
            cfg.engine.emtu - 52,
            inner_mss,
            cfg.engine.imtu,
            cfg.engine.emtu,
            cfg.engine.merge_timeout.as_micros(),
            a.runs
        );
        let row = |label: &str, s: Spread| println!("  {label:<40} {:>9.3}   [{:.3} – {:.3}]", s.median, s.min, s.max);
        row("px merge (Gbps of TCP payload)", pm);
        row("px merge (Mpps in)", pm_pps);
        row("px split, software (Gbps)", ps);
        row("px split (Mpps in)", ps_pps);
        row("px yield", py);
        match &dpdk {
            Some(_) => {
                row("DPDK GRO merge (Gbps)", dp(|r| r.merge.gbps));
                row("DPDK GRO merge (Mpps in)", dp(|r| r.merge.mpps));
                row("DPDK GSO split (Gbps)", dp(|r| r.split.gbps));
                row("DPDK GSO split (Mpps in)", dp(|r| r.split.mpps));
                row("DPDK yield", dp(|r| r.merge_yield));
                let (dm, ds) = (dp(|r| r.merge.gbps).median, dp(|r| r.split.gbps).median);
                println!("\n  merge ratio px / DPDK {:.2}×, split ratio {:.2}×", pm.median / dm, ps.median / ds);
            }
            None => println!("\n  DPDK side absent: {}", absent.as_deref().unwrap_or("?")),
        }
        println!("\n  DPDK semantics: {DPDK_SEMANTICS}");
    }
    Ok(if dpdk.is_some() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_ABSENT) })
}
