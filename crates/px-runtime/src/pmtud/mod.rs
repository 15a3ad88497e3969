//! Path MTU discovery on real sockets: px-pmtud's sans-I/O cores driven
//! over px-io's UDP sockets.
//!
//! - [`responder`]: the F-PMTUD responder daemon (`px fpmtud`).

pub mod responder;
