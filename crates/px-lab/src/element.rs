//! What the lab's packet elements ([`crate::FrameObserver`],
//! [`crate::Impairment`]) share: px-io ports opened inside a namespace, and
//! a worker thread that runs until stopped (explicitly or on drop) and
//! hands back its result.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use px_io::{PacketSocket, SocketConfig};

use crate::LabError;
use crate::netns::Netns;

/// Opens a px-io socket on `dev` inside `ns`.
pub(crate) fn open_port(ns: &Netns, dev: &str, cfg: &SocketConfig) -> Result<PacketSocket, LabError> {
    crate::netns::check_ifname(dev)?;
    ns.run(|| PacketSocket::open(dev, cfg))?.map_err(|e| LabError::Observe(format!("{}:{dev}: {e}", ns.name())))
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
