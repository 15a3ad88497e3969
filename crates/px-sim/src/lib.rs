//! `px-sim`: a deterministic discrete-event network simulator.
//!
//! It runs the project's sans-I/O path-MTU components over paths a small
//! machine cannot build — chains of routers with their own MTUs, ICMP black
//! holes, fragment filters, delay, bandwidth, queues and loss — and
//! reproduces the experiments of the project's seeds. Everything is driven
//! by simulated time ([`time::SimTime`]) and one seeded `ChaCha8Rng`, so a
//! run is a pure function of its configuration and seed (checked by a trace
//! hash over every event).

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
