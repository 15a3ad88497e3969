//! A memory-mapped receive ring (`PACKET_RX_RING`, `TPACKET_V2`), the
//! alternative to [`crate::PacketSocket::recv_batch`]'s `recvmmsg`; a socket
//! gets one with [`crate::SocketConfig::rx_ring`] and reads it with
//! [`crate::PacketSocket::recv_ring`].
//!
//! The kernel copies each frame (with its virtio-net header just before it)
//! into the next free slot of a ring shared with user space and flips the
//! slot's status word; user space reads frames in place and hands slots
//! back by clearing the status. No syscall per batch while frames keep
//! coming; [`crate::Poller`] on the socket wakes up when the ring has work.
//!
//! `TPACKET_V2`, not V3: V3 hands over whole blocks, and a block is only
//! released to user space when full or when its retire timer (milliseconds)
//! fires, which would add that much latency to a quiet flow; V2 releases
//! every frame at once.
//!
//! Guarantees: a slot is read only while its status says user space owns
//! it (acquire load) and is returned with a release store after the caller
//! is done with the frame; the frame handed to the caller is bounded by the
//! slot, whatever the kernel's header fields say.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::rx::{
    MAX_FRAME, PacketType, RxError, RxFrames, RxPacket, TP_STATUS_VLAN_VALID, VLAN_ROOM, insert_vlan_tag,
    shift_vnet_for_tag,
};
use crate::sys::setsockopt;
use crate::vnet::{PacketMeta, VNET_HDR_LEN, VnetHeader};

/// Why a ring could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// Slot size or count out of range (slot < 2048 or > 16 MB, count 0).
    #[error("invalid ring geometry: {0}")]
    Geometry(&'static str),
    /// A setup step failed (`PACKET_VERSION`, `PACKET_RX_RING`, `mmap`).
    #[error("{step}: {source}")]
    Os {
        /// The failing step.
        step: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

/// Size of a receive ring ([`crate::SocketConfig::rx_ring`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// Slots wanted (rounded up to fill whole blocks).
    pub slots: usize,
    /// Bytes per slot, headers included: [`crate::MAX_FRAME`] + 128 holds
    /// any GRO super-packet; smaller slots truncate larger frames.
    pub slot_size: usize,
}

impl RingGeometry {
    /// 1024 slots that each hold a 64 KB super-packet (about 70 MB).
    pub const SUPER_PACKETS: RingGeometry = RingGeometry { slots: 1024, slot_size: MAX_FRAME + 128 };
}

/// The receive ring of one [`crate::PacketSocket`]; unmapped on drop.
#[derive(Debug)]
pub struct RxRing {
    map: *mut u8,
    map_len: usize,
    frame_size: usize,
    frames_per_block: usize,
    block_size: usize,
    frames: usize,
    head: usize,
    vnet: bool,
}

// SAFETY: the mapping is owned by this value alone; moving it to another
// thread moves the only user-space reader with it.
unsafe impl Send for RxRing {}
// SAFETY: the mapping is only read or written through `recv(&mut self)`;
// the public `&self` methods touch plain fields only, so shared references
// on several threads cannot race on the ring.
unsafe impl Sync for RxRing {}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}

/// Offset of the `sockaddr_ll` in a V2 slot: after the header, aligned.
const SLL_OFFSET: usize = (std::mem::size_of::<libc::tpacket2_hdr>() + 15) & !15;

impl RxRing {
    /// Attaches a ring to a packet socket that is not bound yet (so that no
    /// frame is in flight: attaching under traffic was seen to wedge the
    /// ring on this kernel). Called by [`PacketSocket::open`].
    pub(crate) fn attach(sock: &OwnedFd, vnet: bool, g: RingGeometry) -> Result<RxRing, RingError> {
        let (frames, frame_size) = (g.slots, g.slot_size);
        if !(2048..=16 << 20).contains(&frame_size) {
            return Err(RingError::Geometry("slot size must be 2048..=16M bytes"));
        }
        if frames == 0 {
            return Err(RingError::Geometry("at least one slot"));
        }
        let page = page_size();
        let frame_size = (frame_size + 15) & !15; // TPACKET_ALIGNMENT
        // Small slots share a 32 KB block; a large slot gets its own block,
        // rounded up to whole pages (blocks must be page multiples).
        let block_size = if frame_size <= 8 * page { 8 * page } else { frame_size.div_ceil(page) * page };
        let frames_per_block = block_size / frame_size;
        let blocks = frames.div_ceil(frames_per_block);
        let frames = blocks * frames_per_block;
        let os = |step| move |source| RingError::Os { step, source };
        let v2 = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        setsockopt(sock, libc::SOL_PACKET, libc::PACKET_VERSION, &v2).map_err(os("PACKET_VERSION"))?;
        let geometry = |n: usize| libc::c_uint::try_from(n).map_err(|_| RingError::Geometry("ring too large"));
        let req = libc::tpacket_req {
            tp_block_size: geometry(block_size)?,
            tp_block_nr: geometry(blocks)?,
            tp_frame_size: geometry(frame_size)?,
            tp_frame_nr: geometry(frames)?,
        };
        setsockopt(sock, libc::SOL_PACKET, libc::PACKET_RX_RING, &req).map_err(os("PACKET_RX_RING"))?;
        let map_len = block_size * blocks;
        // SAFETY: mapping the socket's ring, of exactly the size the kernel
        // expects for this geometry; the result is checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                sock.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(os("mmap")(io::Error::last_os_error()));
        }
        Ok(RxRing { map: map.cast(), map_len, frame_size, frames_per_block, block_size, frames, head: 0, vnet })
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.frames
    }

    fn slot(&self, i: usize) -> *mut u8 {
        let off = (i / self.frames_per_block) * self.block_size + (i % self.frames_per_block) * self.frame_size;
        // SAFETY: i < frames, so off + frame_size <= map_len.
        unsafe { self.map.add(off) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: tp_status is the first, 4-byte-aligned u32 of the slot
        // (slots are 16-byte aligned in a page-aligned mapping); the kernel
        // updates it concurrently, so it is only accessed atomically.
        unsafe { &*self.slot(i).cast::<AtomicU32>() }
    }

    /// Hands up to `max` ready frames to `f`, in arrival order, then
    /// returns their slots to the kernel. Returns how many frames were
    /// handed over (0: nothing ready; wait with a [`crate::Poller`]).
    pub fn recv<F: FnMut(Result<RxPacket<'_>, RxError>)>(&mut self, max: usize, mut f: F) -> usize {
        let batch = self.batch(max);
        batch.iter().for_each(&mut f);
        batch.len()
    }

    /// Borrows up to `max` ready frames (consecutive slots from the head)
    /// until the returned batch drops, so they can be rewritten in place
    /// and sent on with one `sendmmsg` without a copy.
    pub fn batch(&mut self, max: usize) -> RingBatch<'_> {
        let mut count = 0;
        while count < max.min(self.frames) {
            let i = (self.head + count) % self.frames;
            if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            self.restore_tag(i);
            count += 1;
        }
        RingBatch { ring: self, count }
    }

    /// Puts back the VLAN tag the kernel took out of slot `i`'s frame
    /// (`tp_vlan_tci`/`tp_vlan_tpid` with `TP_STATUS_VLAN_VALID`): the frame
    /// (and its virtio-net header, offsets moved) starts `VLAN_ROOM` bytes
    /// earlier, `tp_mac`/`tp_len`/`tp_snaplen` say so, and the status bit is
    /// cleared, so this happens once per frame. Slots whose layout leaves no
    /// room (never the kernel's) are left as they are.
    fn restore_tag(&mut self, i: usize) {
        let st = self.status(i).load(Ordering::Acquire);
        if st & TP_STATUS_VLAN_VALID == 0 {
            return;
        }
        // The slot after tp_status: `at(x)` is the slot offset x in it.
        const H: usize = 4;
        let at = |x: usize| x - H;
        // SAFETY: user space owns slot i (TP_STATUS_USER, checked by the
        // caller), a frame_size-byte region of the live mapping; the kernel
        // does not touch it until it is handed back. The slice leaves out
        // tp_status (bytes 0..4), which is only accessed atomically.
        let slot = unsafe { std::slice::from_raw_parts_mut(self.slot(i).add(H), self.frame_size - H) };
        let u32_at = |s: &[u8], x: usize| u32::from_ne_bytes([s[x], s[x + 1], s[x + 2], s[x + 3]]) as usize;
        let u16_at = |s: &[u8], x: usize| u16::from_ne_bytes([s[x], s[x + 1]]);
        let (len, snaplen, mac) = (u32_at(slot, at(4)), u32_at(slot, at(8)), usize::from(u16_at(slot, at(12))));
        let (tci, tpid) = (u16_at(slot, at(24)), u16_at(slot, at(26)));
        let hlen = if self.vnet { VNET_HDR_LEN } else { 0 };
        let floor = SLL_OFFSET + std::mem::size_of::<libc::sockaddr_ll>();
        if mac < floor + VLAN_ROOM + hlen || snaplen < len || mac + snaplen > self.frame_size {
            return;
        }
        let new = mac - VLAN_ROOM;
        if self.vnet {
            slot.copy_within(at(mac - hlen)..at(mac), at(new - hlen));
        }
        if !insert_vlan_tag(slot, at(new), snaplen, st, tci, tpid) {
            return;
        }
        if self.vnet {
            let mut h = [0u8; VNET_HDR_LEN];
            h.copy_from_slice(&slot[at(new - hlen)..at(new)]);
            shift_vnet_for_tag(&mut h);
            slot[at(new - hlen)..at(new)].copy_from_slice(&h);
        }
        slot[at(4)..at(8)].copy_from_slice(&((len + VLAN_ROOM) as u32).to_ne_bytes());
        slot[at(8)..at(12)].copy_from_slice(&((snaplen + VLAN_ROOM) as u32).to_ne_bytes());
        slot[at(12)..at(14)].copy_from_slice(&(new as u16).to_ne_bytes());
        self.status(i).store(st & !TP_STATUS_VLAN_VALID, Ordering::Release);
    }

    /// Where frame `i` (owned by user space) lies in its slot, and what its
    /// headers say; every offset is checked against the slot size.
    fn locate(&self, i: usize) -> Result<(PacketMeta, std::ops::Range<usize>, PacketType), RxError> {
        // SAFETY: user space owns the slot (status checked when the batch was
        // formed), so the kernel does not write it until it is released; the
        // slot is frame_size bytes inside the mapping, alive as long as &self.
        let slot = unsafe { std::slice::from_raw_parts(self.slot(i).cast_const(), self.frame_size) };
        let h = |at: usize| u32::from_ne_bytes([slot[at], slot[at + 1], slot[at + 2], slot[at + 3]]);
        let (len, snaplen) = (h(4) as usize, h(8) as usize);
        let mac = usize::from(u16::from_ne_bytes([slot[12], slot[13]]));
        if snaplen < len {
            return Err(RxError::Truncated { len, cap: snaplen });
        }
        if mac + snaplen > self.frame_size {
            return Err(RxError::Truncated { len, cap: self.frame_size });
        }
        let meta = if self.vnet {
            let start = mac.checked_sub(VNET_HDR_LEN).ok_or(RxError::Short(mac))?;
            let mut b = [0u8; VNET_HDR_LEN];
            b.copy_from_slice(&slot[start..mac]);
            PacketMeta::parse(&b)?
        } else {
            PacketMeta::PLAIN
        };
        // sockaddr_ll.sll_pkttype is at byte 10 of the struct.
        let pkt_type = PacketType::from(slot[SLL_OFFSET + 10]);
        Ok((meta, mac..mac + snaplen, pkt_type))
    }
}

/// Frames borrowed from an [`RxRing`]; their slots go back to the kernel
/// when this drops.
#[derive(Debug)]
pub struct RingBatch<'a> {
    ring: &'a mut RxRing,
    count: usize,
}

impl RingBatch<'_> {
    /// Frames in the batch.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if no frame was ready.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn slot_index(&self, k: usize) -> Result<usize, RxError> {
        if k < self.count { Ok((self.ring.head + k) % self.ring.frames) } else { Err(RxError::Index(k)) }
    }

    /// Frame `k` of the batch.
    pub fn get(&self, k: usize) -> Result<RxPacket<'_>, RxError> {
        let i = self.slot_index(k)?;
        let (meta, range, pkt_type) = self.ring.locate(i)?;
        // SAFETY: as in `locate`; the slice is inside slot i, which stays
        // owned by user space while `self` (and so this borrow) lives.
        let slot = unsafe { std::slice::from_raw_parts(self.ring.slot(i).cast_const(), self.ring.frame_size) };
        Ok(RxPacket { meta, frame: &slot[range], pkt_type })
    }

    /// Frame `k` for in-place rewriting (MSS option, checksums).
    pub fn get_mut(&mut self, k: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
        let i = self.slot_index(k)?;
        let (meta, range, _) = self.ring.locate(i)?;
        // SAFETY: as in `get`, and `&mut self` makes this the only reference
        // into slot i for its lifetime.
        let slot = unsafe { std::slice::from_raw_parts_mut(self.ring.slot(i), self.ring.frame_size) };
        Ok((meta, &mut slot[range]))
    }

    /// All frames of the batch, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = Result<RxPacket<'_>, RxError>> {
        (0..self.count).map(|k| self.get(k))
    }
}

impl RxFrames for RingBatch<'_> {
    fn len(&self) -> usize {
        RingBatch::len(self)
    }
    fn get(&self, k: usize) -> Result<RxPacket<'_>, RxError> {
        RingBatch::get(self, k)
    }
    fn get_mut(&mut self, k: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
        RingBatch::get_mut(self, k)
    }
}

impl Drop for RingBatch<'_> {
    fn drop(&mut self) {
        let r = &mut *self.ring;
        for _ in 0..self.count {
            r.status(r.head).store(libc::TP_STATUS_KERNEL, Ordering::Release);
            r.head = (r.head + 1) % r.frames;
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mapped in `attach`; no
        // reference into it outlives `self` (all borrow `&self`).
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sll_offset_matches_the_kernel_layout() {
        // TPACKET2_HDRLEN = TPACKET_ALIGN(sizeof(tpacket2_hdr)) + sizeof(sockaddr_ll)
        assert_eq!(SLL_OFFSET + std::mem::size_of::<libc::sockaddr_ll>(), libc::TPACKET2_HDRLEN);
        assert_eq!(SLL_OFFSET, 32);
    }
}
