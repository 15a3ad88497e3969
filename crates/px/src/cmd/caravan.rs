//! `px caravan send|recv`: an example sender and receiver of PX-caravans
//! (`docs/caravan.md`) for the lab; the logic is
//! [`px_runtime::caravan`], this module parses the flags and prints the
//! summaries.
//!
//! `send` sends sequence-numbered UDP datagrams on one socket per flow,
//! plain or (with `--caravan`) packed into caravans sent with the caravan
//! DSCP. `recv` checks every datagram: its flow's next sequence number, its
//! bytes. It prints the counts and exits 1 if any datagram was corrupt,
//! duplicated or out of order (or, with `--expect`, missing).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use px_runtime::caravan::{self, RecvConfig, SendConfig};

#[derive(Debug, Subcommand)]
pub enum CaravanCommand {
    /// Send sequence-numbered UDP datagrams, plain or packed in caravans.
    Send(SendArgs),
    /// Receive datagrams and caravans, check every sequence number and byte.
    Recv(RecvArgs),
}

/// A command's own flags (its configuration derives them) and `--json`.
#[derive(Debug, Args)]
pub struct WithJson<C: clap::Args> {
    #[command(flatten)]
    c: C,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub type SendArgs = WithJson<SendConfig>;
pub type RecvArgs = WithJson<RecvConfig>;

pub fn run(c: CaravanCommand) -> Result<ExitCode, String> {
    crate::signals::install();
    match c {
        CaravanCommand::Send(a) => send(&a),
        CaravanCommand::Recv(a) => recv(&a),
    }
}

fn send(a: &SendArgs) -> Result<ExitCode, String> {
    let cfg = &a.c;
    let sum = caravan::send(cfg, crate::signals::stopped).map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", serde_json::to_string(&sum).map_err(|e| e.to_string())?);
    } else {
        print!("{}", sum.text(cfg));
    }
    Ok(ExitCode::SUCCESS)
}

fn recv(a: &RecvArgs) -> Result<ExitCode, String> {
    let cfg = &a.c;
    let sum = caravan::recv(cfg, crate::signals::stopped).map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", serde_json::to_string(&sum).map_err(|e| e.to_string())?);
    } else {
        print!("{}", sum.text());
    }
    Ok(if sum.failed(cfg) { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
