//! quinn's UDP socket with its GSO batches kept under the 64 KB a UDP
//! datagram (and so one `UDP_SEGMENT` send) may carry.
//!
//! quinn 0.11 batches up to 10 packets of the current size into one GSO
//! send (`MAX_TRANSMIT_SEGMENTS`). At 8952-byte packets that is 89,520
//! bytes: the kernel refuses the send with `EMSGSIZE`, which quinn-udp
//! takes for an MTU probe too large and ignores, so the ten packets are
//! lost without a word (above ~6.5 KB packets, every full batch). The lab
//! saw it as 4,600 of 15,800 packets declared lost at 8952 bytes while
//! every frame that reached the wire arrived. [`GsoCapped`] tells quinn
//! how many segments fit instead.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Runtime, TokioRuntime, UdpPoller};

use crate::{QuicError, io_err};

/// The largest UDP payload of one send (65,535 less the IPv6 and UDP
/// headers: right for both families).
pub const MAX_GSO_BYTES: usize = 65_535 - 48;

/// GSO segments of `largest_payload` bytes that fit one send (at least 1).
#[must_use]
pub fn segments_that_fit(largest_payload: u16) -> usize {
    (MAX_GSO_BYTES / usize::from(largest_payload.max(1))).max(1)
}

/// A quinn socket that never asks for more GSO segments than fit.
pub struct GsoCapped {
    inner: Arc<dyn AsyncUdpSocket>,
    max_segments: usize,
}

impl fmt::Debug for GsoCapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GsoCapped").field("inner", &self.inner).field("max_segments", &self.max_segments).finish()
    }
}

impl GsoCapped {
    /// Wraps `sock` (tokio, quinn-udp) for packets of at most `largest_payload` bytes.
    pub fn wrap(sock: std::net::UdpSocket, largest_payload: u16) -> Result<Arc<GsoCapped>, QuicError> {
        let inner = TokioRuntime.wrap_udp_socket(sock).map_err(io_err("quinn socket"))?;
        let max_segments = inner.max_transmit_segments().min(segments_that_fit(largest_payload));
        Ok(Arc::new(GsoCapped { inner, max_segments }))
    }
}

impl AsyncUdpSocket for GsoCapped {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Arc::clone(&self.inner).create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.max_segments
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_stay_under_64k() {
        assert_eq!(segments_that_fit(8952), 7);
        assert_eq!(segments_that_fit(8972), 7);
        assert_eq!(segments_that_fit(4096), 15);
        assert_eq!(segments_that_fit(1252), 52);
        assert_eq!(segments_that_fit(0), MAX_GSO_BYTES);
        assert_eq!(segments_that_fit(u16::MAX), 1);
        for p in [1200u16, 1472, 6000, 6553, 8952, 9000, 65_487] {
            assert!(segments_that_fit(p) * usize::from(p) <= MAX_GSO_BYTES || segments_that_fit(p) == 1, "{p}");
        }
    }
}
