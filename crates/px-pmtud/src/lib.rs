//! `px-pmtud`: sans-I/O path MTU discovery for PacketExpress.
//!
//! * [`rtt`]: RTT estimators (RFC 9002 classic, once-per-RTT variants).

pub mod rtt;
