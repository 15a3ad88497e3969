//! `px status`: what a running gateway is doing, asked over its local
//! control socket (ports, MTUs, configuration generation, wire counters
//! with rates, the engine's totals, the largest flows, learned path MTUs,
//! the kernel fast path).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use px_runtime::gateway::control::{self, ControlError};

/// `px status` asks the gateway over its control socket (`control_socket`
/// in its configuration; by default
/// `/run/px/gateway-net<namespace>-<outer>-<inner>.sock`, found by itself when
/// one gateway runs in this network namespace). The socket is mode 0660:
/// run as root or as a member of the gateway's group (`px` for the
/// packaged service).
#[derive(Debug, Args)]
#[command(
    after_help = "The control socket is mode 0660: run as root or in the gateway's group (px for the packaged service).\n\
                  Exit status: 0 the gateway answered; 3 no gateway is running here (no control socket, or nothing \
                  answers on it); 2 any other error."
)]
pub struct StatusArgs {
    /// The gateway's control socket (default: the one gateway of this
    /// network namespace in /run/px).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the status as one JSON object (the same model as the text);
    /// on an error, an object with `error`.
    #[arg(long)]
    json: bool,
}

/// The exit status for "no gateway running here" (as LSB `status` uses 3).
const NOT_RUNNING: u8 = 3;

pub fn run(args: StatusArgs) -> Result<ExitCode, String> {
    let result = match &args.socket {
        Some(p) => Ok(p.clone()),
        None => control::find(),
    }
    .and_then(|p| control::query(&p));
    match result {
        Ok(s) if args.json => {
            println!("{}", serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?);
            Ok(ExitCode::SUCCESS)
        }
        Ok(s) => {
            print!("{}", s.render());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let not_running = match &e {
                ControlError::NotFound(_) => true,
                ControlError::Io { source, .. } => {
                    matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused)
                }
                _ => false,
            };
            if args.json {
                println!("{}", serde_json::json!({ "error": e.to_string() }));
            }
            eprintln!("px status: {e}");
            Ok(ExitCode::from(if not_running { NOT_RUNNING } else { 2 }))
        }
    }
}
