//! A link rate on a veth: `tbf` on a device's egress (this kernel has
//! `tbf` and `htb`, not `netem` or `fq`).
//!
//! A veth hands a frame to its peer in memory: no serialisation delay.
//! [`Netns::shape`] gives a device's egress a rate with a burst of one
//! frame, so back-to-back frames leave one serialisation time apart, and a
//! frame that follows another by less than its own serialisation time waits
//! for it. What `tbf` cannot do is delay a frame that finds the link idle
//! long enough to refill the bucket: such a frame leaves at once, where a
//! real link would still take its serialisation time to deliver it. The
//! bucket refills at the link rate, so how much of a frame's serialisation
//! time is hidden depends on how long the link was idle before it.

use std::fmt;

use crate::LabError;
use crate::netns::{Netns, check_ifname};

/// A link rate in bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkRate(pub u64);

/// Why a link rate was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RateError {
    /// Not a number with a unit.
    #[error("`{0}`: a rate is a number and a unit, e.g. 1gbit, 100mbit, 500kbit (or `none`)")]
    Syntax(String),
    /// Outside what tbf on a veth can hold here.
    #[error("`{0}`: between 1 Mbit/s and 100 Gbit/s")]
    Range(String),
}

impl LinkRate {
    /// Parses tc's units (`kbit`, `mbit`, `gbit`, or plain bits per
    /// second); `none` (or `0`) is no rate: `Ok(None)`.
    pub fn parse(s: &str) -> Result<Option<LinkRate>, RateError> {
        let t = s.trim().to_ascii_lowercase();
        if t == "none" || t == "0" {
            return Ok(None);
        }
        let (num, mult) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
            .iter()
            .find_map(|(u, m)| t.strip_suffix(u).map(|n| (n.to_owned(), *m)))
            .unwrap_or((t.clone(), 1.0));
        let v: f64 = num.trim().parse().map_err(|_| RateError::Syntax(s.to_owned()))?;
        let bps = v * mult;
        if !(1e6..=100e9).contains(&bps) {
            return Err(RateError::Range(s.to_owned()));
        }
        Ok(Some(LinkRate(bps.round() as u64)))
    }

    /// The time one frame of `bytes` (on the wire, with its Ethernet
    /// header) takes at this rate, in microseconds.
    pub fn serialisation_us(self, bytes: u32) -> f64 {
        f64::from(bytes) * 8.0 / self.0 as f64 * 1e6
    }
}

impl fmt::Display for LinkRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            r if r % 1_000_000_000 == 0 => write!(f, "{} Gb/s", r / 1_000_000_000),
            r if r % 1_000_000 == 0 => write!(f, "{} Mb/s", r / 1_000_000),
            r => write!(f, "{} kb/s", r / 1000),
        }
    }
}

impl Netns {
    /// Shapes `dev`'s egress to `rate` with a burst of one frame of the
    /// device's MTU (plus its 14-byte Ethernet header); replaces whatever
    /// root qdisc it had.
    pub fn shape(&self, dev: &str, rate: LinkRate, mtu: u32) -> Result<(), LabError> {
        check_ifname(dev)?;
        let (rate, burst) = (format!("{}bit", rate.0), (mtu + 14).to_string());
        self.exec(
            "tc",
            &["qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst, "latency", "50ms"],
        )
        .map(drop)
    }

    /// Takes a rate off `dev` (back to the device's default qdisc), if
    /// it has one.
    pub fn unshape(&self, dev: &str) -> Result<(), LabError> {
        check_ifname(dev)?;
        let now = self.exec("tc", &["qdisc", "show", "dev", dev, "root"])?;
        if now.contains("tbf") {
            self.exec("tc", &["qdisc", "del", "dev", dev, "root"])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_tc_writes_them() {
        assert_eq!(LinkRate::parse("1gbit"), Ok(Some(LinkRate(1_000_000_000))));
        assert_eq!(LinkRate::parse("10Gbit"), Ok(Some(LinkRate(10_000_000_000))));
        assert_eq!(LinkRate::parse("2.5gbit"), Ok(Some(LinkRate(2_500_000_000))));
        assert_eq!(LinkRate::parse("100mbit"), Ok(Some(LinkRate(100_000_000))));
        assert_eq!(LinkRate::parse("none"), Ok(None));
        assert_eq!(LinkRate::parse("0"), Ok(None));
        assert!(matches!(LinkRate::parse("fast"), Err(RateError::Syntax(_))));
        assert!(matches!(LinkRate::parse("10kbit"), Err(RateError::Range(_))));
        assert!(matches!(LinkRate::parse("1000gbit"), Err(RateError::Range(_))));
        assert_eq!(LinkRate(1_000_000_000).to_string(), "1 Gb/s");
        assert_eq!(LinkRate(100_000_000).to_string(), "100 Mb/s");
        assert!((LinkRate(1_000_000_000).serialisation_us(9014) - 72.112).abs() < 1e-9);
    }
}
