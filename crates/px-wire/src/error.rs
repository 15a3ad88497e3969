//! The one error of the wire layer: a checked constructor refused the bytes.

use core::fmt;

/// Which header a [`ParseError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Ethernet,
    Ipv4,
    Ipv6,
    Ipv6Extension,
    Tcp,
    TcpOption,
    Udp,
    Icmpv4,
    Icmpv6,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Layer::Ethernet => "ethernet",
            Layer::Ipv4 => "ipv4",
            Layer::Ipv6 => "ipv6",
            Layer::Ipv6Extension => "ipv6 extension header",
            Layer::Tcp => "tcp",
            Layer::TcpOption => "tcp option",
            Layer::Udp => "udp",
            Layer::Icmpv4 => "icmpv4",
            Layer::Icmpv6 => "icmpv6",
        };
        f.write_str(s)
    }
}

/// Why a checked constructor refused a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The buffer ends before the header (or the length it declares) does.
    #[error("{layer}: {len} bytes is shorter than the {need} bytes required")]
    Truncated { layer: Layer, len: usize, need: usize },
    /// A field holds a value the format does not allow.
    #[error("{layer}: field `{field}` has invalid value {value}")]
    Malformed { layer: Layer, field: &'static str, value: u32 },
}

pub(crate) fn need(layer: Layer, len: usize, need: usize) -> Result<(), ParseError> {
    if len < need { Err(ParseError::Truncated { layer, len, need }) } else { Ok(()) }
}
