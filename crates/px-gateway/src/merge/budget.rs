//! The hold budget: what all of an engine's holds take together, so that
//! `Config::max_held_bytes` bounds them (the engine sends the oldest holds
//! first when a new one would pass it, `engine/hold.rs`).

/// What live holds take: buffer capacity reserved (bounded by
/// `max_held_bytes`) and payload bytes held.
#[derive(Debug, Default)]
pub(crate) struct HoldBudget {
    /// Capacity reserved by live holds.
    pub reserved: usize,
    /// Payload bytes in live holds.
    pub bytes: usize,
    /// The next hold's id (ids tell a live hold's deadline from a stale one).
    next_id: u64,
}

impl HoldBudget {
    /// A fresh hold id.
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}
