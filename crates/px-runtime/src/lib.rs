//! `px-runtime`: the sans-I/O cores of PacketExpress driven by real sockets.
//!
//! The layering follows quinn's (`quinn-proto` / `quinn` / `quinn-udp`):
//! `px-gateway` and `px-pmtud` decide, without I/O and with time passed in;
//! `px-io` owns the Linux sockets; this crate reads the clock, moves frames
//! between the two and owns threads, signals-to-stop flags and metrics.
//! The `px` command line is a thin shell over it.

pub mod caravan;
pub mod fast_path;
pub mod gateway;
pub mod logging;
pub mod pmtud;
pub mod systemd;
