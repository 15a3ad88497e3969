//! Inbound merging: contiguous in-order segments of a bulk flow become one
//! segment of up to the inner MSS.
//!
//! - [`policy`]: what is held, how long, and when it is sent (bulk
//!   detection, flushes, the hold deadline, memory pressure).
//! - [`held`]: one inner segment being filled, copied into place once and
//!   finished with header work only.

pub(crate) mod held;
mod policy;
