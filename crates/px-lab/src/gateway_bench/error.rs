//! Why `px bench gateway` could not run (its own file: the round's driver,
//! `mod.rs`, and the generator and sinks, `replay.rs`, both return it).

use px_netns::LabError;

/// Why `px bench gateway` could not run.
#[derive(Debug, thiserror::Error)]
pub enum GatewayBenchError {
    /// Namespaces and packet sockets need root.
    #[error("px bench gateway needs root (network namespaces, AF_PACKET)")]
    NotRoot,
    /// The line, its addresses or a command inside a namespace failed.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// Installing the signal cleanup, or the router's neighbour file, failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// RPS steering or reading the router's MAC addresses failed.
    #[error("{0}")]
    Setup(String),
    /// A packet socket of the generator or the sinks could not be opened or
    /// could not send.
    #[error("{0}")]
    Socket(String),
    /// `px gateway` did not start, or did not stop cleanly.
    #[error(transparent)]
    Gateway(#[from] px_netns::gateway::GatewayError),
    /// The sink thread panicked.
    #[error("sink thread panicked")]
    SinkPanicked,
}
