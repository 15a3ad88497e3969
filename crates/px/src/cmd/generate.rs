//! `px generate` (hidden): the files a package ships that come from the CLI
//! definition itself, so they never drift from it: man pages (`clap_mangen`:
//! `px.1` and one page per subcommand, `px-gateway.1`, `px-bench-merge.1`, …)
//! and shell completions (`clap_complete`: bash, zsh, fish).
//!
//! `scripts/package-deb` runs it on the freshly built binary; the file names
//! are the ones the Debian package installs (see `[package.metadata.deb]`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Command, Subcommand};
use clap_complete::Shell;

#[derive(Debug, Subcommand)]
pub enum GenerateCommand {
    /// Man pages (section 1) for px and every subcommand into DIR.
    Man {
        /// Output directory (created if missing).
        dir: PathBuf,
    },
    /// Shell completions into DIR: `px.bash`, `_px` (zsh), `px.fish`.
    Completions {
        /// Output directory (created if missing).
        dir: PathBuf,
    },
}

/// The shells completions are generated for.
const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// `cli` is the whole `px` command tree (`Cli::command()`).
pub fn run(c: GenerateCommand, cli: Command) -> Result<ExitCode, String> {
    match c {
        GenerateCommand::Man { dir } => {
            create(&dir)?;
            clap_mangen::generate_to(cli, &dir).map_err(|e| format!("man pages into {}: {e}", dir.display()))?;
        }
        GenerateCommand::Completions { dir } => {
            create(&dir)?;
            let mut cli = cli;
            for shell in SHELLS {
                clap_complete::generate_to(shell, &mut cli, "px", &dir)
                    .map_err(|e| format!("{shell} completions into {}: {e}", dir.display()))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn create(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}
