//! Path MTU discovery on real sockets: px-pmtud's sans-I/O cores driven
//! over px-io's UDP sockets.
//!
//! - [`responder`]: the F-PMTUD responder daemon (`px fpmtud`).
//! - [`probe`]: `px probe`'s driver of px-pmtud's probe sessions.
//! - [`late_bind`]: a test responder that behaves on the wire like the
//!   paper authors' reference destination (binds late, legacy replies).

pub mod late_bind;
pub mod probe;
pub mod responder;
