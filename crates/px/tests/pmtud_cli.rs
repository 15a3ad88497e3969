//! `px probe` and `px fpmtud` run the built binary through their own short
//! parser (main.rs): help, version and argument errors must be what the
//! full parser gives. Only arguments clap refuses or answers itself are
//! used, so nothing here sends a packet.

use std::process::{Command, Output};

fn px(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_px")).args(args).output().expect("px runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn long_help_is_the_full_parsers() {
    for name in ["probe", "fpmtud"] {
        let short = px(&[name, "--help"]);
        // `px help NAME` goes through the full command tree.
        let full = px(&["help", name]);
        assert!(short.status.success() && full.status.success(), "{name}: {short:?} {full:?}");
        assert_eq!(text(&short.stdout), text(&full.stdout), "{name}");
        assert!(text(&short.stdout).contains(&format!("Usage: px {name} ")), "{}", text(&short.stdout));
    }
}

#[test]
fn short_help_and_version() {
    let h = px(&["probe", "-h"]);
    assert!(h.status.success());
    let h = text(&h.stdout);
    assert!(h.contains("Usage: px probe [OPTIONS] <HOST>") && h.contains("Exit status: 0 path MTU found"), "{h}");
    assert!(!h.contains("Possible values:"), "-h is the summary: {h}");
    for name in ["probe", "fpmtud"] {
        let v = px(&[name, "--version"]);
        assert!(v.status.success());
        assert_eq!(text(&v.stdout), format!("px-{name} {}\n", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn argument_errors_exit_2_with_the_subcommands_usage() {
    // clap prints the usage line for every error but a refused value.
    let cases: &[(&[&str], &str)] = &[
        (&["probe"], "the following required arguments were not provided"),
        (&["probe", "198.51.100.34", "--jsn"], "a similar argument exists: '--json'"),
        (&["probe", "198.51.100.34", "--method", "tracepath"], "invalid value 'tracepath' for '--method <METHOD>'"),
        (&["probe", "198.51.100.34", "--max-size", "67"], "67 is not in 68..=65535"),
        (&["probe", "198.51.100.34", "--timeout", "5 parsecs"], "unknown unit `parsecs`"),
        (&["probe", "198.51.100.34", "-4", "-6"], "cannot be used with"),
        (&["fpmtud", "--rate", "0"], "0 is not in 1..=4294967295"),
        (&["fpmtud", "--bind", "not-an-address"], "invalid value 'not-an-address'"),
    ];
    for (args, says) in cases {
        let out = px(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(err.starts_with("error: ") && err.contains(says), "{args:?}: {err}");
        let refused_value = err.starts_with("error: invalid value") || err.contains(" is not in ");
        assert_eq!(err.contains(&format!("Usage: px {} ", args[0])), !refused_value, "{args:?}: {err}");
        assert!(err.ends_with("For more information, try '--help'.\n"), "{args:?}: {err}");
    }
}

#[test]
fn the_top_level_help_still_lists_both() {
    let out = px(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    let at = |s: &str| help.find(s).unwrap_or_else(|| panic!("{s} missing: {help}"));
    // In their old place: after gateway, before lab.
    assert!(at("  gateway ") < at("  probe ") && at("  probe ") < at("  fpmtud ") && at("  fpmtud ") < at("  lab "));
}

/// Issue 29 item 7: nonsense is refused before anything is sent, naming
/// the argument; with `--json` an error is a JSON object on stdout.
#[test]
fn probe_refuses_nonsense_and_says_so_in_json_too() {
    let out = px(&["probe", "198.51.100.1", "--port", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("--port"), "{}", text(&out.stderr));
    let out = px(&["probe", "198.51.100.1", "--timeout", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("must be more than 0"), "{}", text(&out.stderr));
    let out = px(&["probe", "-6", "198.51.100.1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("`-6` was given, but 198.51.100.1 is an IPv4 address"), "{}", text(&out.stderr));
    let out = px(&["probe", "-4", "2001:db8::1", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(v["target"], "2001:db8::1");
    assert!(v["error"].as_str().unwrap().contains("`-4` was given"), "{v}");
}
