//! What every benchmark loop does around the engine: drain its transmits
//! as an I/O loop would, and prefetch the next frames' headers. Shared by
//! the TCP ([`crate::engine_bench`]) and UDP ([`crate::udp_trace`]) runs.

use std::time::{Duration, Instant};

use px_gateway::{Engine, Port};
use px_wire::offload::{Checksum, PacketMeta};

use crate::trace::Chunk;

/// Sends (counts and recycles) every transmit the engine has queued; returns
/// the bytes they carry.
#[inline(always)]
pub fn drain(engine: &mut Engine) -> u64 {
    let mut sent = 0;
    while let Some(t) = engine.poll_transmit() {
        sent += (t.end - t.start) as u64;
        engine.recycle(t.buf);
    }
    sent
}

/// Hints the CPU to load the cache line at the start of `bytes`.
#[inline(always)]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; the pointer comes from a live slice.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(bytes.as_ptr().cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Hands every frame of `chunk` to the engine at its arrival time (trace
/// time from `base`), firing due timers first as an I/O loop would, and
/// drains the transmits; returns the bytes sent. Frames are rewritten in
/// place, so a chunk is fed once. This is the timed part of every TCP run.
pub fn feed(engine: &mut Engine, chunk: &mut Chunk, from: Port, rx_csum: Checksum, base: Instant) -> u64 {
    let mut sent = 0;
    for i in 0..chunk.frames.len() {
        let now = base + Duration::from_nanos(chunk.frames[i].t_ns);
        // Timers fire at their deadline, as an I/O loop's would.
        while let Some(d) = engine.poll_timeout().filter(|d| *d <= now) {
            engine.handle_timeout(d);
            sent += drain(engine);
        }
        // Like any batched I/O loop (DPDK's rte_prefetch0), pull the
        // headers of a frame a few ahead into the cache.
        if let Some(next) = chunk.frames.get(i + 8) {
            prefetch(&chunk.data[next.offset..]);
            if next.len > 64 {
                prefetch(&chunk.data[next.offset + 64..]);
            }
        }
        let v = engine.handle_packet(now, from, chunk.frame_mut(i), PacketMeta { csum: rx_csum, ..PacketMeta::PLAIN });
        sent += drain(engine);
        if let Some((_, range)) = v.forwarded(chunk.frames[i].len) {
            sent += range.len() as u64;
        }
    }
    sent
}

/// The receivers of `chunk`'s flows acknowledge everything before it with
/// the largest window ([`Chunk::receiver_acks`]): fed to `engine` from the
/// other port than `from` on the chunk's clock (`base`), untimed, before
/// the chunk itself (a gateway takes data from outside only inside what its
/// receiver allows).
pub fn open_windows(engine: &mut Engine, chunk: &Chunk, from: Port, rx_csum: Checksum, base: Instant) {
    let back = match from {
        Port::Outer => Port::Inner,
        Port::Inner => Port::Outer,
    };
    feed(engine, &mut chunk.receiver_acks(), back, rx_csum, base);
}

/// Opens the trace's bulk flows on `engine`: their SYNs arrive on `from`,
/// the SYN-ACKs on the other port, so the engine knows both ends' MSS (it
/// merges toward an inner host only once it has seen that host's MSS).
/// Untimed in every benchmark; the frames are rewritten in place.
pub fn open_flows(engine: &mut Engine, [syns, synacks]: [&mut Chunk; 2], from: Port, rx_csum: Checksum) {
    let base = Instant::now();
    let back = match from {
        Port::Outer => Port::Inner,
        Port::Inner => Port::Outer,
    };
    feed(engine, syns, from, rx_csum, base);
    feed(engine, synacks, back, rx_csum, base);
}
