//! What the lab's packet elements ([`crate::FrameObserver`],
//! [`crate::Impairment`]) and the root tests share: px-io ports opened
//! inside a namespace, the two ways the lab sends frames through px-io's
//! one send path ([`px_io::TxQueue`]): one frame ([`send_frame`]), or a
//! stream forwarded as a router does, dropping what the kernel will not
//! take ([`send_or_drop`]); and a worker thread that runs until stopped
//! (explicitly or on drop) and hands back its result.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use px_io::{PacketMeta, PacketSocket, SendError, SocketConfig, TxBatch};

use crate::LabError;
use crate::netns::Netns;

/// Opens a px-io socket on `dev` inside `ns`.
pub(crate) fn open_port(ns: &Netns, dev: &str, cfg: &SocketConfig) -> Result<PacketSocket, LabError> {
    crate::netns::check_ifname(dev)?;
    ns.run(|| PacketSocket::open(dev, cfg))?.map_err(|e| LabError::Observe(format!("{}:{dev}: {e}", ns.name())))
}

/// Sends one frame (a one-slot queue: for injecting test frames, not for
/// paths where the rate matters).
pub fn send_frame(sock: &PacketSocket, meta: &PacketMeta, frame: &[u8]) -> Result<(), SendError> {
    let mut tx = TxBatch::new(1);
    let mut q = sock.queue(&mut tx);
    q.push(meta, frame);
    q.send().map(|_| ())
}

/// Sends `frames` through `to` in `sendmmsg` batches of `tx`'s capacity,
/// dropping what the kernel will not take, as a router drops on a full
/// queue: a refused frame, and once the send buffer is full, everything
/// left. Never blocks. Returns (sent, dropped).
pub fn send_or_drop<'a>(
    to: &PacketSocket,
    tx: &mut TxBatch,
    mut frames: impl Iterator<Item = (PacketMeta, &'a [u8])>,
) -> (usize, usize) {
    let mut q = to.queue(tx);
    let (mut sent, mut dropped) = (0, 0);
    while q.fill(&mut frames) > 0 {
        match q.send() {
            Ok(n) if n > 0 => sent += n,
            Err(SendError::Refused { .. }) => dropped += 1,
            Ok(_) | Err(SendError::WouldBlock) => {
                dropped += q.clear() + frames.count();
                break;
            }
        }
    }
    (sent, dropped)
}

/// A thread that runs `f(&stop_flag)` until the flag is set.
#[derive(Debug)]
pub(crate) struct Element<T> {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Default + Send + 'static> Element<T> {
    pub(crate) fn spawn<F>(name: String, f: F) -> Result<Element<T>, LabError>
    where
        F: FnOnce(&AtomicBool) -> T + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || f(&flag))
            .map_err(|e| LabError::Observe(e.to_string()))?;
        Ok(Element { stop, thread: Some(thread) })
    }

    /// Stops the thread and returns its result (the default if it already
    /// stopped or panicked).
    pub(crate) fn stop(&mut self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl<T> Drop for Element<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
