//! Simulator speed: one 60-s bulk transfer over a 10 Gb/s, 20 ms-RTT,
//! 0.01 %-loss path, timed on the wall clock:
//! `cargo run --release -p px-sim --example speed`.
//! (The experiments themselves run with `px sim …`.)

use std::time::{Duration, Instant};

use px_pmtud::rtt::ClassicRtt;
use px_sim::SimTime;
use px_sim::link::LinkConfig;
use px_sim::net::{PathConfig, RouterPolicy};
use px_sim::transport::{FixedPmtu, TransportConfig, run_transfer};

fn main() {
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
        "{} events in {elapsed:.2?}: {:.1} M events/s, {:.0} Mb/s simulated",
        r.net.events,
        r.net.events as f64 / elapsed.as_secs_f64() / 1e6,
        r.receiver.delivered_bytes as f64 * 8.0 / 60.0 / 1e6
    );
}
