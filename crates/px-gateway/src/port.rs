//! The gateway's two ports. Every frame arrives on one and, if it goes on,
//! leaves by the other (ICMP errors go back out of the port they answer).

use serde::Serialize;

/// The two ports of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Port {
    /// Toward the b-network (iMTU).
    Inner,
    /// Toward the legacy network (eMTU).
    Outer,
}

impl Port {
    pub fn other(self) -> Port {
        match self {
            Port::Inner => Port::Outer,
            Port::Outer => Port::Inner,
        }
    }
}
