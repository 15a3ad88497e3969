//! `px lab report --out DIR`: every experiment of this module, `px lab
//! demo` and `px lab pmtud`, one after the other, written to
//! `DIR/report.md` (each table with the paper's figure beside it, the
//! machine, kernel, offloads and congestion control) with each plot as
//! `DIR/<name>.svg` beside it and all results in `DIR/report.json`.
//!
//! The experiments of this module run in this process (their namespaces
//! are removed by their own guards and by the signal cleanup); `px lab
//! demo` and `px lab pmtud` run as child processes of the same binary in
//! this process group, so Ctrl-C reaches them too and each removes its
//! own namespaces. The report is rewritten after every part, so an
//! interrupted run keeps what was measured.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::gro::{self, GroOptions};
use crate::middlebox::{self, MiddleboxOptions};
use crate::parallel::{self, ParallelOptions};
use crate::receiver::{self, ReceiverOptions};
use crate::wan::{self, WanOptions};
use px_netns::Machine;

use crate::exp::Report;

/// The parts of a report, in the order they run.
pub const PARTS: [&str; 7] = ["receiver", "wan", "gro", "middlebox", "parallel", "demo", "pmtud"];

/// What to run.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// The `px` binary.
    pub exe: PathBuf,
    /// Where report.md, report.json and the plots go.
    pub out: PathBuf,
    /// Parts to skip (names from [`PARTS`]).
    pub skip: Vec<String>,
    /// Every part as short as it can be (a smoke run, not a measurement).
    pub quick: bool,
    /// Congestion control of the TCP experiments.
    pub cc: String,
    /// Seconds per run of `wan` (the paper: 60).
    pub wan_seconds: u64,
}

/// One finished part.
struct Part {
    name: &'static str,
    table: String,
    svg: Option<String>,
    json: serde_json::Value,
    seconds: f64,
}

fn run_part(name: &'static str, o: &ReportOptions, say: &dyn Fn(&str)) -> Result<Part, String> {
    let t0 = Instant::now();
    let q = o.quick;
    let res: Box<dyn Report> = match name {
        "receiver" => {
            let mut r = ReceiverOptions { cc: o.cc.clone(), ..ReceiverOptions::new(o.exe.clone()) };
            if q {
                (r.seconds, r.flows, r.udp_seconds) = (1, 10, 1);
            }
            Box::new(receiver::run(&r, say)?)
        }
        "wan" => {
            let w = WanOptions {
                cc: o.cc.clone(),
                seconds: if q { 2 } else { o.wan_seconds },
                ..WanOptions::new(o.exe.clone())
            };
            Box::new(wan::run(&w, say)?)
        }
        "gro" => {
            let mut g = GroOptions { cc: o.cc.clone(), ..GroOptions::default() };
            if q {
                (g.seconds, g.flows) = (1, vec![1, 4]);
            }
            Box::new(gro::run(&g, say)?)
        }
        "middlebox" => {
            let mut m = MiddleboxOptions { cc: o.cc.clone(), ..MiddleboxOptions::default() };
            if q {
                (m.seconds, m.mtus) = (1, vec![1500, 9000]);
            }
            Box::new(middlebox::run(&m, say)?)
        }
        "parallel" => {
            let mut p = ParallelOptions { cc: o.cc.clone(), ..ParallelOptions::default() };
            if q {
                (p.sessions, p.file_mb) = (vec![1, 2], 16);
            }
            Box::new(parallel::run(&p, say)?)
        }
        "demo" => {
            let args: &[&str] = if q { &["lab", "demo", "--seconds", "1", "--rounds", "1"] } else { &["lab", "demo"] };
            return child_part(name, &o.exe, args, t0, say);
        }
        "pmtud" => return child_part(name, &o.exe, &["lab", "pmtud"], t0, say),
        other => return Err(format!("unknown report part `{other}`")),
    };
    Ok(Part { name, table: res.table(), svg: Some(res.svg()), json: res.json(), seconds: t0.elapsed().as_secs_f64() })
}

/// `px ARGS` as a child (same process group: Ctrl-C reaches it, and it
/// removes its own namespaces): its table as it prints it, no plot.
fn child_part(name: &'static str, exe: &Path, args: &[&str], t0: Instant, say: &dyn Fn(&str)) -> Result<Part, String> {
    say(&format!("px lab report: px {}…", args.join(" ")));
    let out = Command::new(exe).args(args).output().map_err(|e| format!("px {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!("px {} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok(Part { name, table, svg: None, json: serde_json::Value::Null, seconds: t0.elapsed().as_secs_f64() })
}

fn write_report(
    o: &ReportOptions,
    machine: &Machine,
    parts: &[Part],
    failed: &[(String, String)],
) -> Result<(), String> {
    let mut md = String::new();
    let _ = writeln!(md, "# PacketExpress lab report: the paper's end-host results, reproduced\n");
    let _ = writeln!(md, "- {}", machine.line());
    let _ = writeln!(md, "- congestion control of the TCP experiments: {} (set per socket)", o.cc);
    let _ = writeln!(
        md,
        "- offloads: stated with every table; LRO does not exist on veth; this kernel has no netem (delay and loss come \
         from px-lab's own element)"
    );
    let _ = writeln!(
        md,
        "- {}\n",
        if o.quick {
            "**quick run: every part at its shortest — a smoke run, not a measurement**"
        } else {
            "default lengths"
        }
    );
    for p in parts {
        let _ = writeln!(md, "## {} ({:.0} s)\n\n```text\n{}```\n", p.name, p.seconds, p.table);
        if p.svg.is_some() {
            let _ = writeln!(md, "![{}]({}.svg)\n", p.name, p.name);
        }
    }
    for (name, err) in failed {
        let _ = writeln!(md, "## {name}: FAILED\n\n```text\n{err}\n```\n");
    }
    let md_path = o.out.join("report.md");
    std::fs::write(&md_path, md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    for p in parts {
        if let Some(svg) = &p.svg {
            let f = o.out.join(format!("{}.svg", p.name));
            std::fs::write(&f, svg).map_err(|e| format!("{}: {e}", f.display()))?;
        }
    }
    let json: serde_json::Map<String, serde_json::Value> =
        parts.iter().map(|p| (p.name.to_string(), p.json.clone())).collect();
    let j = o.out.join("report.json");
    std::fs::write(&j, serde_json::Value::Object(json).to_string()).map_err(|e| format!("{}: {e}", j.display()))
}

/// The outcome: the report's path and the parts that failed.
#[derive(Debug)]
pub struct ReportOutcome {
    /// `DIR/report.md`.
    pub path: PathBuf,
    /// Parts that ran.
    pub ran: Vec<&'static str>,
    /// Parts that failed, with their error.
    pub failed: Vec<(String, String)>,
}

/// Runs the parts not skipped, rewriting the report after each.
pub fn run(o: &ReportOptions, say: &dyn Fn(&str)) -> Result<ReportOutcome, crate::RunError> {
    px_netns::install_signal_cleanup().map_err(|e| e.to_string())?;
    if let Some(bad) = o.skip.iter().find(|s| !PARTS.contains(&s.as_str())) {
        return Err(format!("--skip {bad}: the parts are {}", PARTS.join(", ")).into());
    }
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let machine = Machine::current();
    let (mut parts, mut failed) = (Vec::new(), Vec::new());
    for name in PARTS.into_iter().filter(|n| !o.skip.iter().any(|s| s == n)) {
        if px_netns::interrupted() {
            break;
        }
        say(&format!("px lab report: {name}…"));
        match run_part(name, o, say) {
            Ok(p) => parts.push(p),
            Err(e) => failed.push((name.to_string(), e)),
        }
        write_report(o, &machine, &parts, &failed)?;
    }
    write_report(o, &machine, &parts, &failed)?;
    Ok(ReportOutcome { path: o.out.join("report.md"), ran: parts.iter().map(|p| p.name).collect(), failed })
}
