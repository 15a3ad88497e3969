//! `px-wire`: typed, zero-copy views over the packets PacketExpress handles.
//!
//! Every view follows one pattern (smoltcp's): a struct over a buffer
//! `T: AsRef<[u8]>` made by `new_checked`, which validates every length the
//! accessors rely on, so that **after a successful checked constructor no
//! accessor can panic, whatever the bytes**. Setters need `T: AsMut<[u8]>`
//! and rewrite in place, which is what a gateway does to headers.
//! Checksums are full ([`checksum::Sum`]) or incremental (RFC 1624).
//! Nothing here allocates or performs I/O.

pub mod caravan;
pub mod checksum;
pub mod crc32c;
pub mod echo;
pub mod error;
pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod offload;
pub mod packet;
pub mod tcp;
pub mod udp;

pub use error::{Layer, ParseError};

/// Where a header field (a `field` range of [`tcp`], [`ipv4`], [`ipv6`] or
/// [`udp`]) lies in a frame whose header starts at `header`.
#[inline]
pub const fn at(header: usize, field: core::ops::Range<usize>) -> core::ops::Range<usize> {
    header + field.start..header + field.end
}
pub use packet::{FrameInfo, IpVersion, Transport};
