//! `px generate` (hidden): the files a package ships that come from the CLI
//! definition itself, so they never drift from it: man pages (`clap_mangen`:
//! `px.1` and one page per subcommand, `px-gateway.1`, `px-bench-engine.1`,
//! …, each with EXIT STATUS, SIGNALS, FILES and SEE ALSO; and
//! `px-gateway.toml.5` from the configuration's keys) and shell completions
//! (`clap_complete`: bash, zsh, fish; hidden commands left out).
//!
//! `scripts/package-deb` runs it on the freshly built binary; the file names
//! are the ones the Debian package installs (see `[package.metadata.deb]`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Command, Subcommand};
use clap_complete::Shell;

#[derive(Debug, Subcommand)]
pub enum GenerateCommand {
    /// Man pages (section 1) for px and every subcommand into DIR, and
    /// px-gateway.toml(5) into DIR's sibling `man5` when DIR is a `man1`
    /// (into DIR otherwise).
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
            let mut cli = cli.disable_help_subcommand(true);
            cli.build();
            pages(&cli, &dir).map_err(|e| format!("man pages into {}: {e}", dir.display()))?;
            let conf = px_runtime::gateway::settings::man_page(env!("CARGO_PKG_VERSION"));
            let man5 = match dir.file_name() {
                Some(n) if n == "man1" => dir.with_file_name("man5"),
                _ => dir.clone(),
            };
            create(&man5)?;
            std::fs::write(man5.join("px-gateway.toml.5"), conf).map_err(|e| format!("{}: {e}", man5.display()))?;
        }
        GenerateCommand::Completions { dir } => {
            create(&dir)?;
            // Without the hidden commands (this one): nothing to offer a user.
            let visible = cli.get_subcommands().filter(|s| !s.is_hide_set()).cloned();
            let mut cli =
                Command::new("px").version(env!("CARGO_PKG_VERSION")).propagate_version(true).subcommands(visible);
            for shell in SHELLS {
                clap_complete::generate_to(shell, &mut cli, "px", &dir)
                    .map_err(|e| format!("{shell} completions into {}: {e}", dir.display()))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One page per visible command, each with the sections clap has no
/// place for.
fn pages(cmd: &Command, dir: &Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages(sub, dir)?;
    }
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    man.render(&mut page)?;
    let name = man.get_filename().trim_end_matches(".1").to_string();
    page.extend_from_slice(sections(&name).as_bytes());
    std::fs::write(dir.join(man.get_filename()), page)
}

/// EXIT STATUS, SIGNALS, FILES and SEE ALSO of the page of `name`
/// (`px-gateway`), in roff.
fn sections(name: &str) -> String {
    let gateway = name == "px-gateway";
    let mut s = String::from(if gateway {
        ".SH \"EXIT STATUS\"\n.TP\n0\nstopped cleanly (what was held sent, the ports restored)\n.TP\n1\n\
         a start that may succeed later by itself: a port not there yet (a NIC late at boot), one another gateway \
         serves, an address in use (the packaged unit starts it again)\n.TP\n2\nbad input, or a configuration \
         or host that must change first (not retried by the unit)\n.SH SIGNALS\n"
    } else {
        ".SH \"EXIT STATUS\"\n.TP\n0\ndone (a path MTU found, a gateway stopped cleanly)\n.TP\n1\nit ran, and what it checks failed\n\
         .TP\n2\nbad input, or an error that stopped it (the reason on stderr; with \\-\\-json also {\"error\": ...} on stdout)\n\
         .TP\n3\nnothing answered, or nothing is running (no responder, no gateway, no lab up, no DPDK)\n.SH SIGNALS\n"
    });
    s.push_str(if gateway {
        ".TP\nSIGINT, SIGTERM\nsend what is held, restore the ports, exit 0\n.TP\nSIGHUP\nread the configuration file again; apply what can change live, refuse the rest in the log\n"
    } else {
        ".TP\nSIGINT, SIGTERM\nstop; what was started is stopped and removed (namespaces, processes), counters so far are printed\n"
    });
    s.push_str(".SH FILES\n");
    s.push_str(match name {
        "px-gateway" | "px-status" | "px" => {
            "/etc/px/\\fINAME\\fR.toml: the configuration of the px\\-gateway@\\fINAME\\fR service (px\\-gateway.toml(5)).\n.br\n\
             /run/px/gateway\\-net*.sock: the control socket px status asks; /run/px/*.lock: one gateway per port.\n.br\n\
             /usr/share/doc/px/examples/gateway.toml: every key with its default.\n"
        }
        _ => "None of its own; \\fBpx lab\\fR keeps its state under $TMPDIR.\n",
    });
    s.push_str(".SH \"SEE ALSO\"\n\\fBpx\\fR(1), \\fBpx\\-gateway\\fR(1), \\fBpx\\-gateway.toml\\fR(5), \\fBpx\\-status\\fR(1), \\fBpx\\-probe\\fR(1); /usr/share/doc/px/README.md\n");
    s
}

fn create(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}
