//! Runs the experiments with default parameters and prints a summary and
//! their wall-clock time: `cargo run --release -p px-sim --example
//! experiments -- [mtu-benefit|mtu-drop|pmtud-compare|speed] [--svg DIR]`.

use std::time::{Duration, Instant};

use px_pmtud::rtt::ClassicRtt;
use px_sim::SimTime;
use px_sim::link::LinkConfig;
use px_sim::net::{PathConfig, RouterPolicy};
use px_sim::transport::{FixedPmtu, TransportConfig, run_transfer};

use px_sim::experiments::{
    MtuBenefitParams, MtuDropParams, PmtudCompareParams, mtu_benefit, mtu_benefit_svg, mtu_drop, mtu_drop_svg,
    pmtud_compare, pmtud_compare_svg,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map_or("all", String::as_str);
    let svg_dir = args.iter().position(|a| a == "--svg").and_then(|i| args.get(i + 1)).cloned();
    if which == "all" || which == "mtu-benefit" {
        let t = Instant::now();
        let r = mtu_benefit(&MtuBenefitParams::default()).expect("mtu_benefit");
        let elapsed = t.elapsed();
        for run in &r.runs {
            println!(
                "mss {:5}  {:8.1} Mb/s  lost {:7.1}  events {:6.1}  growth/RTT {:6.0} B  mean cwnd {:9.0} B  runs {:?}",
                run.mss,
                run.throughput_mbps,
                run.packets_lost,
                run.congestion_events,
                run.ca_growth_per_rtt_bytes,
                run.mean_cwnd_bytes,
                run.throughput_by_run_mbps
            );
        }
        println!("throughput ratio {:.2}, growth ratio {:.2}, {:.2?}", r.throughput_ratio, r.growth_ratio, elapsed);
        if let Some(dir) = &svg_dir {
            std::fs::write(format!("{dir}/mtu-benefit.svg"), mtu_benefit_svg(&r)).expect("write svg");
        }
    }
    if which == "all" || which == "mtu-drop" {
        let mut p = MtuDropParams::default();
        if let Some(q) = args.iter().position(|a| a == "--queue").and_then(|i| args.get(i + 1)) {
            p.queue_bytes = Some(q.parse().expect("queue bytes"));
        }
        if let Some(q) = args.iter().position(|a| a == "--probe-floor-ms").and_then(|i| args.get(i + 1)) {
            p.min_probe_timer_ms = q.parse().expect("ms");
        }
        let t = Instant::now();
        let r = mtu_drop(&p).expect("mtu_drop");
        let elapsed = t.elapsed();
        println!(
            "variant      completion  losses | blog      | plpmtu@drop srtt@drop pto@drop ss_exit srtt@ss  bh_at  ptos probes/lost bh final"
        );
        for row in &r.rows {
            println!(
                "{:12} {:>8.2} s {:6} | {:4.1} {:4} | {:5} {:7.3} {:7.3} {:>7} {:>7} {:>6} {:4} {:3}/{:<3} {:2} {:5}",
                row.variant,
                row.completion_s.unwrap_or(f64::NAN),
                row.losses,
                row.blog_completion_s,
                row.blog_losses,
                row.plpmtu_at_drop,
                row.srtt_at_drop_s,
                row.pto_at_drop_s,
                row.slow_start_exit_s.map_or("-".into(), |v| format!("{v:.3}")),
                row.srtt_at_slow_start_exit_s.map_or("-".into(), |v| format!("{v:.3}")),
                row.black_hole_detected_s.map_or("-".into(), |v| format!("{v:.2}")),
                row.ptos,
                row.probes_sent,
                row.probes_lost,
                row.black_holes,
                row.final_plpmtu
            );
        }
        println!("{elapsed:.2?}");
        if let Some(dir) = &svg_dir {
            std::fs::write(format!("{dir}/mtu-drop.svg"), mtu_drop_svg(&r)).expect("write svg");
        }
    }
    if which == "all" || which == "pmtud-compare" {
        let mut p = PmtudCompareParams::default();
        if let Some(n) = args.iter().position(|a| a == "--paths").and_then(|i| args.get(i + 1)) {
            p.paths = n.parse().expect("paths");
        }
        let t = Instant::now();
        let r = pmtud_compare(&p).expect("pmtud_compare");
        let elapsed = t.elapsed();
        println!(
            "{} paths ({} black holes, {} fragment filters)",
            r.params.paths, r.black_hole_paths, r.fragment_filter_paths
        );
        println!(
            "method                 success  exact  wrong   p50 s   p99 s p50 RTT p99 RTT  probes   bytes  bh-ok  ff-ok  fallback"
        );
        for s in &r.summaries {
            println!(
                "{:20} {:8.3} {:6.3} {:6.3} {:7.3} {:7.3} {:7.2} {:7.2} {:7.2} {:7.0} {:>6} {:>6} {:6.3}",
                s.method,
                s.success_rate,
                s.exact_rate,
                s.wrong_rate,
                s.p50_s.unwrap_or(f64::NAN),
                s.p99_s.unwrap_or(f64::NAN),
                s.p50_rtts.unwrap_or(f64::NAN),
                s.p99_rtts.unwrap_or(f64::NAN),
                s.probes_mean,
                s.bytes_mean,
                s.black_hole_success_rate.map_or("-".into(), |v| format!("{v:.3}")),
                s.fragment_filter_success_rate.map_or("-".into(), |v| format!("{v:.3}")),
                s.fallback_rate,
            );
        }
        println!("{elapsed:.2?}");
        if let Some(dir) = &svg_dir {
            std::fs::write(format!("{dir}/pmtud-compare.svg"), pmtud_compare_svg(&r)).expect("write svg");
        }
    }
    if which == "speed" {
        // One 60-s bulk transfer over a 10 Gb/s, 20 ms, 0.01 %-loss path.
        let mut wan = LinkConfig::ideal(9000, Duration::from_millis(10));
        wan.bandwidth_bps = 10_000_000_000;
        wan.loss = 0.0001;
        let path = PathConfig {
            links: vec![LinkConfig::ideal(9000, Duration::ZERO), wan],
            routers: vec![RouterPolicy::default()],
        };
        let t = Instant::now();
        let r = run_transfer(
            path,
            1,
            TransportConfig::tcp_like(u64::MAX / 2),
            Box::new(ClassicRtt::default()),
            Box::new(FixedPmtu(9000)),
            SimTime::from_millis(60_000),
        )
        .expect("valid path");
        let elapsed = t.elapsed();
        println!(
            "{} events in {elapsed:.2?}: {:.1} M events/s",
            r.net.events,
            r.net.events as f64 / elapsed.as_secs_f64() / 1e6
        );
    }
}
