//! One module per `px` subcommand.

pub mod bench;
pub mod gateway;
