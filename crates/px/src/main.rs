//! `px`: the PacketExpress command line.
//!
//! One binary with a subcommand per part of the system. Each subcommand lives
//! in its own module under `cmd/` with an `Args` struct (clap derive) and a
//! `run(args) -> Result<ExitCode, String>`; this file only dispatches.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod cmd;
mod signals;

/// PacketExpress: let a network run 9000-byte packets inside while its
/// neighbours keep 1500.
#[derive(Debug, Parser)]
#[command(name = "px", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks of the engine (merge, split) on synthetic traces.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// PX-caravan example sender and receiver (sequence-checked UDP, plain or in caravans).
    #[command(subcommand)]
    Caravan(cmd::caravan::CaravanCommand),
    /// Run the MTU-translating gateway between an inner and an outer port.
    Gateway(cmd::gateway::GatewayArgs),
    /// Path MTU toward a `px fpmtud` responder (F-PMTUD, DPLPMTUD or ICMP), unprivileged.
    Probe(cmd::probe::ProbeArgs),
    /// F-PMTUD responder daemon: answers probes with the fragment sizes it received.
    Fpmtud(cmd::fpmtud::FpmtudArgs),
    /// Namespace lab experiments (root).
    #[command(subcommand)]
    Lab(cmd::lab::LabCommand),
    /// Deterministic simulations: the MTU-drop test, PMTUD at scale, MTU benefit.
    #[command(subcommand)]
    Sim(cmd::sim::SimCommand),
    /// Man pages and shell completions from this CLI (for packaging).
    #[command(subcommand, hide = true)]
    Generate(cmd::generate::GenerateCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(c) => cmd::bench::run(c),
        Command::Caravan(c) => cmd::caravan::run(c),
        Command::Gateway(a) => cmd::gateway::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Fpmtud(a) => cmd::fpmtud::run(a),
        Command::Lab(c) => cmd::lab::run(c),
        Command::Sim(c) => cmd::sim::run(c),
        Command::Generate(c) => cmd::generate::run(c, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("px: error: {e}");
            ExitCode::from(2)
        }
    }
}
