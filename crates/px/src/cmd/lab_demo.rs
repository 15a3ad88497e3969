//! `px lab demo|up|down`: the namespace lab in which 1500-byte traffic
//! becomes 9000-byte traffic and back, measured against a plain Linux router
//! on the same hosts, links and MTUs in the same run. The experiment is
//! [`px_lab::demo`]; this is its command line and its table.

use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use px_lab::demo::{self, DemoOptions};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Bulk TCP per direction and per middle box, e.g. 5s (1s..=60s; a
    /// bare number is seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", default_value = "5s", value_parser = px_units::secs_in(1, 60))]
    seconds: u64,
    /// Rounds, each running the gateway and then the router, so that both
    /// see the same drift of a shared machine; figures are the mean.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=20))]
    rounds: u64,
    /// Parallel TCP flows per direction.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=128))]
    flows: u64,
    /// Gateway worker threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Extra arguments for `px gateway` (repeatable), e.g. `--gateway-arg=--rx-ring`.
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    gateway_args: Vec<String>,
    /// The gateway's kernel fast path, as `px gateway --fast-path`: on,
    /// established bulk flows move to a TC program on its ports (the flag
    /// alone is `on`; old name --offload).
    #[arg(long, alias = "offload", value_name = "off|on", value_parser = ["off", "on"], num_args = 0..=1, default_missing_value = "on", default_value = "off")]
    fast_path: String,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Do not start `px gateway` in the gateway namespace; print the
    /// command that starts it by hand (with the configuration file written).
    #[arg(long)]
    no_gateway: bool,
    /// Print one JSON object (namespaces, configuration file, the
    /// gateway's PID and log, the responders) instead of the text.
    #[arg(long)]
    json: bool,
    /// The lab's name (default: the user who runs px, so that two users'
    /// labs are two labs): `px lab down --name` takes the same.
    #[arg(long, value_parser = lab_name)]
    name: Option<String>,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// The lab to take down (default: the user who runs px); other labs
    /// stay up.
    #[arg(long, value_parser = lab_name)]
    name: Option<String>,
}

fn lab_name(s: &str) -> Result<String, String> {
    demo::check_name(s).map(|()| s.to_string())
}

fn px_exe() -> Result<std::path::PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))
}

pub fn demo(a: DemoArgs) -> Result<ExitCode, String> {
    demo::check_prerequisites("px lab demo")?;
    let t0 = Instant::now();
    let opts = DemoOptions {
        exe: px_exe()?,
        seconds: a.seconds,
        rounds: a.rounds,
        flows: a.flows,
        workers: a.workers,
        gateway_args: a.gateway_args,
        fast_path: a.fast_path == "on",
    };
    let json = a.json;
    let res = demo::run(&opts, &|s| {
        if !json {
            eprintln!("{s}");
        }
    })?;
    if a.json {
        let mut v = serde_json::to_value(&res).map_err(|e| e.to_string())?;
        v["gateway_flushes"] = px_lab::exp::flushes_json(&res.gateway_flushes);
        println!("{v}");
    } else {
        print!("{}", res.table());
        eprintln!("px lab demo: done in {:.0} s; namespaces removed.", t0.elapsed().as_secs_f64());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn up(a: UpArgs) -> Result<ExitCode, String> {
    let r = demo::up(&px_exe()?, a.no_gateway, a.name.as_deref())?;
    if a.json {
        println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
    } else {
        print!("{}", r.text());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn down(a: DownArgs) -> Result<ExitCode, String> {
    let name = a.name.unwrap_or_else(demo::default_name);
    if !demo::state_file(&name).exists() {
        // Nothing to take down: "not running", not a failure.
        let others = demo::labs_up();
        let hint = if others.is_empty() {
            String::new()
        } else {
            format!("; labs up: {} (px lab down --name NAME)", others.join(", "))
        };
        eprintln!("px lab down: no lab is up named {name} ({} not found){hint}", demo::state_file(&name).display());
        return Ok(ExitCode::from(3));
    }
    for n in demo::down(&name)? {
        println!("removed {n}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: super::DemoArgs,
    }

    /// Issue 38 item 5: `--fast-path` as `px gateway` takes it, and its
    /// old name `--offload`.
    #[test]
    fn fast_path_alone_is_on_as_in_px_gateway() {
        assert_eq!(T::parse_from(["t", "--fast-path"]).a.fast_path, "on");
        assert_eq!(T::parse_from(["t", "--offload"]).a.fast_path, "on");
        assert_eq!(T::parse_from(["t", "--offload", "off", "--json"]).a.fast_path, "off");
        assert_eq!(T::parse_from(["t"]).a.fast_path, "off");
        assert!(T::try_parse_from(["t", "--fast-path", "yes"]).is_err());
    }
}
