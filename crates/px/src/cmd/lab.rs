//! `px lab …`: the namespace lab (root). The demo and its hands-on variant
//! live in `lab_demo`, the path-MTU comparison in `lab_pmtud`.

use std::process::ExitCode;

use clap::Subcommand;

use crate::cmd::{lab_demo, lab_pmtud, lab_rr};

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Legacy host — gateway — b-network host in namespaces: bulk TCP both
    /// ways through px gateway and through a plain Linux router, side by side
    /// (needs root; under two minutes).
    Demo(lab_demo::DemoArgs),
    /// Leave the demo topology up (gateway running) for hands-on use.
    Up(lab_demo::UpArgs),
    /// Remove what `px lab up` left.
    Down(lab_demo::DownArgs),
    /// Compare path MTU discovery tools on lab paths (needs root).
    Pmtud(lab_pmtud::LabPmtudArgs),
    /// Request/response latency (64 B requests; 1 KB, 16 KB, 64 KB answers)
    /// through px gateway and through a plain Linux router (needs root).
    Rr(lab_rr::RrArgs),
}

pub fn run(c: LabCommand) -> Result<ExitCode, String> {
    match c {
        LabCommand::Demo(a) => lab_demo::demo(a),
        LabCommand::Up(a) => lab_demo::up(a),
        LabCommand::Down(a) => lab_demo::down(a),
        LabCommand::Pmtud(a) => lab_pmtud::pmtud(a),
        LabCommand::Rr(a) => lab_rr::rr(a),
    }
}
