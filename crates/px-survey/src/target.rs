//! The survey's input: one target per line.
//!
//! ```text
//! # address [port] [host]      (port defaults to 80; `#` starts a comment)
//! 203.0.113.7
//! 203.0.113.8 8080
//! 203.0.113.9:80 www.example.org
//! 198.51.100.20, 443, example.net
//! ```
//!
//! Fields are separated by spaces, tabs or commas. The host name goes into
//! the HTTP `Host` header as given, so only the characters of a DNS name
//! are accepted (nothing that could end a header line). IPv4 only: the
//! survey measures IPv4 fragment delivery (IPv6 routers never fragment,
//! and F-PMTUD is IPv4 only).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// One destination of the survey.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The server's address.
    pub addr: Ipv4Addr,
    /// The server's TCP port.
    pub port: u16,
    /// The `Host` header, if the file names one (otherwise the address).
    pub host: Option<String>,
}

impl Target {
    /// The key that identifies the target in the output (`addr:port` or
    /// `addr:port/host`): a resumed run skips targets whose key is there.
    pub fn key(&self) -> String {
        match &self.host {
            Some(h) => format!("{}:{}/{}", self.addr, self.port, h),
            None => format!("{}:{}", self.addr, self.port),
        }
    }

    /// The value of the `Host` header.
    pub fn host_header(&self) -> String {
        self.host.clone().unwrap_or_else(|| self.addr.to_string())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// Why a target file was rejected: the line and what is wrong with it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    /// A line that is not `address [port] [host]`.
    #[error("line {line}: {reason}: `{text}`")]
    Line {
        /// 1-based line number.
        line: usize,
        /// The line as written.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// The same target twice (its results would be ambiguous).
    #[error("line {line}: target {key} is already on line {first}")]
    Duplicate {
        /// 1-based line number of the repetition.
        line: usize,
        /// The target's key.
        key: String,
        /// Where it was first.
        first: usize,
    },
}

/// Parses a target file (see the module notes).
pub fn parse_targets(text: &str) -> Result<Vec<Target>, TargetError> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let t = parse_line(content).map_err(|reason| TargetError::Line { line, text: raw.to_string(), reason })?;
        if let Some(&first) = seen.get(&t.key()) {
            return Err(TargetError::Duplicate { line, key: t.key(), first });
        }
        seen.insert(t.key(), line);
        out.push(t);
    }
    Ok(out)
}

fn parse_line(content: &str) -> Result<Target, String> {
    let fields: Vec<&str> = content.split(|c: char| c == ',' || c.is_whitespace()).filter(|f| !f.is_empty()).collect();
    let (addr_text, mut port) = match fields[0].rsplit_once(':') {
        // `a.b.c.d:port` (an IPv6 address has more than one colon).
        Some((a, p)) if !a.contains(':') => (a, Some(parse_port(p)?)),
        _ => (fields[0], None),
    };
    let addr = match addr_text.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => a,
        Ok(IpAddr::V6(_)) => return Err("IPv6 targets are not surveyed (the survey sends IPv4 fragments)".into()),
        Err(_) => return Err(format!("`{addr_text}` is not an IPv4 address")),
    };
    if addr.is_unspecified() || addr.is_broadcast() || addr.is_multicast() {
        return Err(format!("{addr} cannot be a server"));
    }
    let mut rest = &fields[1..];
    if port.is_none()
        && let Some(f) = rest.first()
        && f.chars().all(|c| c.is_ascii_digit())
    {
        port = Some(parse_port(f)?);
        rest = &rest[1..];
    }
    let host = match rest {
        [] => None,
        [h] if valid_host(h) => Some(h.to_string()),
        [h] => return Err(format!("`{h}` is not a host name (letters, digits, `-`, `.`)")),
        _ => return Err("too many fields (expected address [port] [host])".into()),
    };
    Ok(Target { addr, port: port.unwrap_or(80), host })
}

fn parse_port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("`{p}` is not a TCP port (1-65535)")),
        Ok(n) => Ok(n),
    }
}

fn valid_host(h: &str) -> bool {
    h.len() <= 253
        && !h.starts_with(['-', '.'])
        && h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        && h.chars().any(|c| c.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_forms_parse() {
        let t = parse_targets(
            "# comment\n203.0.113.7\n203.0.113.8 8080\n203.0.113.9:80 www.example.org\n\n198.51.100.20, 443, example.net # x\n",
        )
        .unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t[0], Target { addr: "203.0.113.7".parse().unwrap(), port: 80, host: None });
        assert_eq!(t[1].port, 8080);
        assert_eq!(t[2].host.as_deref(), Some("www.example.org"));
        assert_eq!(t[2].key(), "203.0.113.9:80/www.example.org");
        assert_eq!(t[3].port, 443);
        assert_eq!(t[3].host_header(), "example.net");
        assert_eq!(t[0].host_header(), "203.0.113.7");
    }

    #[test]
    fn errors_name_the_line_and_the_reason() {
        let e = parse_targets("203.0.113.7\nwww.example.org\n").unwrap_err();
        assert_eq!(e.to_string(), "line 2: `www.example.org` is not an IPv4 address: `www.example.org`");
        let e = parse_targets("2001:db8::1 80\n").unwrap_err().to_string();
        assert!(e.contains("IPv6 targets are not surveyed"), "{e}");
        let e = parse_targets("203.0.113.7 0\n").unwrap_err().to_string();
        assert!(e.contains("not a TCP port"), "{e}");
        let e = parse_targets("203.0.113.7:99999\n").unwrap_err().to_string();
        assert!(e.contains("not a TCP port"), "{e}");
        let e = parse_targets("203.0.113.7 80 a\r\nX-Injected:1\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        let e = parse_targets("203.0.113.7 80 bad/host\n").unwrap_err().to_string();
        assert!(e.contains("not a host name"), "{e}");
        let e = parse_targets("203.0.113.7 80 a.example b.example\n").unwrap_err().to_string();
        assert!(e.contains("too many fields"), "{e}");
        let e = parse_targets("203.0.113.7\n203.0.113.7:80\n").unwrap_err();
        assert_eq!(e, TargetError::Duplicate { line: 2, key: "203.0.113.7:80".into(), first: 1 });
        assert!(parse_targets("224.0.0.1\n").is_err());
    }

    proptest::proptest! {
        #[test]
        fn a_written_target_reads_back(a in proptest::prelude::any::<u32>(), port in 1u16.., host in proptest::option::of("[a-z][a-z0-9-]{0,10}(\\.[a-z]{2,5}){0,2}")) {
            let addr = Ipv4Addr::from(a);
            proptest::prop_assume!(!addr.is_unspecified() && !addr.is_broadcast() && !addr.is_multicast());
            let t = Target { addr, port, host };
            let line = match &t.host { Some(h) => format!("{addr}:{port} {h}"), None => format!("{addr} {port}") };
            proptest::prop_assert_eq!(parse_targets(&line).unwrap(), vec![t]);
        }
    }
}
