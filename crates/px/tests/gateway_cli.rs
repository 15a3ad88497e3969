//! `px gateway` without ports: `--print-config` validates a file as the
//! gateway would at start, `--check-config` also that its interfaces exist
//! here (no root, no interface touched).

use std::process::{Command, Output};

fn px(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_px")).args(args).output().expect("px runs")
}

/// A config file in the temp dir, removed on drop.
struct TempToml(std::path::PathBuf);

impl TempToml {
    fn new(name: &str, text: &str) -> TempToml {
        let p = std::env::temp_dir().join(format!("px-check-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        TempToml(p)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempToml {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn check_config_prints_the_effective_configuration() {
    let f = TempToml::new("ok", "inner = \"in0\"\nouter = \"out0\"\n[engine]\nmerge_timeout_us = 300\n");
    // Flags override the file, as when running.
    let out = px(&["gateway", "--config", f.path(), "--print-config", "--workers", "3"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("inner = \"in0\"\n") && stdout.contains("workers = 3\n"), "{stdout}");
    assert!(stdout.contains("merge_timeout_us = 300\n"), "{stdout}");
    // Defaults are printed too: what runs is what is shown.
    assert!(stdout.contains("max_flows = 65536\n") && stdout.contains("log_interval_s = 10\n"), "{stdout}");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/gateway.toml");
    assert!(px(&["gateway", "--config", example, "--print-config"]).status.success());
    // The capture's snap length as a flag, checked like the key.
    let out = px(&["gateway", "--config", f.path(), "--print-config", "--capture-snaplen", "128"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("capture_snaplen = 128\n"), "{out:?}");
    let out = px(&["gateway", "--check-config", f.path(), "--capture-snaplen", "10"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("`--capture-snaplen` = 10"), "{out:?}");
}

/// Issue 36 item 3: the kernel fast path's key is `fast_path`; a file
/// with its old name `offload` still runs as before, with a warning that
/// names the line, and `--set offload=on` too.
#[test]
fn the_fast_paths_old_key_is_read_with_a_warning() {
    let f = TempToml::new("old-key", "inner = \"in0\"\nouter = \"out0\"\noffload = \"on\"\n");
    let out = px(&["gateway", "--config", f.path(), "--print-config"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("fast_path = \"on\"\n") && !stdout.contains("offload ="), "{stdout}");
    let line = format!("{}:3: `offload` is the old name of `fast_path`", f.path());
    assert!(stderr.contains(&line), "{stderr}");
    let out = px(&["gateway", "--print-config", "--inner", "a", "--outer", "b", "--set", "offload=on"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("fast_path = \"on\"\n"), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("`offload` is the old name of `fast_path`"), "{out:?}");
    let new = TempToml::new("new-key", "inner = \"in0\"\nouter = \"out0\"\nfast_path = \"on\"\n");
    let out = px(&["gateway", "--config", new.path(), "--print-config"]);
    assert!(out.status.success() && !String::from_utf8_lossy(&out.stderr).contains("old name"), "{out:?}");
}

#[test]
fn check_config_names_the_field_and_range_and_exits_2() {
    let cases = [
        ("range", "inner = \"a\"\nouter = \"b\"\nworkers = 0\n", &["`workers`", "1..=64"][..]),
        (
            "engine",
            "inner = \"a\"\nouter = \"b\"\n[engine]\nmerge_timeout_us = 50000\n",
            &["`[engine] merge_timeout_us` = 50000", "0..=10000"],
        ),
        ("unknown", "inner = \"a\"\nouter = \"b\"\nworkerz = 2\n", &["workerz"]),
        ("type", "inner = \"a\"\nouter = \"b\"\nbatch = \"many\"\n", &["`batch` (line 3)", "expected a whole number"]),
        ("mtu", "inner = \"a\"\nouter = \"b\"\nimtu = 1500\nemtu = 9000\n", &["`emtu`", "at most imtu"]),
    ];
    for (name, text, needles) in cases {
        let f = TempToml::new(name, text);
        let out = px(&["gateway", "--check-config", f.path()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {out:?}");
        assert!(out.stdout.is_empty(), "{name}: nothing printed on error");
        for n in needles {
            assert!(stderr.contains(n), "{name}: {n:?} not in {stderr}");
        }
    }
    let out = px(&["gateway", "--check-config", "/nonexistent/px.toml"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `px status` with no gateway at the socket: exit 3 ("not running"),
/// the socket named; with `--json`, a JSON object with `error` on stdout.
#[test]
fn status_without_a_gateway_exits_3_and_says_so() {
    let sock = std::env::temp_dir().join(format!("px-status-none-{}.sock", std::process::id()));
    let sock = sock.to_str().unwrap();
    let out = px(&["status", "--socket", sock]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(sock), "{err}");
    let out = px(&["status", "--socket", sock, "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().contains(sock), "{v}");
    let help = px(&["status", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--json") && help.contains("Exit status"), "{help}");
}

/// Issue 29 item 1: with no ICMP source configured, `--check-config`
/// shows the IPv4 default in the effective configuration and says on
/// stderr where ICMPv4 errors come from and, loudly, that IPv6 gets none.
#[test]
fn check_config_says_where_icmp_errors_come_from() {
    let f = TempToml::new("icmp", "inner = \"in0\"\nouter = \"out0\"\n");
    let out = px(&["gateway", "--config", f.path(), "--print-config"]);
    assert!(out.status.success(), "{out:?}");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("icmp_source_v4 = \"192.0.0.8\"\n"), "{stdout}");
    assert!(stderr.contains("ICMPv4 errors (\"fragmentation needed\") come from 192.0.0.8, the default"), "{stderr}");
    assert!(stderr.contains("px gateway: warning: no ICMPv6 source ([engine] icmp_source_v6)"), "{stderr}");
    // Both set: no warning.
    let f = TempToml::new(
        "icmp2",
        "inner = \"in0\"\nouter = \"out0\"\n[engine]\nicmp_source_v4 = \"0.0.0.0\"\nicmp_source_v6 = \"2001:db8::fe\"\n",
    );
    let out = px(&["gateway", "--config", f.path(), "--print-config"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("px gateway: warning: ICMPv4 errors are off"), "{stderr}");
    assert!(stderr.contains("ICMPv6 errors (\"packet too big\") come from 2001:db8::fe"), "{stderr}");
}

/// Issue 29 item 6: every error names the key or flag as the user wrote
/// it, in the user's unit; --print-config refuses what --check-config
/// refuses; a missing interface is named with its key.
#[test]
fn errors_name_the_key_or_flag_as_written() {
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    // No ports at all: the flag that is missing.
    let out = px(&["gateway"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("`--inner` is required"), "{}", stderr(&out));
    let out = px(&["gateway", "--inner", "a"]);
    assert!(stderr(&out).contains("`--outer` is required"), "{}", stderr(&out));
    // A flag's value: the flag, in its unit; --print-config as --check-config.
    for mode in ["--print-config", "--check-config"] {
        let f = TempToml::new("flag", "inner = \"a\"\nouter = \"b\"\n");
        let args: Vec<&str> = match mode {
            "--print-config" => vec!["gateway", "--config", f.path(), "--print-config", "--merge-timeout-us", "20000"],
            _ => vec!["gateway", "--check-config", f.path(), "--merge-timeout-us", "20000"],
        };
        let out = px(&args);
        assert_eq!(out.status.code(), Some(2), "{mode}: {out:?}");
        assert!(
            stderr(&out).contains("`--merge-timeout` = 20000us (allowed: 0us..=10000us)"),
            "{mode}: {}",
            stderr(&out)
        );
    }
    // A key in the file: the section and key, in microseconds.
    let f = TempToml::new("key", "inner = \"a\"\nouter = \"b\"\n[engine]\nmerge_timeout_us = 20000\n");
    let out = px(&["gateway", "--check-config", f.path()]);
    assert!(stderr(&out).contains("`[engine] merge_timeout_us` = 20000 (allowed: 0..=10000)"), "{}", stderr(&out));
    // A missing interface: named with its key, an error (issue 38 item
    // 5: the gateway would not start), nothing printed; a start that
    // fails names the key too.
    let f = TempToml::new("nosuch", "inner = \"nosuch0\"\nouter = \"nosuch1\"\n");
    let out = px(&["gateway", "--check-config", f.path()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(stderr(&out).contains("`inner` = \"nosuch0\": no such interface"), "{}", stderr(&out));
    // Running, the port may yet come (a NIC late at boot): 1, which a
    // service manager retries (issue 38 item 3).
    let out = px(&["gateway", "--config", f.path()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("`inner` = \"nosuch0\":"), "{}", stderr(&out));
}

/// Issue 29 item 8: one exit-status convention; `px lab down` with
/// nothing up is "not running" (3), not a failure (2), and durations
/// take units (`--merge-timeout 500us`, `--log-interval 10s`).
#[test]
fn exit_statuses_and_units_follow_the_convention() {
    let tmp = std::env::temp_dir().join(format!("px-down-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_px")).args(["lab", "down"]).env("TMPDIR", &tmp).output().unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no lab is up"), "{out:?}");
    let f = TempToml::new("units", "inner = \"a\"\nouter = \"b\"\n");
    let out =
        px(&["gateway", "--config", f.path(), "--print-config", "--merge-timeout", "0.3ms", "--log-interval", "1min"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("merge_timeout_us = 300\n") && stdout.contains("log_interval_s = 60\n"), "{out:?}");
    let out = px(&["gateway", "--config", f.path(), "--print-config", "--merge-timeout-us", "300"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("merge_timeout_us = 300\n"), "{out:?}");
}

/// Issue 36 item 7: every key can be set from the command line with
/// `--set KEY=VALUE`, read as the file reads it; the flags are settings of
/// one key each; later settings win; errors name what was written.
#[test]
fn set_reaches_every_key_and_flags_are_settings() {
    let print = |args: &[&str]| {
        let mut all = vec!["gateway", "--print-config", "--inner", "a", "--outer", "b"];
        all.extend_from_slice(args);
        px(&all)
    };
    let out = print(&[
        "--set",
        "engine.max_flows=1000",
        "--set",
        "engine.caravan_ports=443,4433",
        "--set",
        "socket_buffer_bytes=16MiB",
        "--set",
        "imtu_follow.reverify_s=10min",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for line in [
        "max_flows = 1000\n",
        "caravan_ports = [443, 4433]\n",
        "socket_buffer_bytes = 16777216\n",
        "reverify_s = 600\n",
    ] {
        assert!(stdout.contains(line), "{line:?} not in {stdout}");
    }
    // Issue 38 item 5: sizes take units; `--fast-path` alone is on, as in
    // `px lab demo --fast-path`; its old name `--offload` still works.
    let out = print(&["--capture-max-bytes", "64MiB", "--fast-path"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("capture_max_bytes = 67108864\n") && stdout.contains("fast_path = \"on\"\n"), "{out:?}");
    let out = print(&["--offload", "off"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("fast_path = \"off\"\n"), "{out:?}");
    let out = print(&["--offload"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("fast_path = \"on\"\n"), "{out:?}");
    // A flag and --set on the same key: the later one.
    let out = print(&["--workers", "2", "--set", "workers=3"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("workers = 3\n"), "{out:?}");
    let out = print(&["--set", "workers=3", "--workers", "2"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("workers = 2\n"), "{out:?}");
    // Errors: the flag as written, with what the key allows.
    let err = |out: Output| (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned());
    let (code, e) = err(print(&["--set", "engine.max_flows=0"]));
    assert_eq!(code, Some(2));
    assert!(e.contains("`--set engine.max_flows` = 0 (allowed: 1..=16777216)"), "{e}");
    let (code, e) = err(print(&["--set", "max_flows=10"]));
    assert_eq!(code, Some(2));
    assert!(e.contains("`max_flows` is a key of the [engine] table: set `engine.max_flows`"), "{e}");
    let (_, e) = err(print(&["--imtu", "70000"]));
    assert!(e.contains("`--imtu`") && e.contains("1280..=65535"), "{e}");
    let (_, e) = err(print(&["--set", "workers"]));
    assert!(e.contains("expected KEY=VALUE"), "{e}");
}

/// Issue 38 item 5: `--print-config` alone prints every key with its
/// default and exits 0.
#[test]
fn print_config_alone_prints_the_defaults() {
    let out = px(&["gateway", "--print-config"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("inner = \"\"\nouter = \"\"\n"), "{stdout}");
    assert!(stdout.contains("workers = 1\n") && stdout.contains("\n[engine]\nmerge_timeout_us = 500\n"), "{stdout}");
}

/// Issue 38 item 5: `--check-config` passes a file whose interfaces exist
/// in this network namespace (two of them, when there are two).
#[test]
fn check_config_passes_existing_interfaces() {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    if names.len() < 2 {
        eprintln!("skipped: fewer than two interfaces in this network namespace ({names:?})");
        return;
    }
    let f = TempToml::new("exist", &format!("inner = \"{}\"\nouter = \"{}\"\n", names[0], names[1]));
    let out = px(&["gateway", "--check-config", f.path()]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("inner = \"{}\"\n", names[0])), "{out:?}");
}

/// Issue 38 item 5: the file's values say their allowed range, take units
/// like the command line, are located by file and line after parsing; a
/// top-level key of a table gets a hint; absurd lifetimes are refused.
#[test]
fn file_values_take_units_and_errors_say_range_file_and_line() {
    let check = |name: &str, text: &str| {
        let f = TempToml::new(name, &format!("inner = \"a\"\nouter = \"b\"\n{text}"));
        let out = px(&["gateway", "--config", f.path(), "--print-config"]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            f,
        )
    };
    let (code, e) = {
        let r = check("imtu", "imtu = 70000\n");
        (r.0, r.2)
    };
    assert_eq!(code, Some(2));
    assert!(
        e.contains("`imtu` (line 3)") && e.contains("(allowed: 0 (the inner interface's MTU) or 1280..=65535)"),
        "{e}"
    );
    let (_, _, e, _) = check("interval", "log_interval_s = -1\n");
    assert!(e.contains("`log_interval_s` (line 3): -1 is below 0 (allowed: 0..=86400)"), "{e}");
    let (code, out, e, _) = check(
        "units",
        "log_interval_s = \"2min\"\ncapture_max_bytes = \"1MiB\"\n[engine]\nmerge_timeout_us = \"0.3ms\"\n",
    );
    assert_eq!(code, Some(0), "{e}");
    assert!(
        out.contains("log_interval_s = 120\n")
            && out.contains("capture_max_bytes = 1048576\n")
            && out.contains("merge_timeout_us = 300\n"),
        "{out}"
    );
    let (_, _, e, f) = check("line", "\n[engine]\nmax_flows = 0\n");
    assert!(
        e.contains(&format!("config file {}, line 5: invalid configuration: `[engine] max_flows` = 0", f.path())),
        "{e}"
    );
    let (_, _, e, _) = check("hint", "merge_timeout_us = 300\n");
    assert!(e.contains("`merge_timeout_us` is a key of the [engine] table: put it under `[engine]`"), "{e}");
    let (code, _, e, _) = check("absurd", "[engine]\npmtu_lifetime_s = 99999999999\n");
    assert_eq!(code, Some(2));
    assert!(e.contains("pmtu_lifetime_s` = 99999999999 (allowed: 1..=86400)"), "{e}");
}

/// Issue 38 item 4: an error that stops the start is one ERROR log line,
/// in JSON when JSON is asked for, and nothing else; the exit status tells
/// a service manager whether to try again: 2, the configuration must
/// change; 1, it may pass by itself (a port that is not there yet, a NIC
/// late at boot). Ports that do not exist: nothing is touched, nothing sent.
#[test]
fn start_errors_are_error_lines_in_the_format_asked_for() {
    let ports = ["--inner", "px-nosuch-in", "--outer", "px-nosuch-out"];
    let json_error = |out: &Output| -> serde_json::Value {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        assert_eq!(v["level"], "ERROR", "{stderr}");
        assert_eq!(v["target"], "px::gateway", "{stderr}");
        assert!(out.stdout.is_empty(), "{out:?}");
        v
    };
    // The configuration: 2.
    let out = px(&[&["gateway", "--log-format", "json", "--set", "imtu=70000"][..], &ports].concat());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let msg = json_error(&out)["fields"]["message"].as_str().unwrap().to_owned();
    assert!(msg.starts_with("px gateway: `--set imtu`: \"70000\"") && msg.contains("1280..=65535"), "{msg}");
    // A port that is not there: 1.
    let out = px(&[&["gateway", "--log-format", "json"][..], &ports].concat());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let msg = json_error(&out)["fields"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("`inner` = \"px-nosuch-in\""), "{msg}");
    // Human: the same as a log line at ERROR.
    let out = px(&[&["gateway"][..], &ports].concat());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(" ERROR px gateway: `inner` = \"px-nosuch-in\""), "{stderr}");
}

/// Runs `cmd` with `socket(AF_NETLINK, …)` refused (EAFNOSUPPORT), as a
/// systemd unit whose `RestrictAddressFamilies` lacks AF_NETLINK does: a
/// seccomp filter installed in the child before exec.
#[cfg(target_arch = "x86_64")]
fn without_netlink(cmd: &mut Command) -> Output {
    use std::os::unix::process::CommandExt;
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const BPF_ABS: u32 = 0x20;
    const BPF_JEQ: u32 = 0x10;
    let f = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter { code: code as u16, jt, jf, k };
    let (ld, jeq, ret) = (libc::BPF_LD | libc::BPF_W | BPF_ABS, libc::BPF_JMP | BPF_JEQ | libc::BPF_K, libc::BPF_RET);
    // seccomp_data: nr at 0, arch at 4, args[0] (low half) at 16.
    let prog = [
        f(ld, 0, 0, 4),
        f(jeq, 0, 5, AUDIT_ARCH_X86_64),
        f(ld, 0, 0, 0),
        f(jeq, 0, 3, libc::SYS_socket as u32),
        f(ld, 0, 0, 16),
        f(jeq, 0, 1, libc::AF_NETLINK as u32),
        f(ret, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32),
        f(ret, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    // SAFETY: the closure makes two prctl calls (async-signal-safe) on a
    // filter that lives until the child execs.
    unsafe {
        cmd.pre_exec(move || {
            let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr().cast_mut() };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &fprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().expect("px runs")
}

/// Issue 38 item 3: the packaged unit once forbade netlink, and the iMTU
/// follower logged its failure every second and never verified anything.
/// A configured feature that cannot work is refused at start, before a
/// port is touched: one ERROR line that says what it needs, exit 2 (a
/// restart would not help). With netlink the same start gets past it (to
/// the ports, which do not exist: 1).
#[cfg(target_arch = "x86_64")]
#[test]
fn imtu_follow_without_netlink_is_refused_at_start() {
    let f = TempToml::new(
        "imtu-follow",
        "inner = \"px-nosuch-in\"\nouter = \"px-nosuch-out\"\n[imtu_follow]\ntable = 100\n",
    );
    let out = without_netlink(Command::new(env!("CARGO_BIN_EXE_px")).args(["gateway", "--config", f.path()]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(" ERROR px gateway: [imtu_follow]: cannot read kernel routing table 100"), "{stderr}");
    assert!(stderr.contains("RestrictAddressFamilies"), "{stderr}");
    let out = px(&["gateway", "--config", f.path()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("`inner` = \"px-nosuch-in\""), "{out:?}");
}

/// Issue 38 item 3: under systemd (`Type=notify`), a start that fails says
/// nothing to the service manager (no READY=1: the unit fails, and is
/// started again when the failure may pass, exit 1).
#[test]
fn a_failed_start_never_says_ready() {
    let dir = std::env::temp_dir().join(format!("px-cli-notify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify");
    let _ = std::fs::remove_file(&path);
    let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    rx.set_nonblocking(true).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_px"))
        .args(["gateway", "--inner", "px-nosuch-in", "--outer", "px-nosuch-out"])
        .env("NOTIFY_SOCKET", &path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let mut buf = [0u8; 512];
    let got = rx.recv(&mut buf).map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
    assert!(got.is_err(), "the service manager heard {got:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
