//! The lab's address discipline: only documentation prefixes.
//!
//! Every address or prefix the lab configures goes through [`DocPrefix::parse`],
//! which accepts an address (optionally `/len`) only if the whole prefix lies
//! inside 198.51.100.0/24, 203.0.113.0/24 (RFC 5737) or 2001:db8::/32
//! (RFC 3849). So a typo can never make the lab route or send traffic to a
//! real network.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a string is not an acceptable lab address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// The text is not `ADDR` or `ADDR/LEN`.
    #[error("`{0}` is not an IP address or prefix")]
    Syntax(String),
    /// The prefix length exceeds 32 (IPv4) or 128 (IPv6).
    #[error("`{0}`: prefix length out of range")]
    PrefixLen(String),
    /// The prefix is not inside 198.51.100.0/24, 203.0.113.0/24 or 2001:db8::/32.
    #[error("`{0}` is outside the documentation ranges 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32")]
    NotDocumentation(String),
}

/// An address with a prefix length, checked to lie in a documentation range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocPrefix {
    /// The address (host part kept: `198.51.100.1/24` is an interface address).
    pub addr: IpAddr,
    /// The prefix length.
    pub len: u8,
}

impl DocPrefix {
    /// Parses `ADDR` (host prefix) or `ADDR/LEN` and checks the range.
    pub fn parse(s: &str) -> Result<Self, AddrError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| AddrError::Syntax(s.to_owned()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => l.parse::<u8>().map_err(|_| AddrError::Syntax(s.to_owned()))?,
        };
        if len > max {
            return Err(AddrError::PrefixLen(s.to_owned()));
        }
        let p = DocPrefix { addr, len };
        if !p.is_documentation() {
            return Err(AddrError::NotDocumentation(s.to_owned()));
        }
        Ok(p)
    }

    /// True when the whole prefix (not only the address) is inside a
    /// documentation range: `198.51.100.1/16` is rejected because the
    /// route it installs would cover real addresses.
    fn is_documentation(&self) -> bool {
        match self.addr {
            IpAddr::V4(a) => {
                let in_range = |net: Ipv4Addr| self.len >= 24 && u32::from(a) >> 8 == u32::from(net) >> 8;
                in_range(Ipv4Addr::new(198, 51, 100, 0)) || in_range(Ipv4Addr::new(203, 0, 113, 0))
            }
            IpAddr::V6(a) => {
                let doc = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0);
                self.len >= 32 && u128::from(a) >> 96 == u128::from(doc) >> 96
            }
        }
    }
}

impl fmt::Display for DocPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Checks a single address (a gateway, a ping target) and returns it.
pub fn doc_addr(s: &str) -> Result<IpAddr, AddrError> {
    if s.contains('/') {
        return Err(AddrError::Syntax(s.to_owned()));
    }
    DocPrefix::parse(s).map(|p| p.addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_the_three_ranges() {
        for s in ["198.51.100.1/24", "203.0.113.254", "2001:db8::1/64", "2001:db8:ffff::9/32"] {
            assert!(DocPrefix::parse(s).is_ok(), "{s}");
        }
        let p = DocPrefix::parse("198.51.100.7").unwrap();
        assert_eq!(p.len, 32);
        assert_eq!(p.to_string(), "198.51.100.7/32");
    }

    #[test]
    fn rejects_other_ranges_and_wide_prefixes() {
        for s in ["10.0.0.1/24", "192.0.2.1", "198.51.101.1", "198.51.100.1/16", "2001:db9::1", "2001:db8::1/16", "::1"]
        {
            assert!(matches!(DocPrefix::parse(s), Err(AddrError::NotDocumentation(_))), "{s}");
        }
    }

    #[test]
    fn rejects_bad_syntax() {
        assert!(matches!(DocPrefix::parse("198.51.100.1/33"), Err(AddrError::PrefixLen(_))));
        assert!(matches!(DocPrefix::parse("198.51.100.x"), Err(AddrError::Syntax(_))));
        assert!(matches!(DocPrefix::parse("198.51.100.1/"), Err(AddrError::Syntax(_))));
        assert!(matches!(doc_addr("198.51.100.1/24"), Err(AddrError::Syntax(_))));
    }

    proptest! {
        #[test]
        fn every_accepted_v4_address_is_in_a_doc_24(a: u32, len in 0u8..=32) {
            let addr = Ipv4Addr::from(a);
            let ok = DocPrefix::parse(&format!("{addr}/{len}")).is_ok();
            let hi = a >> 8;
            let doc = hi == 0x00C6_3364 || hi == 0x00CB_0071; // 198.51.100, 203.0.113
            prop_assert_eq!(ok, doc && len >= 24);
        }

        #[test]
        fn every_accepted_v6_address_is_in_2001_db8(a: u128, len in 0u8..=128) {
            let addr = Ipv6Addr::from(a);
            let ok = DocPrefix::parse(&format!("{addr}/{len}")).is_ok();
            prop_assert_eq!(ok, a >> 96 == 0x2001_0db8 && len >= 32);
        }
    }
}
