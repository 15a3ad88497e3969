//! One convention for the command line's units (issue 29 item 8).
//!
//! - **Durations** take a unit: `500us`, `250ms`, `10s`, `2min` (also
//!   `µs`, `m`). A bare number is read in the unit the flag's old name
//!   said (`--seconds 10`, `--merge-timeout-us 500`, `--delay-ms 10`), so
//!   scripts written for those names keep working; the old names are kept
//!   as aliases.
//! - **Loss** is a fraction (`0.0001`) or a percentage with `%`
//!   (`0.01%`), in every command; a bare number given to a flag whose old
//!   name said percent (`px lab wan --loss-percent`) is still a percentage.
//! - **Rates** say what they count in the flag's help (datagrams/s,
//!   replies/s, Gbps).
//! - **Lists** are comma-separated, and shown the same way.
//!
//! Exit status of every subcommand: see the README's table.

/// The unit a bare number is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bare {
    Micros,
    Millis,
    Secs,
}

/// Seconds in `s` (`10s`, `250ms`, `500us`, `2min`), a bare number in `bare`.
pub fn seconds(s: &str, bare: Bare) -> Result<f64, String> {
    let t = s.trim();
    let at = t.find(|c: char| c.is_alphabetic() || c == 'µ').unwrap_or(t.len());
    let (num, unit) = (t[..at].trim(), &t[at..]);
    let v: f64 = num.parse().map_err(|_| format!("`{s}`: expected a duration such as 10s, 250ms or 500us"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{s}`: expected a duration of 0 or more"));
    }
    let scale = match unit {
        "" => match bare {
            Bare::Micros => 1e-6,
            Bare::Millis => 1e-3,
            Bare::Secs => 1.0,
        },
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (us, ms, s, min)")),
    };
    Ok(v * scale)
}

/// A duration, a bare number in seconds.
pub fn secs_f64(s: &str) -> Result<f64, String> {
    seconds(s, Bare::Secs)
}

/// A duration in milliseconds, a bare number in milliseconds.
pub fn millis_f64(s: &str) -> Result<f64, String> {
    seconds(s, Bare::Millis).map(|v| v * 1e3)
}

/// A whole number of `unit`s (`per_sec` of them in a second).
fn whole(s: &str, bare: Bare, per_sec: f64, name: &str) -> Result<u64, String> {
    let v = seconds(s, bare)? * per_sec;
    if v > u64::MAX as f64 / 2.0 {
        return Err(format!("`{s}`: out of range"));
    }
    // Rounded by a cast, not f64::round: the binary loads no libm.
    let r = (v + 0.5) as u64;
    if (v - r as f64).abs() > 1e-6 * (r as f64).max(1.0) {
        return Err(format!("`{s}`: must be a whole number of {name}"));
    }
    Ok(r)
}

/// Whole seconds, a bare number in seconds.
pub fn secs_u64(s: &str) -> Result<u64, String> {
    whole(s, Bare::Secs, 1.0, "seconds")
}

/// Whole milliseconds, a bare number in milliseconds.
pub fn millis_u64(s: &str) -> Result<u64, String> {
    whole(s, Bare::Millis, 1e3, "milliseconds")
}

/// Whole microseconds, a bare number in microseconds.
pub fn micros_u64(s: &str) -> Result<u64, String> {
    whole(s, Bare::Micros, 1e6, "microseconds")
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
