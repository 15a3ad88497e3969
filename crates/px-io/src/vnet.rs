//! The virtio-net header that `PACKET_VNET_HDR` puts in front of every
//! frame, as typed metadata.
//!
//! On RX it tells the engine that a frame is a kernel GRO super-packet
//! (`gso` is the segment size the sender used) and whether the TCP/UDP
//! checksum is still *partial* (only the pseudo-header sum is in the
//! checksum field; the payload has not been summed). On TX it asks the
//! kernel to cut a super-packet into `gso.size`-byte segments and to
//! finish the checksum. Layout: `struct virtio_net_hdr` of
//! `<linux/virtio_net.h>`, 10 bytes, in host byte order (AF_PACKET uses
//! the legacy, native-endian virtio format).
//!
//! The metadata types themselves ([`PacketMeta`], [`Gso`], [`Checksum`])
//! are `px_wire::offload`'s, shared with the engine; this module encodes
//! and decodes them ([`VnetHeader`]). [`VnetHeader::parse`] accepts only
//! what the kernel defines; anything else is a [`VnetError`], never a panic.

pub use px_wire::offload::{Checksum, Gso, GsoKind, PacketMeta};

/// Size of `struct virtio_net_hdr`.
pub const VNET_HDR_LEN: usize = 10;

const F_NEEDS_CSUM: u8 = 1;
const F_DATA_VALID: u8 = 2;
const F_RSC_INFO: u8 = 4;
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
const GSO_ECN: u8 = 0x80;

/// Why a virtio-net header cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VnetError {
    /// `gso_type` is not NONE, TCPV4, TCPV6 or UDP_L4 (legacy UFO included).
    #[error("unsupported gso_type {0:#x}")]
    GsoType(u8),
    /// A GSO packet with `gso_size` 0 cannot be segmented.
    #[error("gso_type set but gso_size is 0")]
    ZeroGsoSize,
    /// `flags` has bits this code does not know.
    #[error("unknown virtio-net flags {0:#x}")]
    Flags(u8),
}

/// The virtio-net encoding of [`PacketMeta`] (a trait because the type
/// lives in `px-wire`, which knows no I/O).
pub trait VnetHeader: Sized {
    /// Decodes a header as the kernel wrote it.
    fn parse(b: &[u8; VNET_HDR_LEN]) -> Result<Self, VnetError>;
    /// Encodes for TX (or for a test's RX fixture).
    fn to_bytes(&self) -> [u8; VNET_HDR_LEN];
}

impl VnetHeader for PacketMeta {
    fn parse(b: &[u8; VNET_HDR_LEN]) -> Result<PacketMeta, VnetError> {
        let flags = b[0];
        let gso_type = b[1];
        let hdr_len = u16::from_ne_bytes([b[2], b[3]]);
        let gso_size = u16::from_ne_bytes([b[4], b[5]]);
        let start = u16::from_ne_bytes([b[6], b[7]]);
        let offset = u16::from_ne_bytes([b[8], b[9]]);
        if flags & !(F_NEEDS_CSUM | F_DATA_VALID | F_RSC_INFO) != 0 {
            return Err(VnetError::Flags(flags));
        }
        let kind = match gso_type & !GSO_ECN {
            GSO_NONE => None,
            GSO_TCPV4 => Some(GsoKind::TcpV4),
            GSO_TCPV6 => Some(GsoKind::TcpV6),
            GSO_UDP_L4 => Some(GsoKind::UdpL4),
            _ => return Err(VnetError::GsoType(gso_type)),
        };
        let gso = match kind {
            None => None,
            Some(_) if gso_size == 0 => return Err(VnetError::ZeroGsoSize),
            Some(kind) => Some(Gso { kind, size: gso_size, ecn: gso_type & GSO_ECN != 0 }),
        };
        let csum = if flags & F_NEEDS_CSUM != 0 {
            Checksum::Partial { start, offset }
        } else if flags & F_DATA_VALID != 0 {
            Checksum::Valid
        } else {
            Checksum::Unknown
        };
        Ok(PacketMeta { gso, csum, hdr_len })
    }

    fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let (flags, start, offset) = match self.csum {
            Checksum::Unknown => (0, 0, 0),
            Checksum::Partial { start, offset } => (F_NEEDS_CSUM, start, offset),
            Checksum::Valid => (F_DATA_VALID, 0, 0),
        };
        let (gso_type, gso_size) = match self.gso {
            None => (GSO_NONE, 0),
            Some(g) => {
                let t = match g.kind {
                    GsoKind::TcpV4 => GSO_TCPV4,
                    GsoKind::TcpV6 => GSO_TCPV6,
                    GsoKind::UdpL4 => GSO_UDP_L4,
                };
                (t | if g.ecn { GSO_ECN } else { 0 }, g.size)
            }
        };
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = flags;
        b[1] = gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&start.to_ne_bytes());
        b[8..10].copy_from_slice(&offset.to_ne_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use px_wire::checksum;

    #[test]
    fn parses_a_gro_tcpv4_header() {
        // flags NEEDS_CSUM, TCPV4, hdr_len 66, gso_size 1448, csum at 34+16.
        let mut b = [0u8; 10];
        b[0] = 1;
        b[1] = 1;
        b[2..4].copy_from_slice(&66u16.to_ne_bytes());
        b[4..6].copy_from_slice(&1448u16.to_ne_bytes());
        b[6..8].copy_from_slice(&34u16.to_ne_bytes());
        b[8..10].copy_from_slice(&16u16.to_ne_bytes());
        let m = PacketMeta::parse(&b).unwrap();
        assert_eq!(m.gso, Some(Gso { kind: GsoKind::TcpV4, size: 1448, ecn: false }));
        assert_eq!(m.csum, Checksum::Partial { start: 34, offset: 16 });
        assert_eq!(m.hdr_len, 66);
        assert_eq!(m.to_bytes(), b);
    }

    #[test]
    fn plain_is_all_zero() {
        assert_eq!(PacketMeta::PLAIN.to_bytes(), [0; 10]);
        assert_eq!(PacketMeta::parse(&[0; 10]).unwrap(), PacketMeta::PLAIN);
    }

    #[test]
    fn data_valid_and_ecn() {
        let mut b = [0u8; 10];
        b[0] = 2;
        b[1] = 4 | 0x80;
        b[4..6].copy_from_slice(&1428u16.to_ne_bytes());
        let m = PacketMeta::parse(&b).unwrap();
        assert_eq!(m.csum, Checksum::Valid);
        assert_eq!(m.gso, Some(Gso { kind: GsoKind::TcpV6, size: 1428, ecn: true }));
    }

    #[test]
    fn rejects_what_the_kernel_does_not_define() {
        let mut b = [0u8; 10];
        b[1] = 3; // legacy UFO
        b[4] = 1;
        assert_eq!(PacketMeta::parse(&b), Err(VnetError::GsoType(3)));
        b[1] = 9;
        assert_eq!(PacketMeta::parse(&b), Err(VnetError::GsoType(9)));
        b[1] = 1;
        b[4..6].copy_from_slice(&0u16.to_ne_bytes());
        assert_eq!(PacketMeta::parse(&b), Err(VnetError::ZeroGsoSize));
        let mut f = [0u8; 10];
        f[0] = 8;
        assert_eq!(PacketMeta::parse(&f), Err(VnetError::Flags(8)));
    }

    /// The partial checksum of a received frame is completed by px-wire's
    /// one function ([`px_wire::offload::complete_partial`]).
    fn finish(f: &mut [u8], start: u16, offset: u16) -> bool {
        px_wire::offload::complete_partial(f, Checksum::Partial { start, offset }).is_ok()
    }

    fn folded(data: &[u8]) -> u16 {
        checksum::fold(checksum::Sum::of(data))
    }

    #[test]
    fn finish_checksum_matches_rfc1071_example() {
        // RFC 1071 section 3 example bytes, placed after a 2-byte field.
        let mut f = vec![0u8, 0, 0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert!(finish(&mut f, 0, 0));
        // Sum of the data is 0xddf2 (RFC 1071), so the checksum is !0xddf2.
        assert_eq!(u16::from_be_bytes([f[0], f[1]]), !0xddf2);
        assert_eq!(folded(&f), 0xffff);
        assert!(!finish(&mut f, 9, 0));
        assert!(!finish(&mut f, 4, 6));
    }

    proptest! {
        #[test]
        fn roundtrip_any_valid_header(gso in proptest::option::of((0u8..3, 1u16.., any::<bool>())),
                                      csum in 0u8..3, start: u16, offset: u16, hdr_len: u16) {
            let gso = gso.map(|(k, size, ecn)| Gso {
                kind: [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::UdpL4][usize::from(k)], size, ecn });
            let csum = match csum { 0 => Checksum::Unknown, 1 => Checksum::Valid,
                                    _ => Checksum::Partial { start, offset } };
            let m = PacketMeta { gso, csum, hdr_len };
            prop_assert_eq!(PacketMeta::parse(&m.to_bytes()), Ok(m));
        }

        #[test]
        fn parse_never_panics(b: [u8; 10]) {
            let _ = PacketMeta::parse(&b);
        }

        #[test]
        fn finished_checksum_verifies(mut data in proptest::collection::vec(any::<u8>(), 20..200),
                                      pseudo: u16) {
            // The field holds the pseudo-header sum, as NEEDS_CSUM promises.
            data[16..18].copy_from_slice(&pseudo.to_be_bytes());
            prop_assert!(finish(&mut data, 0, 16));
            // A receiver sums pseudo-header and segment and expects all ones.
            // (Prepended, so an odd-length segment keeps its alignment.)
            let mut v = pseudo.to_be_bytes().to_vec();
            v.extend_from_slice(&data);
            prop_assert_eq!(folded(&v), 0xffff);
        }
    }
}
