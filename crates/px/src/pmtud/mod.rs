//! Path MTU discovery on real sockets: the I/O half of `px probe` and
//! `px fpmtud` (the protocol logic is px-pmtud's sans-I/O cores), and the
//! output parsers `px lab pmtud` uses for the tools it compares against.
//!
//! - [`sock`]: UDP sockets with DF control, `IP_MTU`, `IP_RECVFRAGSIZE`,
//!   `IP_PKTINFO`, `IP_RECVERR` (IPv4 and IPv6, unprivileged).
//! - [`client`]: the F-PMTUD, DPLPMTUD and classic ICMP drivers.
//! - [`daemon`]: the responder daemon.
//! - [`capture`]: every IPv4 fragment from a packet socket (root).

pub mod capture;
pub mod client;
pub mod daemon;
pub mod sock;
