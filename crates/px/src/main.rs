//! `px`: the PacketExpress command line.
//!
//! One binary with a subcommand per part of the system. Each subcommand lives
//! in its own module under `cmd/` with an `Args` struct (clap derive) and a
//! `run(args) -> Result<ExitCode, String>`; this file only dispatches.
//!
//! `px probe` and `px fpmtud` take a short way in: [`PmtudCli`], a parser
//! with only those two subcommands. Building the whole command tree (every
//! subcommand's arguments, then dropping them) cost `px probe` about a third
//! of a millisecond of CPU before its first probe, and `px lab pmtud` times
//! each tool from exec to exit. Both parsers take their subcommands from the
//! same [`PmtudCommand`] and the same top-level settings, so arguments, help,
//! version and errors are the same (the tests below compare them).

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

/// `px` with only the path MTU subcommands (see the module notes). Its
/// `name`, `version` and `propagate_version` must stay those of [`Cli`]:
/// a subcommand's usage line, `--version` text and version flag come from
/// its parent. `about` only shows in the parent's own help, which this
/// parser never prints for `px probe …` / `px fpmtud …`.
#[derive(Debug, Parser)]
#[command(name = "px", version, propagate_version = true)]
struct PmtudCli {
    #[command(subcommand)]
    command: PmtudCommand,
}

/// The subcommands both parsers have.
#[derive(Debug, Subcommand)]
enum PmtudCommand {
    /// Path MTU toward a `px fpmtud` responder (F-PMTUD, DPLPMTUD or ICMP), unprivileged.
    Probe(cmd::probe::ProbeArgs),
    /// F-PMTUD responder daemon: answers probes with the fragment sizes it received.
    Fpmtud(cmd::fpmtud::FpmtudArgs),
}

impl PmtudCommand {
    /// The first arguments that [`PmtudCli`] parses exactly as [`Cli`] does.
    const NAMES: [&'static str; 2] = ["probe", "fpmtud"];

    fn run(self) -> Result<ExitCode, String> {
        match self {
            PmtudCommand::Probe(a) => cmd::probe::run(a),
            PmtudCommand::Fpmtud(a) => cmd::fpmtud::run(a),
        }
    }
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
    /// Show a running gateway: ports, counters and rates, largest flows, path MTUs.
    Status(cmd::status::StatusArgs),
    #[command(flatten)]
    Pmtud(PmtudCommand),
    /// Namespace lab experiments (root).
    #[command(subcommand)]
    Lab(cmd::lab::LabCommand),
    /// Deterministic simulations: the MTU-drop test, PMTUD at scale, MTU benefit.
    #[command(subcommand)]
    Sim(cmd::sim::SimCommand),
    /// Fragment-delivery survey (paper §5.3): do servers answer IP-fragmented
    /// requests, where do fragments stop, does ICMP PMTUD work (root; sends
    /// real packets to the targets you give it).
    ///
    /// Per target (IPv4), it sends: an HTTP request as one packet and the same
    /// request as IP fragments (its own raw TCP client: while it runs, an
    /// nftables table in this network namespace drops the kernel's RSTs for
    /// the survey's source ports); where fragments get no answer, TTL-limited
    /// fragments and whole packets, to find the hop where they stop; once per
    /// address, one ICMP "fragmentation needed" for a full-sized answer
    /// segment (scamper tbit's PMTUD test). Every connection ends with an RST.
    /// Global and per-destination packet rates, a concurrency bound, timeouts
    /// with retries. Needs root (raw sockets, nftables). Refuses to run in the
    /// host's network namespace unless --allow-host-namespace is given.
    ///
    /// TARGETS has one target per line: `ADDRESS [PORT] [HOST]` (port 80 by
    /// default; HOST goes into the `Host` header); `#` starts a comment.
    /// OUTPUT gets one JSON line per finished target; run the same command
    /// again to resume (targets already in OUTPUT are skipped). Ctrl-C stops
    /// after writing only whole lines. `px survey report OUTPUT` prints the
    /// paper's table.
    #[command(verbatim_doc_comment)]
    Survey(cmd::survey::SurveyArgs),
    /// Man pages and shell completions from this CLI (for packaging).
    #[command(subcommand, hide = true)]
    Generate(cmd::generate::GenerateCommand),
}

fn main() -> ExitCode {
    // Only the subcommand's name itself: anything before it (`px -h probe`)
    // is the full parser's to read.
    let pmtud = std::env::args_os().nth(1).is_some_and(|a| PmtudCommand::NAMES.iter().any(|n| a == *n));
    let result = if pmtud { PmtudCli::parse().command.run() } else { dispatch(Cli::parse().command) };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("px: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn dispatch(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Bench(c) => cmd::bench::run(c),
        Command::Caravan(c) => cmd::caravan::run(c),
        Command::Gateway(a) => cmd::gateway::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Pmtud(c) => c.run(),
        Command::Lab(c) => cmd::lab::run(c),
        Command::Sim(c) => cmd::sim::run(c),
        Command::Survey(a) => cmd::survey::run_cmd(a),
        Command::Generate(c) => cmd::generate::run(c, Cli::command()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `px ARGS…` makes of the arguments through the full parser: the
    /// path MTU subcommand it parsed, or the error (help and version
    /// included) as kind, exit code and the text clap prints.
    fn full(argv: &[&str]) -> String {
        match Cli::try_parse_from(argv) {
            Ok(Cli { command: Command::Pmtud(c) }) => format!("{c:?}"),
            Ok(other) => format!("not a path MTU subcommand: {other:?}"),
            Err(e) => format!("{:?} {}\n{}", e.kind(), e.exit_code(), e.render()),
        }
    }

    /// The same through [`PmtudCli`].
    fn short(argv: &[&str]) -> String {
        match PmtudCli::try_parse_from(argv) {
            Ok(p) => format!("{:?}", p.command),
            Err(e) => format!("{:?} {}\n{}", e.kind(), e.exit_code(), e.render()),
        }
    }

    const PROBE_CASES: &[&[&str]] = &[
        &["198.51.100.34"],
        &["198.51.100.34", "--json", "--timeout", "20s", "--method", "auto"],
        &["host.example", "--port", "9", "--method", "icmp", "--max-size", "1400", "-4"],
        &["-6", "2001:db8::1", "--search", "bisection", "--probe-timer", "1s", "--initial-rtt", "5ms", "--legacy"],
        &["--", "-x"],
        &[],
        &["--help"],
        &["-h"],
        &["--version"],
        &["-V"],
        &["198.51.100.34", "--jsn"],
        &["198.51.100.34", "extra"],
        &["198.51.100.34", "--method", "tracepath"],
        &["198.51.100.34", "--method"],
        &["198.51.100.34", "--max-size", "67"],
        &["198.51.100.34", "--max-size", "70000"],
        &["198.51.100.34", "--port", "-1"],
        &["198.51.100.34", "--timeout", "5 parsecs"],
        &["198.51.100.34", "-4", "-6"],
        &["198.51.100.34", "--json", "--json"],
        &["198.51.100.34", "--port", "1", "--port", "2"],
        &["198.51.100.34", "--json=yes"],
        &["help"],
    ];

    const FPMTUD_CASES: &[&[&str]] = &[
        &[],
        &["--port", "10000", "--bind", "198.51.100.34", "--bind", "2001:db8::1", "--rate", "5", "--burst", "9"],
        &["--packet-socket", "--json-stats"],
        &["--legacy-late-bind"],
        &["--help"],
        &["-h"],
        &["-V"],
        &["--rate", "0"],
        &["--burst", "x"],
        &["--bind", "not-an-address"],
        &["--bogus"],
        &["extra"],
    ];

    #[test]
    fn both_parsers_accept_reject_and_print_the_same() {
        let mut compared = 0;
        for (name, cases) in [("probe", PROBE_CASES), ("fpmtud", FPMTUD_CASES)] {
            for argv0 in ["px", "/usr/bin/px", "./px-before"] {
                for case in cases {
                    let argv: Vec<&str> = [argv0, name].iter().chain(case.iter()).copied().collect();
                    assert_eq!(short(&argv), full(&argv), "{argv:?}");
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 3 * (PROBE_CASES.len() + FPMTUD_CASES.len()));
    }

    #[test]
    fn the_cases_reach_what_they_are_meant_to() {
        // Guards the comparison above against comparing only errors.
        assert!(full(&["px", "probe", "198.51.100.34"]).starts_with("Probe(ProbeArgs"));
        assert!(full(&["px", "fpmtud"]).starts_with("Fpmtud(FpmtudArgs"));
        let help = full(&["px", "probe", "--help"]);
        assert!(help.contains("Usage: px probe [OPTIONS] <HOST>") && help.contains("Exit status:"), "{help}");
        assert!(full(&["px", "probe", "-V"]).contains("px-probe "), "{}", full(&["px", "probe", "-V"]));
        let bin = full(&["./px-before", "fpmtud", "--bogus"]);
        assert!(bin.starts_with("UnknownArgument 2") && bin.contains("Usage: px-before fpmtud"), "{bin}");
    }

    #[test]
    fn only_the_subcommand_name_takes_the_short_way() {
        assert_eq!(PmtudCommand::NAMES.len(), PmtudCli::command().get_subcommands().count());
        for n in PmtudCommand::NAMES {
            assert!(PmtudCli::command().find_subcommand(n).is_some(), "{n}");
            assert!(Cli::command().find_subcommand(n).is_some(), "{n}");
        }
        Cli::command().debug_assert();
        PmtudCli::command().debug_assert();
    }
}
