//! `px lab border` (issue 30): a border of several gateways.
//!
//! - [`ecmp`]: two gateways behind the routers' ECMP, BGP and BFD across
//!   each (BIRD 2), `kill -9` of one during sha256-checked transfers both
//!   ways, and its return.
//! - [`bird`]: BIRD 2 as a lab process (per-run configuration and control
//!   socket, killed by PID).
//!
//! Every run builds its namespaces through [`crate::Topology`] and keeps
//! its files in a [`Scratch`] directory, so namespaces, daemons, gateways
//! and files are removed on every exit path (drop, panic, SIGINT/SIGTERM).

pub mod bird;
pub mod ecmp;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A per-run directory under the temporary directory (daemon
/// configurations, control sockets, logs), removed on drop and by the
/// signal cleanup.
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// Creates `<tmp>/px-border-<what>-<pid>-<n>`.
    pub fn new(what: &str) -> Result<Scratch, String> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("px-border-{what}-{}-{n}", std::process::id()));
        crate::cleanup::register_path(&p);
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(Scratch(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        crate::cleanup::unregister_path(&self.0);
    }
}
