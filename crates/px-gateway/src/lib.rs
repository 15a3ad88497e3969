//! `px-gateway`: the sans-I/O MTU-translating engine of PacketExpress.
//!
//! Frames and the current time go in ([`Engine::handle_packet`]); frames
//! ([`Engine::poll_transmit`]) and the next deadline
//! ([`Engine::poll_timeout`]) come out. Inbound (outer → inner) TCP segments
//! of bulk flows are merged into inner-MSS segments; outbound segments are cut
//! to the outer MSS or learned path MTU; SYN MSS options are raised inbound
//! and clamped outbound; UDP toward caravan-capable hosts is packed into
//! PX-caravans inbound and unpacked outbound (`docs/caravan.md`); everything
//! else gets a router's treatment. See `DESIGN.md` for the invariants every
//! test here checks.

//!
//! Where each job lives:
//! - [`engine`](Engine): dispatch and the poll API (`engine.rs`).
//! - TCP inbound: the merge policy (`merge/policy.rs`) and the segment
//!   being filled (`merge/held.rs`); outbound and forwarding: the segment
//!   size limit, GSO hand-off and software split (`split.rs`); SYN MSS
//!   rewriting (`mss.rs`); the parsed segment (`segment.rs`).
//! - UDP caravans: pack, unpack, the prefix table (`caravan/`).
//! - Everything else: the router's treatment and path MTUs learned from
//!   ICMP (`router/`, `pmtu.rs`); tunnel super-packets, inner partial
//!   checksums and UDP GRO batches are first cut back into the frames they
//!   were made of (`tunnel.rs`).
//! - State: flows (`flow.rs`), the one deadline queue for TCP holds and
//!   caravans (`timer.rs`), buffers (`buf.rs`), counters (`counters.rs`).

mod buf;
mod caravan;
mod config;
mod counters;
mod engine;
mod flow;
mod merge;
mod mss;
mod pmtu;
mod port;
mod router;
mod segment;
mod split;
#[cfg(test)]
mod test_frames;
mod timer;
mod tunnel;

pub use buf::{HEADROOM, Transmit, Verdict};
pub use caravan::prefix::{Prefix, PrefixError};
pub use config::{Config, ConfigError, DEFAULT_MERGE_TIMEOUT, PshPolicy};
pub use counters::{CaravanCounters, Counters, DropReason, FlushReason, HoldHistogram, PortCounters};
pub use engine::Engine;
pub use flow::FlowKey;
pub use pmtu::{ICMP_CHECKS_PER_SEC, SharedPmtu};
pub use port::Port;
