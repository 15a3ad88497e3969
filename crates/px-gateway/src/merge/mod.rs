//! Inbound merging: contiguous in-order segments of a bulk flow become one
//! segment of up to the inner MSS.
//!
//! - [`decide`]: whether a segment joins a hold or passes on, and the one
//!   reason why not (bulk detection, PSH, control flags, order, checksum);
//!   the flow's merge state ([`decide::MergeState`]).
//! - [`budget`]: what all holds take together, bounded by `max_held_bytes`.
//! - [`held`]: one inner segment being filled, copied into place once and
//!   finished with header work only.
//!
//! The engine carries the decision out: `engine/inbound.rs` fills holds,
//! `engine/hold.rs` starts, sends and bounds them.

pub(crate) mod budget;
pub(crate) mod decide;
pub(crate) mod held;
