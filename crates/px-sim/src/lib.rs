//! `px-sim`: a deterministic discrete-event network simulator.
//!
//! It runs the project's sans-I/O path-MTU components (`px-pmtud`'s RTT
//! estimators, RFC 8899 DPLPMTUD, F-PMTUD prober and responder) over paths a
//! small machine cannot build — chains of routers with their own MTUs, ICMP
//! black holes, fragment filters, delay, bandwidth, queues and loss — and
//! reproduces the experiments of the project's seeds. Everything is driven
//! by simulated time ([`time::SimTime`]) and one seeded `ChaCha8Rng`, so a
//! run is a pure function of its configuration and seed (checked by a trace
//! hash over every event).
//!
//! | layer | modules |
//! |---|---|
//! | event core | [`time`], [`queue`], [`trace`] |
//! | network | [`packet`], [`link`], [`net`], [`datagram`] |
//! | transport | [`transport`] (RFC 9002 loss detection and NewReno, or the picoquic sender model: its CUBIC, pacing, loss rules and PMTU reaction), [`dplpmtud`] (adapter to `px-pmtud`) |
//! | PMTUD endpoints | [`probers`] |
//! | experiments | [`experiments`]: `mtu_drop`, `pmtud_compare`, `mtu_benefit`, each with an SVG from [`svg`] |
//!
//! Supported: IPv4 chains, per-hop router policy, per-link MTU changes,
//! one bulk flow or one prober per run. Not supported: IPv6, branching
//! topologies, cross traffic, reordering, BBR, TCP handshakes (the
//! picoquic model has a one-round-trip handshake; see `docs/sim.md`).

pub mod datagram;
pub mod dplpmtud;
pub mod experiments;
pub mod link;
pub mod net;
pub mod packet;
pub mod probers;
pub mod queue;
pub mod svg;
pub mod time;
pub mod trace;
pub mod transport;

pub use link::LinkConfig;
pub use net::{End, Endpoint, Network, PathConfig, RouterPolicy};
pub use packet::{Packet, Payload};
pub use time::SimTime;
