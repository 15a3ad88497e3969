//! Runs the experiments with default parameters and prints a summary and
//! their wall-clock time: `cargo run --release -p px-sim --example
//! experiments -- [mtu-benefit|mtu-drop|pmtud-compare] [--svg DIR]`.

use std::time::Instant;

use px_sim::experiments::{MtuBenefitParams, mtu_benefit, mtu_benefit_svg};

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
}
