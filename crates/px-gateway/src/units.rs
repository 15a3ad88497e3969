//! One convention for durations and sizes, on the command line and in the
//! configuration file alike (issue 29 item 8, issue 38 item 5).
//!
//! - **Durations** take a unit: `500us`, `250ms`, `10s`, `2min` (also
//!   `µs`, `m`). A bare number is read in the unit the key or flag names
//!   (`merge_timeout_us = 500`, `--log-interval 10`), so files and scripts
//!   written before units keep working.
//! - **Sizes** take a unit: `64KiB`, `8MiB`, `1GiB` (powers of 1024), `64kB`,
//!   `8MB`, `1GB` (powers of 1000), `B`; a bare number is bytes.
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
    let t = s.trim();
    let at = t.find(|c: char| c.is_alphabetic()).unwrap_or(t.len());
    let (num, unit) = (t[..at].trim(), &t[at..]);
    let v: f64 = num.parse().map_err(|_| format!("`{s}`: expected a size such as 65536, 64KiB or 8MiB"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{s}`: expected a size of 0 or more"));
    }
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
