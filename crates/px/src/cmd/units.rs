//! One convention for the command line's units (issue 29 item 8).
//!
//! - **Durations** take a unit: `500us`, `250ms`, `10s`, `2min` (also
//!   `µs`, `m`). A bare number is read in the unit the flag's old name
//!   said (`--seconds 10`, `--merge-timeout-us 500`, `--delay-ms 10`), so
//!   scripts written for those names keep working; the old names are kept
//!   as aliases. The parsing is [`px_gateway::units`], which the
//!   configuration file's keys use too.
//! - **Loss** is a fraction (`0.0001`) or a percentage with `%`
//!   (`0.01%`), in every command; a bare number given to a flag whose old
//!   name said percent (`px lab wan --loss-percent`) is still a percentage.
//! - **Rates** say what they count in the flag's help (datagrams/s,
//!   replies/s, Gbps).
//! - **Lists** are comma-separated, and shown the same way.
//!
//! Exit status of every subcommand: see the README's table.

pub use px_gateway::units::{Bare, seconds};

/// A duration, a bare number in seconds.
pub fn secs_f64(s: &str) -> Result<f64, String> {
    seconds(s, Bare::Secs)
}

/// A duration in milliseconds, a bare number in milliseconds.
pub fn millis_f64(s: &str) -> Result<f64, String> {
    seconds(s, Bare::Millis).map(|v| v * 1e3)
}

/// Whole seconds, a bare number in seconds.
pub fn secs_u64(s: &str) -> Result<u64, String> {
    px_gateway::units::whole(s, Bare::Secs)
}

/// Whole milliseconds, a bare number in milliseconds.
pub fn millis_u64(s: &str) -> Result<u64, String> {
    px_gateway::units::whole(s, Bare::Millis)
}

/// Whole microseconds, a bare number in microseconds.
pub fn micros_u64(s: &str) -> Result<u64, String> {
    px_gateway::units::whole(s, Bare::Micros)
}

/// A loss as a fraction: `0.0001` or `0.01%`.
pub fn loss_fraction(s: &str) -> Result<f64, String> {
    loss(s, false)
}

/// A loss as a fraction from a flag whose bare numbers are percentages.
pub fn loss_percent_bare(s: &str) -> Result<f64, String> {
    loss(s, true)
}

fn loss(s: &str, bare_percent: bool) -> Result<f64, String> {
    let t = s.trim();
    let (num, pct) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), true),
        None => (t, bare_percent),
    };
    let v: f64 = num.parse().map_err(|_| format!("`{s}`: expected a loss such as 0.0001 or 0.01%"))?;
    let f = if pct { v / 100.0 } else { v };
    if !(0.0..=1.0).contains(&f) {
        return Err(format!("`{s}`: a loss is 0..=1 (0%..=100%)"));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_bare_numbers_keep_the_old_unit() {
        assert_eq!(secs_u64("10s"), Ok(10));
        assert_eq!(secs_u64("10"), Ok(10));
        assert_eq!(secs_u64("2min"), Ok(120));
        assert!(secs_u64("1500ms").unwrap_err().contains("whole number of seconds"));
        assert_eq!(micros_u64("500us"), Ok(500));
        assert_eq!(micros_u64("500"), Ok(500));
        assert_eq!(micros_u64("2ms"), Ok(2000));
        assert_eq!(micros_u64("0.5ms"), Ok(500));
        assert_eq!(millis_u64("1s"), Ok(1000));
        assert_eq!(millis_f64("10"), Ok(10.0));
        assert_eq!(millis_f64("0.25s"), Ok(250.0));
        assert_eq!(secs_f64("1s"), Ok(1.0));
        assert_eq!(secs_f64("300"), Ok(300.0));
        assert!(seconds("5 parsecs", Bare::Secs).is_err());
        assert!(seconds("-1s", Bare::Secs).is_err());
        assert!(seconds("", Bare::Secs).is_err());
    }

    #[test]
    fn loss_is_a_fraction_or_a_percentage() {
        assert_eq!(loss_fraction("0.0001"), Ok(0.0001));
        assert_eq!(loss_fraction("0.01%"), Ok(0.0001));
        assert_eq!(loss_percent_bare("0.01"), Ok(0.0001));
        assert_eq!(loss_percent_bare("1%"), Ok(0.01));
        assert!(loss_fraction("2").is_err());
        assert!(loss_fraction("x").is_err());
    }
}
