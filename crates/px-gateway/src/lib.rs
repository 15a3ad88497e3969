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

mod buf;
mod config;
mod counters;
mod engine;
mod flow;
mod merge;
mod pmtu;
mod router;
mod segment;
mod split;

pub use buf::{HEADROOM, Transmit, Verdict};
pub use config::{Config, ConfigError, DEFAULT_MERGE_TIMEOUT, PshPolicy};
pub use counters::{Counters, DropReason, FlushReason, HoldHistogram, Port, PortCounters};
pub use engine::Engine;
pub use engine::caravan::{CaravanCounters, Prefix, PrefixError};
pub use flow::FlowKey;
