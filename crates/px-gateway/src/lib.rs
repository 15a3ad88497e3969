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
//! Where each job lives (`docs/architecture.md` walks one segment through
//! them):
//! - [`engine`](Engine): the struct, the poll API and the dispatch
//!   (`engine/mod.rs`), with one child per job that adds to `impl Engine`:
//!   inbound TCP (`inbound.rs`, holds in `hold.rs`), outbound TCP and
//!   forwarding (`outbound.rs`), connection tracking applied (`track.rs`),
//!   the router's treatment (`route.rs`), path MTUs from ICMP
//!   (`learn.rs`), offloaded tunnel and UDP batches (`tunnel.rs`),
//!   caravans (`caravan/`).
//! - Leaves, which never name the engine: what a segment tells about its
//!   connection (`conntrack.rs`), MSS arithmetic and the option rewrite
//!   (`mss.rs`), the merge decision and the segment being filled
//!   (`merge/`), writing split pieces (`split.rs`), the parsed segment
//!   (`segment.rs`), router frames and ICMP answers (`router/`), tunnel
//!   headers (`tunnel.rs`), the caravans' state (`caravan/`), flows
//!   (`flow.rs`), the keyed hash (`hash.rs`), learned path MTUs
//!   (`pmtu.rs`), the one deadline queue (`timer.rs`), buffers (`buf.rs`),
//!   counters (`counters.rs`).

mod buf;
mod caravan;
mod config;
mod confirm;
mod conntrack;
mod counters;
mod engine;
pub mod fast_path;
mod flow;
mod hash;
pub mod imtu;
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
pub use px_units as units;

pub use buf::{HEADROOM, Transmit, Verdict};
pub use caravan::prefix::{Prefix, PrefixError};
pub use config::{Config, ConfigError, DEFAULT_MERGE_TIMEOUT, PshPolicy};
pub use conntrack::{ICMP_CHECKS_PER_SEC, ReceiveWindow};
pub use counters::{CaravanCounters, Counters, DropReason, FastPathCounters, FlushReason, HoldHistogram, PortCounters};
pub use engine::{Engine, FlowView, Footprint};
pub use flow::FlowKey;
pub use imtu::{Evidence, ImtuError, ImtuReplica, ImtuTable, SharedImtu, Trust};
pub use pmtu::SharedPmtu;
pub use port::Port;
