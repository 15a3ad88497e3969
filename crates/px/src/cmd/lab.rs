//! `px lab …`: the namespace lab (root). The demo and its hands-on variant
//! live in `lab_demo`, the path-MTU comparison in `lab_pmtud`, the paper's
//! end-host experiments in `lab_exp`, the QUIC stack in `lab_quic`.

use std::process::ExitCode;

use clap::Subcommand;

use crate::cmd::{lab_border, lab_demo, lab_exp, lab_pmtud, lab_quic, lab_rr, lab_rtt, lab_survey};

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Legacy host — gateway — b-network host in namespaces: bulk TCP both
    /// ways through px gateway and through a plain Linux router, side by side
    /// (needs root; about two minutes).
    Demo(lab_demo::DemoArgs),
    /// Leave the demo topology up (gateway running) for hands-on use.
    Up(lab_demo::UpArgs),
    /// Remove what `px lab up` left.
    Down(lab_demo::DownArgs),
    /// Compare path MTU discovery tools on lab paths (needs root).
    Pmtud(lab_pmtud::LabPmtudArgs),
    /// Paper Fig. 5c: 100 TCP flows into one b-network receiver confined to
    /// one core, via a router (1500) and via px gateway (9000), GRO off/on;
    /// UDP plain vs caravans (needs root; about 1.5 minutes).
    Receiver(lab_exp::ReceiverArgs),
    /// Paper §5.2/Fig. 1d: one TCP flow from the b-network to a legacy host
    /// over 10 ms each way and 0.01 % loss, via a router, via px gateway and
    /// with 9000 end to end (needs root; 3 × 60 s, `--seconds`).
    Wan(lab_exp::WanArgs),
    /// Paper Fig. 1b/1c: 1, 2, 4, 8 concurrent flows at MTU 1500 and 9000,
    /// receiver GRO off/on, receiver on one core (needs root; about 1.5 minutes).
    Gro(lab_exp::GroArgs),
    /// Paper Fig. 1a: a header-only middle box (router + nftables rules) on
    /// one core, bulk TCP at MTU 1500/3000/6000/9000 (needs root; under a minute).
    Middlebox(lab_exp::MiddleboxArgs),
    /// Paper Table 1: server CPU for N sessions of one connection at 9000
    /// vs six parallel connections at 1500 (axel), same file (needs root).
    Parallel(lab_exp::ParallelArgs),
    /// All of the above plus `demo` and `pmtud`, written to DIR/report.md
    /// with the SVG plots beside it (needs root; about 15 minutes).
    Report(lab_exp::ReportArgs),
    /// Request/response latency (64 B requests; 1 KB, 16 KB, 64 KB answers)
    /// through px gateway and through a plain Linux router (needs root).
    Rr(lab_rr::RrArgs),
    /// The lsquic DPLPMTUD blog with a real QUIC stack (quinn): 5
    /// connections, largest UDP payload 1252/1472/4096/8952 over MTU 9000,
    /// and quinn's PMTUD against an F-PMTUD start (needs root and a px
    /// built with `--features quic`).
    Quic(lab_quic::QuicArgs),
    /// `px survey` against a lab "Internet" of known behaviours (fragment
    /// filters, ICMP black holes, poor reassembly, loss): thousands of
    /// targets, classification checked against the truth (needs root).
    Survey(lab_survey::LabSurveyArgs),
    /// The 1500-vs-9000 RTT study (seed): RTT against message size, TCP
    /// and UDP, at MTU 1500, 9000 and across px gateway (needs root).
    Rtt(lab_rtt::RttArgs),
    /// A border of several gateways: the iMTU carried by BGP (BIRD 2 route
    /// server, a true, a lying and a legacy neighbour) and verified before
    /// use; two gateways behind ECMP with BFD, kill -9 of one during
    /// sha256-checked transfers both ways (needs root and bird2; about a
    /// minute).
    Border(lab_border::BorderArgs),
}

pub fn run(c: LabCommand) -> Result<ExitCode, String> {
    match c {
        LabCommand::Demo(a) => lab_demo::demo(a),
        LabCommand::Up(a) => lab_demo::up(a),
        LabCommand::Down(a) => lab_demo::down(a),
        LabCommand::Pmtud(a) => lab_pmtud::pmtud(a),
        LabCommand::Receiver(a) => lab_exp::receiver(a),
        LabCommand::Wan(a) => lab_exp::wan(a),
        LabCommand::Gro(a) => lab_exp::gro(a),
        LabCommand::Middlebox(a) => lab_exp::middlebox(a),
        LabCommand::Parallel(a) => lab_exp::parallel(a),
        LabCommand::Report(a) => lab_exp::report(a),
        LabCommand::Rr(a) => lab_rr::rr(a),
        LabCommand::Quic(a) => lab_quic::quic(a),
        LabCommand::Survey(a) => lab_survey::survey(a),
        LabCommand::Rtt(a) => lab_rtt::rtt(a),
        LabCommand::Border(a) => lab_border::border(a),
    }
}
