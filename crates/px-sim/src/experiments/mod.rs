//! The experiments: each a library function from a parameter struct to a
//! serde-serializable result, plus an SVG rendering of that result and the
//! table `px sim` prints (`table.rs`: `MtuDropResult::table` and the like).
//!
//! | function | question |
//! |---|---|
//! | [`mtu_drop`] | how the RTT estimator changes recovery from a path-MTU drop (seed blog, Table 1) |
//! | [`pmtud_compare`] | how PMTUD methods fare over thousands of random Internet-like paths |
//! | [`mtu_benefit`] | where a 9000-byte MTU's throughput gain over 1500 comes from (paper §2.1, §5.2, Fig. 1d) |
//!
//! Every function is deterministic: the same parameters (seed included)
//! give the same result.

mod mtu_benefit;
mod mtu_drop;
mod pmtud_compare;
mod table;

pub use mtu_benefit::{
    MtuBenefitParams, MtuBenefitResult, MtuBenefitRun, mtu_benefit, mtu_benefit_svg, mtu_benefit_with_progress,
};
pub use mtu_drop::{
    BLOG_TABLE, MtuDropParams, MtuDropResult, MtuDropRow, RttVariant, SearchKind, TimelinePoint, mtu_drop,
    mtu_drop_svg, mtu_drop_with_progress,
};
pub use pmtud_compare::{
    ClassSummary, MTU_WEIGHTS, Method, MethodOutcome, MethodSummary, PathClass, PathOutcome, PmtudCompareParams,
    PmtudCompareResult, pmtud_compare, pmtud_compare_svg, pmtud_compare_with_progress,
};

use thiserror::Error;

/// `--bandwidth` of `mtu-drop`: a rate, a bare number in Mb/s.
fn rate_bps_u64_mbps(s: &str) -> Result<u64, String> {
    rate_u64(px_units::rate_mbps_bare(s)?, s)
}

/// `--bandwidth` of `mtu-benefit`: a rate, a bare number in Gb/s.
fn rate_bps_u64_gbps(s: &str) -> Result<u64, String> {
    rate_u64(px_units::rate_gbps_bare(s)?, s)
}

fn rate_u64(bps: f64, s: &str) -> Result<u64, String> {
    if bps.is_finite() && bps <= 1e15 { Ok((bps + 0.5) as u64) } else { Err(format!("`{s}`: out of range")) }
}

/// `--queue-bytes`: a size (`64KiB`), 1500..=1000000000 bytes.
fn queue_size(s: &str) -> Result<u64, String> {
    let b = px_units::size(s)?;
    if (1500..=1_000_000_000).contains(&b) { Ok(b) } else { Err(format!("`{s}`: allowed 1500..=1000000000 bytes")) }
}

/// Progress callback of the `*_with_progress` runners: called with (units
/// done, units in all) after each unit of work (a path, a run, a variant).
/// It sees no results, so it cannot change them.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// A [`Progress`] sink for a terminal: prints "name: done/total unit
/// (elapsed)" on stderr at most once a second, and only once the run has
/// taken a second, so short runs stay silent.
#[derive(Debug)]
pub struct ProgressLine {
    name: &'static str,
    unit: &'static str,
    start: std::time::Instant,
    last: Option<std::time::Instant>,
}

impl ProgressLine {
    pub fn new(name: &'static str, unit: &'static str) -> Self {
        ProgressLine { name, unit, start: std::time::Instant::now(), last: None }
    }

    pub fn update(&mut self, done: u64, total: u64) {
        let now = std::time::Instant::now();
        let since_print = self.last.map_or(now - self.start, |l| now - l);
        if since_print < std::time::Duration::from_secs(1) {
            return;
        }
        self.last = Some(now);
        eprintln!("{}: {done}/{total} {} ({:.1} s)", self.name, self.unit, (now - self.start).as_secs_f64());
    }

    /// Says how long the run took, if it printed progress at all.
    pub fn finish(&self) {
        if self.last.is_some() {
            eprintln!("{}: done in {:.1} s", self.name, self.start.elapsed().as_secs_f64());
        }
    }
}

use crate::net::PathError;

/// Why an experiment could not run.
#[derive(Debug, Error, PartialEq)]
pub enum ExperimentError {
    /// A parameter is out of its range; the text names it.
    #[error("invalid parameter: {0}")]
    InvalidParam(&'static str),
    /// The path built from the parameters was refused.
    #[error("invalid path: {0}")]
    Path(#[from] PathError),
}

/// Nearest-rank percentile of sorted `v` (`p` in 0..=100); `None` if empty.
#[must_use]
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `--json` keys issue 5 names for `px sim` are the field names.
    #[test]
    fn json_carries_the_keys_the_cli_promises() {
        let drop = mtu_drop(&MtuDropParams {
            file_bytes: 100_000,
            variants: vec![RttVariant::Once3V],
            ..MtuDropParams::default()
        })
        .expect("runs");
        let rows = serde_json::to_value(&drop.rows).expect("serializes");
        for key in ["variant", "completion_s", "losses"] {
            assert!(rows[0].get(key).is_some(), "{key} missing in {rows}");
        }
        assert_eq!(rows[0]["variant"], "Once 3V");
        let cmp = pmtud_compare(&PmtudCompareParams { paths: 5, ..PmtudCompareParams::default() }).expect("runs");
        let sums = serde_json::to_value(&cmp.summaries).expect("serializes");
        for key in ["method", "success_rate", "exact_rate", "p50_s", "p99_s", "probes_mean"] {
            assert!(sums[0].get(key).is_some(), "{key} missing in {sums}");
        }
        assert_eq!(sums[0]["method"], "F-PMTUD");
        let benefit =
            mtu_benefit(&MtuBenefitParams { duration_s: 0.5, runs: 1, ..MtuBenefitParams::default() }).expect("runs");
        assert!(serde_json::to_string(&benefit).expect("serializes").contains("throughput_ratio"));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
