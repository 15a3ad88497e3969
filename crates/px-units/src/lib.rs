//! One convention for durations, sizes, rates and losses, on the command
//! line and in the configuration file alike (issue 29 item 8, issue 38
//! item 5).
//!
//! - **Durations** take a unit: `500us`, `250ms`, `10s`, `2min` (also
//!   `µs`, `m`). A bare number is read in the unit the key or flag names
//!   (`merge_timeout_us = 500`, `--log-interval 10`), so files and scripts
//!   written before units keep working.
//! - **Sizes** take a unit: `64KiB`, `8MiB`, `1GiB` (powers of 1024), `64kB`,
//!   `8MB`, `1GB` (powers of 1000), `B`; a bare number is bytes.
//! - **Rates** are bits per second with a unit: `500kbps`, `1Mbps`,
//!   `10Gbps`; a bare number is read in the unit the flag's old name said
//!   (`--bandwidth-mbps 1`).
//! - **Loss** is a fraction (`0.0001`) or a percentage with `%`
//!   (`0.01%`); a bare number given to a flag whose old name said percent
//!   (`px lab wan --loss-percent`) is still a percentage.
//! - **Lists** are comma-separated, and shown the same way.
//!
//! Every `px` flag that takes one of these uses the parsers here (as
//! `value_parser`), and so does every configuration key (the serde
//! helpers below): one spelling everywhere.
//!
//! The serde helpers ([`secs`], [`millis`], [`duration_us`], [`duration_s`],
//! [`bytes`]) read a key as a whole number in its unit or as a string with
//! a unit, and write it back as the whole number, so a printed
//! configuration reads back the same.

use std::time::Duration;

/// The unit a bare number is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bare {
    Micros,
    Millis,
    Secs,
}

/// The number and the unit of `s` (`"64 MiB"` is 64 and `MiB`), the
/// number finite and not negative; `what` and `e.g.` name them in errors.
fn number_and_unit<'a>(s: &'a str, what: &str, eg: &str) -> Result<(f64, &'a str), String> {
    let t = s.trim();
    let at = t.find(|c: char| c.is_alphabetic() || c == 'µ').unwrap_or(t.len());
    let (num, unit) = (t[..at].trim(), &t[at..]);
    let v: f64 = num.parse().map_err(|_| format!("`{s}`: expected a {what} such as {eg}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{s}`: expected a {what} of 0 or more"));
    }
    Ok((v, unit))
}

/// Seconds in `s` (`10s`, `250ms`, `500us`, `2min`), a bare number in `bare`.
pub fn seconds(s: &str, bare: Bare) -> Result<f64, String> {
    let (v, unit) = number_and_unit(s, "duration", "10s, 250ms or 500us")?;
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

/// A whole number of `bare`'s unit in `s` (`0.5ms` is 500 microseconds).
pub fn whole(s: &str, bare: Bare) -> Result<u64, String> {
    let (per_sec, name) = match bare {
        Bare::Micros => (1e6, "microseconds"),
        Bare::Millis => (1e3, "milliseconds"),
        Bare::Secs => (1.0, "seconds"),
    };
    rounded(s, seconds(s, bare)? * per_sec, name)
}

/// `v`, read from `s`, as a whole number of `name`.
fn rounded(s: &str, v: f64, name: &str) -> Result<u64, String> {
    if v > u64::MAX as f64 / 2.0 {
        return Err(format!("`{s}`: out of range"));
    }
    // Rounded by a cast, not f64::round: the `px` binary loads no libm.
    let r = (v + 0.5) as u64;
    if (v - r as f64).abs() > 1e-6 * (r as f64).max(1.0) {
        return Err(format!("`{s}`: must be a whole number of {name}"));
    }
    Ok(r)
}

/// Bytes in `s` (`64MiB`, `8MB`, `4096`, `1.5GiB` when that is whole).
pub fn size(s: &str) -> Result<u64, String> {
    let (v, unit) = number_and_unit(s, "size", "65536, 64KiB or 8MiB")?;
    let scale: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" | "K" => 1024.0,
        "MiB" | "M" => 1024.0 * 1024.0,
        "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)")),
    };
    rounded(s, v * scale, "bytes")
}

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
    whole(s, Bare::Secs)
}

/// Whole milliseconds, a bare number in milliseconds.
pub fn millis_u64(s: &str) -> Result<u64, String> {
    whole(s, Bare::Millis)
}

/// Whole microseconds, a bare number in microseconds.
pub fn micros_u64(s: &str) -> Result<u64, String> {
    whole(s, Bare::Micros)
}

/// A [`std::time::Duration`] (`5s`, `250ms`, `20us`, `2min`), a bare
/// number in seconds.
pub fn duration(s: &str) -> Result<std::time::Duration, String> {
    std::time::Duration::try_from_secs_f64(seconds(s, Bare::Secs)?).map_err(|_| format!("`{s}`: out of range"))
}

/// Whole seconds within `lo..=hi`, a bare number in seconds (a flag's
/// `value_parser`).
pub fn secs_in(lo: u64, hi: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v = secs_u64(s)?;
        if (lo..=hi).contains(&v) { Ok(v) } else { Err(format!("`{s}`: allowed {lo}s..={hi}s")) }
    }
}

/// A size in bytes, for a flag (`--capture-max-bytes 64MiB`).
pub fn size_u64(s: &str) -> Result<u64, String> {
    size(s)
}

/// A rate in bits per second (`1Mbps`, `10Gbps`, `500kbps`, `bps`), a bare
/// number in units of `bare` bits per second (1e6 for a flag once named
/// `-mbps`).
pub fn rate_bps(s: &str, bare: f64) -> Result<f64, String> {
    let (v, unit) = number_and_unit(s, "rate", "500kbps, 1Mbps or 10Gbps")?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" => bare,
        "bps" | "bit/s" => 1.0,
        "kbps" | "kbit/s" => 1e3,
        "mbps" | "mbit/s" => 1e6,
        "gbps" | "gbit/s" => 1e9,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (bps, kbps, Mbps, Gbps)")),
    };
    Ok(v * scale)
}

/// A rate, a bare number in Mb/s.
pub fn rate_mbps_bare(s: &str) -> Result<f64, String> {
    rate_bps(s, 1e6)
}

/// A rate, a bare number in Gb/s.
pub fn rate_gbps_bare(s: &str) -> Result<f64, String> {
    rate_bps(s, 1e9)
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

/// A key's value as the file writes it: a number in the key's unit, or a
/// string with a unit.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Raw {
    Whole(i64),
    Text(String),
    Other(serde::de::IgnoredAny),
}

fn read<'de, D: serde::Deserializer<'de>>(d: D, text: impl Fn(&str) -> Result<u64, String>) -> Result<u64, D::Error> {
    use serde::de::Error;
    match serde::Deserialize::deserialize(d)? {
        Raw::Whole(v) => u64::try_from(v).map_err(|_| D::Error::custom(format!("{v} is below 0"))),
        Raw::Text(t) => text(&t).map_err(D::Error::custom),
        Raw::Other(_) => Err(D::Error::custom("expected a whole number or a string with a unit")),
    }
}

/// A whole number of seconds, or a duration with a unit (`"2min"`).
pub mod secs {
    use super::{Bare, read, whole};

    pub fn serialize<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        read(d, |t| whole(t, Bare::Secs))
    }
}

/// A whole number of milliseconds, or a duration with a unit (`"2s"`).
pub mod millis {
    use super::{Bare, read, whole};

    pub fn serialize<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        read(d, |t| whole(t, Bare::Millis))
    }
}

/// A [`Duration`] written as whole microseconds (`merge_timeout_us = 500`
/// or `"0.5ms"`).
pub mod duration_us {
    use super::{Bare, Duration, read, whole};

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_micros() as u64)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        read(d, |t| whole(t, Bare::Micros)).map(Duration::from_micros)
    }
}

/// A [`Duration`] written as whole seconds (`pmtu_lifetime_s = 600` or
/// `"10min"`).
pub mod duration_s {
    use super::{Bare, Duration, read, whole};

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        read(d, |t| whole(t, Bare::Secs)).map(Duration::from_secs)
    }
}

/// A size in bytes (`socket_buffer_bytes = 8388608` or `"8MiB"`), for any
/// unsigned integer field.
pub mod bytes {
    use super::{read, size};

    pub fn serialize<T: Copy + Into<u64>, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64((*v).into())
    }

    pub fn deserialize<'de, T: TryFrom<u64>, D: serde::Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        let v = read(d, size)?;
        T::try_from(v).map_err(|_| serde::de::Error::custom(format!("{v} is too large")))
    }
}

/// The same for `usize` fields (`usize` has no `Into<u64>`).
pub mod bytes_usize {
    pub fn serialize<S: serde::Serializer>(v: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v as u64)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        super::bytes::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_bare_numbers_keep_the_key_unit() {
        assert_eq!(whole("10s", Bare::Secs), Ok(10));
        assert_eq!(whole("10", Bare::Secs), Ok(10));
        assert_eq!(whole("2min", Bare::Secs), Ok(120));
        assert!(whole("1500ms", Bare::Secs).unwrap_err().contains("whole number of seconds"));
        assert_eq!(whole("500us", Bare::Micros), Ok(500));
        assert_eq!(whole("500", Bare::Micros), Ok(500));
        assert_eq!(whole("0.5ms", Bare::Micros), Ok(500));
        assert_eq!(whole("1s", Bare::Millis), Ok(1000));
        assert!(seconds("5 parsecs", Bare::Secs).is_err());
        assert!(seconds("-1s", Bare::Secs).is_err());
        assert!(seconds("", Bare::Secs).is_err());
    }

    #[test]
    fn flag_parsers_keep_the_old_bare_unit() {
        assert_eq!(secs_u64("2min"), Ok(120));
        assert_eq!(micros_u64("0.5ms"), Ok(500));
        assert_eq!(millis_u64("1s"), Ok(1000));
        assert_eq!(millis_f64("0.25s"), Ok(250.0));
        assert_eq!(secs_f64("300"), Ok(300.0));
        assert_eq!(rate_mbps_bare("1"), Ok(1e6));
        assert_eq!(rate_mbps_bare("10Gbps"), Ok(1e10));
        assert_eq!(rate_gbps_bare("10"), Ok(1e10));
        assert_eq!(rate_gbps_bare("500Mbps"), Ok(5e8));
        assert!(rate_gbps_bare("5 furlongs").unwrap_err().contains("unknown unit"));
        assert_eq!(loss_fraction("0.0001"), Ok(0.0001));
        assert_eq!(loss_fraction("0.01%"), Ok(0.0001));
        assert_eq!(loss_percent_bare("0.01"), Ok(0.0001));
        assert!(loss_fraction("2").is_err());
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(size("64MiB"), Ok(64 << 20));
        assert_eq!(size("64M"), Ok(64 << 20));
        assert_eq!(size("8MB"), Ok(8_000_000));
        assert_eq!(size("4096"), Ok(4096));
        assert_eq!(size("1.5KiB"), Ok(1536));
        assert_eq!(size("1 GiB"), Ok(1 << 30));
        assert!(size("1.3B").unwrap_err().contains("whole number of bytes"));
        assert!(size("64 parsecs").unwrap_err().contains("unknown unit"));
        assert!(size("-1").is_err());
        assert!(size("99999999999TiB").unwrap_err().contains("out of range"));
    }

    #[derive(Debug, serde::Deserialize, serde::Serialize, PartialEq)]
    struct Keys {
        #[serde(with = "duration_us")]
        t_us: Duration,
        #[serde(with = "secs")]
        i_s: u64,
        #[serde(with = "bytes")]
        b: u32,
    }

    #[test]
    fn keys_read_numbers_in_their_unit_or_strings_with_units_and_write_numbers() {
        let k: Keys = toml::from_str("t_us = \"0.3ms\"\ni_s = \"1min\"\nb = \"64KiB\"\n").unwrap();
        assert_eq!(k, Keys { t_us: Duration::from_micros(300), i_s: 60, b: 65_536 });
        assert_eq!(toml::to_string(&k).unwrap(), "t_us = 300\ni_s = 60\nb = 65536\n");
        let k: Keys = toml::from_str("t_us = 300\ni_s = 60\nb = 65536\n").unwrap();
        assert_eq!(k.i_s, 60);
        let e = toml::from_str::<Keys>("t_us = 1\ni_s = -1\nb = 1\n").unwrap_err().to_string();
        assert!(e.contains("-1 is below 0"), "{e}");
        let e = toml::from_str::<Keys>("t_us = 1\ni_s = 1\nb = \"8GiB\"\n").unwrap_err().to_string();
        assert!(e.contains("8589934592 is too large"), "{e}");
        let e = toml::from_str::<Keys>("t_us = true\ni_s = 1\nb = 1\n").unwrap_err().to_string();
        assert!(e.contains("expected a whole number or a string with a unit"), "{e}");
    }
}
