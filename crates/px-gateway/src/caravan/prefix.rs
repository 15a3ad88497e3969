//! The caravan prefix table: which destinations (address prefixes, and
//! optionally ports) take caravans (`Config::caravan_prefixes` /
//! `caravan_ports`).

use core::fmt;
use core::net::IpAddr;
use core::str::FromStr;

use serde::Serialize;

use crate::config::Config;

/// An address prefix such as `203.0.113.0/24` or `2001:db8:2::/48`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

/// Why a prefix string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Not `address/length`.
    #[error("`{0}` is not address/length")]
    Syntax(String),
    /// The length exceeds the address width (32 or 128).
    #[error("prefix length {0} is longer than the address")]
    Length(u8),
}

impl Prefix {
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                let m = u32::MAX.checked_shl(32 - self.len as u32).unwrap_or(0);
                u32::from(p) & m == u32::from(a) & m
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                let m = u128::MAX.checked_shl(128 - self.len as u32).unwrap_or(0);
                u128::from(p) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Prefix, PrefixError> {
        let (a, l) = s.split_once('/').ok_or_else(|| PrefixError::Syntax(s.to_string()))?;
        let addr: IpAddr = a.parse().map_err(|_| PrefixError::Syntax(s.to_string()))?;
        let len: u8 = l.parse().map_err(|_| PrefixError::Syntax(s.to_string()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(PrefixError::Length(len));
        }
        Ok(Prefix { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Prefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Prefix, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether the engine packs UDP toward `dst:port`.
pub(crate) fn capable(cfg: &Config, dst: IpAddr, port: u16) -> bool {
    cfg.caravan_prefixes.iter().any(|p| p.contains(dst))
        && (cfg.caravan_ports.is_empty() || cfg.caravan_ports.contains(&port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_match() {
        let p: Prefix = "203.0.113.0/24".parse().unwrap();
        assert!(p.contains("203.0.113.77".parse().unwrap()));
        assert!(!p.contains("203.0.114.1".parse().unwrap()));
        assert!(!p.contains("2001:db8::1".parse().unwrap()));
        let all: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("198.51.100.1".parse().unwrap()));
        let v6: Prefix = "2001:db8:2::/48".parse().unwrap();
        assert!(v6.contains("2001:db8:2:ffff::1".parse().unwrap()));
        assert!(!v6.contains("2001:db8:3::1".parse().unwrap()));
        assert_eq!("10.0.0.0/33".parse::<Prefix>(), Err(PrefixError::Length(33)));
        assert!(matches!("10.0.0.0".parse::<Prefix>(), Err(PrefixError::Syntax(_))));
        assert_eq!(v6.to_string(), "2001:db8:2::/48");
    }

    #[test]
    fn ports_narrow_the_destinations() {
        let mut cfg = Config { caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap()], ..Config::default() };
        let a = "203.0.113.5".parse().unwrap();
        assert!(capable(&cfg, a, 53));
        cfg.caravan_ports = vec![443];
        assert!(capable(&cfg, a, 443) && !capable(&cfg, a, 53));
    }
}
