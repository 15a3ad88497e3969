//! What the gateway reports: per-worker snapshots of the engine's counters
//! (published by each worker a few times a second, never per packet),
//! rendered as Prometheus text and as a one-line log summary, and served
//! over HTTP.
//!
//! One job per file:
//! - `snapshot.rs`: what the workers publish and one scrape
//!   reads ([`Shared`], [`WorkerSnapshot`], [`Scrape`]);
//! - `table.rs`: every metric family, its name, type, help and
//!   the engine counters it shows ([`FAMILIES`]);
//! - `render.rs`: the Prometheus text exposition of a scrape,
//!   and the log's summary line;
//! - `http.rs`: the `GET /metrics` endpoint.
//!
//! Names follow Prometheus' conventions: base units in the name
//! (`_bytes`, `_seconds`, `_ratio`), `_total` on counters, and labels
//! (`worker`, `port`, `direction`, `reason`, `result`) rather than one
//! name per variant. The list is in `docs/metrics.md`.

mod http;
mod process;
mod render;
mod snapshot;
mod table;

pub use http::serve;
pub use process::ProcessStats;
pub use render::{Summary, render, render_scrape, si, summary};
pub use snapshot::{
    BEAT_EVERY, KernelScrape, LINK_DOWN, LINK_NO_CARRIER, LINK_UNKNOWN, LINK_UP, LinkScrape, ProcessCounters,
    ReloadResult, Scrape, Shared, WorkerSnapshot,
};
pub use table::{FAMILIES, Family, Kind};

/// Two workers, the second with some traffic: the scrape the tests render.
#[cfg(test)]
fn sample_scrape() -> Shared {
    use std::sync::atomic::Ordering;
    let sh = Shared::new(2);
    let mut s = WorkerSnapshot { flows: 3, merge_timeout_us: 500, ..Default::default() };
    s.counters.inner_tcp_data_out = 10;
    s.counters.inner_tcp_full_out = 9;
    s.counters.outer.rx_packets = 60;
    s.wire[px_gateway::Port::Outer as usize].rx_packets = 600;
    s.counters.inner.tx_bytes = 5000;
    s.counters.drop[px_gateway::DropReason::TooBigDf as usize] = 2;
    for us in [0, 3, 100, 400, 900, 20_000] {
        s.counters.hold.record(us);
    }
    sh.publish(1, s);
    sh.process.reloads[ReloadResult::Refused as usize].store(1, Ordering::Relaxed);
    sh
}
