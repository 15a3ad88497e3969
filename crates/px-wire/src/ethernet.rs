//! Ethernet II frames with up to two 802.1Q / 802.1ad VLAN tags.
//!
//! The gateway is a bump in the wire: it keeps the link header of the frames
//! it forwards, so the view exposes where the network header starts rather
//! than a fixed 14-byte offset.

use crate::error::{Layer, ParseError, need};

pub const HEADER_LEN: usize = 14;
pub const VLAN_TAG_LEN: usize = 4;

/// EtherType values the gateway distinguishes.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
    pub const IPV6: u16 = 0x86dd;
}

/// A checked view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
    /// Offset of the network-layer header, after any VLAN tags.
    payload_offset: usize,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the header and every VLAN tag it announces are present.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        need(Layer::Ethernet, b.len(), HEADER_LEN)?;
        let mut off = 12;
        let mut tags = 0;
        loop {
            let et = u16::from_be_bytes([b[off], b[off + 1]]);
            if et == ethertype::VLAN || et == ethertype::QINQ {
                tags += 1;
                if tags > 2 {
                    return Err(ParseError::Malformed { layer: Layer::Ethernet, field: "vlan tags", value: tags });
                }
                off += VLAN_TAG_LEN;
                need(Layer::Ethernet, b.len(), off + 2)?;
            } else {
                break;
            }
        }
        Ok(EthernetFrame { buffer, payload_offset: off + 2 })
    }

    pub fn dst(&self) -> [u8; 6] {
        let b = self.buffer.as_ref();
        [b[0], b[1], b[2], b[3], b[4], b[5]]
    }

    pub fn src(&self) -> [u8; 6] {
        let b = self.buffer.as_ref();
        [b[6], b[7], b[8], b[9], b[10], b[11]]
    }

    /// The EtherType after any VLAN tags.
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[self.payload_offset - 2], b[self.payload_offset - 1]])
    }

    /// The outermost VLAN ID, if tagged.
    pub fn vlan_id(&self) -> Option<u16> {
        if self.payload_offset == HEADER_LEN {
            return None;
        }
        let b = self.buffer.as_ref();
        Some(u16::from_be_bytes([b[14], b[15]]) & 0x0fff)
    }

    /// Length of the link header, VLAN tags included.
    pub fn header_len(&self) -> usize {
        self.payload_offset
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_offset..]
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    pub fn set_dst(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[0..6].copy_from_slice(&mac);
    }

    pub fn set_src(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[6..12].copy_from_slice(&mac);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let off = self.payload_offset;
        &mut self.buffer.as_mut()[off..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged() {
        let mut f = [0u8; 20];
        f[12] = 0x08;
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.ethertype(), ethertype::IPV4);
        assert_eq!(e.header_len(), 14);
        assert_eq!(e.vlan_id(), None);
        assert_eq!(e.payload().len(), 6);
    }

    #[test]
    fn double_tagged() {
        let mut f = [0u8; 30];
        f[12..14].copy_from_slice(&ethertype::QINQ.to_be_bytes());
        f[14..16].copy_from_slice(&0x0123u16.to_be_bytes());
        f[16..18].copy_from_slice(&ethertype::VLAN.to_be_bytes());
        f[20..22].copy_from_slice(&ethertype::IPV6.to_be_bytes());
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.ethertype(), ethertype::IPV6);
        assert_eq!(e.header_len(), 22);
        assert_eq!(e.vlan_id(), Some(0x123));
    }

    #[test]
    fn truncated_tag_and_too_many_tags() {
        let mut f = [0u8; 16];
        f[12..14].copy_from_slice(&ethertype::VLAN.to_be_bytes());
        assert!(matches!(EthernetFrame::new_checked(&f[..]), Err(ParseError::Truncated { .. })));
        let mut g = [0u8; 40];
        for i in 0..3 {
            g[12 + 4 * i..14 + 4 * i].copy_from_slice(&ethertype::VLAN.to_be_bytes());
        }
        assert!(matches!(EthernetFrame::new_checked(&g[..]), Err(ParseError::Malformed { .. })));
    }
}
