//! `px probe`'s drivers: the F-PMTUD, DPLPMTUD and classic ICMP methods
//! over px-io's UDP sockets ([`px_io::udp`]). The responder daemon is
//! `px_runtime::pmtud::responder`, the fragment capture
//! [`px_io::frag_capture`].
//!
//! - [`client`]: the F-PMTUD, DPLPMTUD and classic ICMP drivers.

pub mod client;
