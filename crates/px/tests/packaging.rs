//! The Debian package and its systemd units (crates/px/debian,
//! `[package.metadata.deb]`, scripts/package-deb):
//!
//! - the units pass `systemd-analyze verify` and stay at or below the
//!   exposure `systemd-analyze security` gives them today;
//! - they run as the system user `px` that the sysusers.d file creates, the
//!   gateway with exactly CAP_NET_RAW and CAP_NET_ADMIN, the responder with
//!   none;
//! - (root) the real gateway started as an unprivileged user holding only
//!   the unit's capabilities carries sha256-checked transfers both ways and
//!   puts its ports back, and without either capability refuses to start,
//!   ports untouched: the set is both sufficient and necessary;
//! - the package built from the debug binary holds the binary, the units,
//!   the man pages, the completions, the examples and the Wireshark plugin.
//!
//! Tests that need a tool (systemd-analyze, systemd-sysusers, setpriv,
//! cargo-deb, dpkg-deb) skip with a message where it is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use px_lab::require_root_or_skip;

const GATEWAY_UNIT: &str = "px-gateway@.service";
const FPMTUD_UNIT: &str = "px-fpmtud.service";

/// The highest `systemd-analyze security` exposure (0.0 best, 10.0 worst)
/// each unit may reach: what it reaches today. The gateway cannot have a
/// private network or private users (its capabilities act on the host's
/// ports), nor go without packet sockets.
const MAX_EXPOSURE: [(&str, f64); 2] = [(GATEWAY_UNIT, 1.8), (FPMTUD_UNIT, 1.1)];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn unit_path(name: &str) -> PathBuf {
    crate_dir().join("debian").join(name)
}

/// The value of `key=` in a unit file (the last assignment; comments skipped).
fn unit_value(name: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(unit_path(name)).unwrap();
    text.lines()
        .filter(|l| !l.starts_with(['#', ';']))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_owned())
        .next_back()
}

/// The unit's ambient capabilities in setpriv's spelling (`net_raw`).
fn unit_capabilities(name: &str) -> Vec<String> {
    let caps = unit_value(name, "AmbientCapabilities").unwrap_or_default();
    caps.split_whitespace().map(|c| c.trim_start_matches("CAP_").to_lowercase()).collect()
}

/// Whether `program --version` runs.
fn have(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).arg("--version").output().is_ok_and(|o| o.status.success())
}

fn skipped(test: &str, why: &str) {
    eprintln!("{test}: SKIPPED: {why}");
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn px() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_px"))
}

#[test]
fn units_pass_systemd_analyze_verify() {
    if !have("systemd-analyze", &[]) {
        return skipped("units_pass_systemd_analyze_verify", "no systemd-analyze");
    }
    // verify checks that ExecStart's binary and Documentation's man pages
    // exist: the units as installed, pointed at the px under test, with
    // the man pages it generates on MANPATH.
    let dir = Scratch::new("packaging-verify");
    let px = px().to_str().unwrap();
    let mut units = Vec::new();
    for name in [GATEWAY_UNIT, FPMTUD_UNIT] {
        let unit = std::fs::read_to_string(unit_path(name)).unwrap();
        assert!(unit.contains("ExecStart=/usr/bin/px "), "{name}");
        let path = dir.0.join(name);
        std::fs::write(&path, unit.replace("/usr/bin/px ", &format!("{px} "))).unwrap();
        units.push(path);
    }
    let man = dir.0.join("man");
    let o = run(Command::new(px).args(["generate", "man"]).arg(man.join("man1")));
    assert!(o.status.success(), "px generate man: {}", text(&o));
    let o = run(Command::new("systemd-analyze").arg("verify").args(&units).env("MANPATH", &man));
    // verify only warns (exit 0) about unknown keys: any output fails.
    assert!(o.status.success() && text(&o).trim().is_empty(), "systemd-analyze verify:\n{}", text(&o));
}

#[test]
fn units_exposure_is_at_most_todays() {
    if !have("systemd-analyze", &[]) {
        return skipped("units_exposure_is_at_most_todays", "no systemd-analyze");
    }
    for (name, max) in MAX_EXPOSURE {
        // --threshold is in tenths of the printed level.
        let o = run(Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(format!("--threshold={}", (max * 10.0).round()))
            .arg(unit_path(name)));
        let out = text(&o);
        let level: f64 = out
            .lines()
            .find_map(|l| l.split("Overall exposure level for ").nth(1))
            .and_then(|l| l.split_once(": "))
            .and_then(|(_, v)| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no overall exposure level in:\n{out}"));
        eprintln!("{name}: exposure {level}");
        assert!(o.status.success() && level <= max, "{name}: exposure {level} above {max}:\n{out}");
    }
}

/// What the units promise: the user, the capabilities (the ones the root
/// test below finds sufficient and necessary), the sandbox essentials.
#[test]
fn units_run_as_px_with_only_the_needed_capabilities() {
    let v = |unit: &str, key: &str| unit_value(unit, key).unwrap_or_else(|| panic!("{unit}: no {key}="));
    for unit in [GATEWAY_UNIT, FPMTUD_UNIT] {
        assert_eq!(v(unit, "User"), "px", "{unit}");
        assert_eq!(v(unit, "AmbientCapabilities"), v(unit, "CapabilityBoundingSet"), "{unit}");
        for (key, want) in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateTmp", "yes")] {
            assert_eq!(v(unit, key), want, "{unit}: {key}");
        }
    }
    assert_eq!(unit_capabilities(GATEWAY_UNIT), ["net_raw", "net_admin"]);
    assert_eq!(v(GATEWAY_UNIT, "ExecStart"), "/usr/bin/px gateway --config /etc/px/%i.toml");
    assert_eq!(v(GATEWAY_UNIT, "RestrictAddressFamilies"), "AF_PACKET AF_INET AF_INET6 AF_UNIX AF_NETLINK");
    assert_eq!(v(GATEWAY_UNIT, "StateDirectory"), "px");
    assert!(unit_capabilities(FPMTUD_UNIT).is_empty());
    assert_eq!(v(FPMTUD_UNIT, "RestrictAddressFamilies"), "AF_INET AF_INET6");
}

/// Issue 38 item 3: the gateway's unit is active only once the gateway
/// forwards (Type=notify; crates/px/tests/service_lab.rs shows READY=1 comes
/// after the ports are up), has a watchdog the workers feed, keeps starting
/// it while a port is missing (exit 1, no start limit) and not when the
/// configuration must change (exit 2).
#[test]
fn gateway_unit_is_notify_with_a_watchdog_and_survives_a_late_nic() {
    let v = |key: &str| unit_value(GATEWAY_UNIT, key).unwrap_or_else(|| panic!("no {key}="));
    assert_eq!(v("Type"), "notify");
    assert_eq!(v("NotifyAccess"), "main");
    let watchdog: u64 = v("WatchdogSec").trim_end_matches('s').parse().expect("WatchdogSec in seconds");
    assert!((5..=60).contains(&watchdog), "WatchdogSec={watchdog}s");
    assert_eq!(v("Restart"), "on-failure");
    assert_eq!(v("StartLimitIntervalSec"), "0", "a NIC late at boot must not exhaust the start limit");
    assert_eq!(v("RestartPreventExitStatus"), "2", "a configuration that cannot work is not retried");
}

/// Issue 38 item 3: an upgrade restarts no gateway (two on one border
/// would go dark together); it says how to restart them one at a time.
#[test]
fn postinst_restarts_no_gateway_and_says_how_to_upgrade_one_at_a_time() {
    let postinst = std::fs::read_to_string(crate_dir().join("debian/postinst")).unwrap();
    let code: Vec<&str> = postinst.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
    for l in &code {
        let restarts = ["restart", "try-restart", "reload-or-restart", "stop"]
            .iter()
            .any(|verb| l.contains(&format!("systemctl {verb} ")) || l.contains(&format!("deb-systemd-invoke {verb}")));
        assert!(!restarts || l.contains("echo"), "postinst restarts or stops units: {l}");
    }
    assert!(code.iter().any(|l| l.contains("one at a time")), "{postinst}");
}

#[test]
fn sysusers_file_creates_the_px_system_user() {
    if !have("systemd-sysusers", &[]) {
        return skipped("sysusers_file_creates_the_px_system_user", "no systemd-sysusers");
    }
    let root = Scratch::new("packaging-sysusers");
    std::fs::create_dir_all(root.0.join("etc")).unwrap();
    let conf = crate_dir().join("debian/sysusers.d/px.conf");
    let o = run(Command::new("systemd-sysusers").arg(format!("--root={}", root.0.display())).arg(&conf));
    assert!(o.status.success(), "systemd-sysusers: {}", text(&o));
    let passwd = std::fs::read_to_string(root.0.join("etc/passwd")).unwrap();
    let px: Vec<&str> = passwd.lines().find(|l| l.starts_with("px:")).expect("user px").split(':').collect();
    let uid: u32 = px[2].parse().unwrap();
    assert!(uid < 1000, "px is a system user: {passwd}");
    assert_eq!(px[5], "/var/lib/px");
    assert!(px[6].ends_with("nologin"), "px cannot log in: {passwd}");
    let group = std::fs::read_to_string(root.0.join("etc/group")).unwrap();
    assert!(group.lines().any(|l| l.starts_with("px:")), "group px: {group}");
}

#[test]
fn package_script_help() {
    let o = run(Command::new(crate_dir().join("../../scripts/package-deb")).arg("--help"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("--prebuilt BIN"), "{}", text(&o));
}

/// The package scripts/package-deb makes of the debug binary (stripped,
/// fast compression: seconds, no release build).
#[test]
fn package_holds_binary_units_man_pages_completions_and_dissector() {
    let test = "package_holds_binary_units_man_pages_completions_and_dissector";
    if !have("cargo", &["deb"]) {
        return skipped(test, "no cargo-deb (cargo install cargo-deb --locked)");
    }
    if !have("dpkg-deb", &[]) {
        return skipped(test, "no dpkg-deb");
    }
    let out = Scratch::new("packaging-deb");
    let o = run(Command::new(crate_dir().join("../../scripts/package-deb"))
        .arg("--prebuilt")
        .arg(px())
        .args(["--fast", "--out"])
        .arg(&out.0)
        .env("CARGO_NET_OFFLINE", "true"));
    assert!(o.status.success(), "scripts/package-deb: {}", text(&o));
    let deb = std::fs::read_dir(&out.0)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("a .deb");

    let o = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    let listing = text(&o);
    let files: Vec<&str> = listing.lines().filter_map(|l| l.split_whitespace().last()?.strip_prefix("./")).collect();
    let mut want = vec![
        "usr/bin/px",
        "usr/lib/systemd/system/px-gateway@.service",
        "usr/lib/systemd/system/px-fpmtud.service",
        "usr/lib/sysusers.d/px.conf",
        "usr/share/doc/px/examples/gateway.toml",
        "usr/share/doc/px/examples/px-fpmtud-packet-socket.conf",
        "usr/share/bash-completion/completions/px",
        "usr/share/zsh/vendor-completions/_px",
        "usr/share/fish/vendor_completions.d/px.fish",
    ];
    let pages = ["px", "px-gateway", "px-fpmtud", "px-probe", "px-lab-demo", "px-sim-mtu-drop", "px-bench-engine"];
    let pages: Vec<String> = pages.iter().map(|p| format!("usr/share/man/man1/{p}.1.gz")).collect();
    want.extend(pages.iter().map(String::as_str));
    want.push("usr/share/man/man5/px-gateway.toml.5.gz");
    for f in &want {
        assert!(files.contains(f), "{f} missing from the package:\n{listing}");
    }
    assert!(!files.iter().any(|f| f.contains("px-generate")), "the hidden subcommand has no man page");
    // The dissector where this machine's Wireshark loads Lua plugins from.
    let lua = files.iter().find(|f| f.ends_with("/wireshark/plugins/packetexpress.lua")).expect("dissector");
    if let Ok(o) = Command::new("tshark").args(["-G", "folders"]).output() {
        let folders = String::from_utf8_lossy(&o.stdout).into_owned();
        if let Some(global) = folders.lines().find_map(|l| l.strip_prefix("Global Lua Plugins:")) {
            assert_eq!(format!("/{lua}"), format!("{}/packetexpress.lua", global.trim()));
        }
    }

    // The files are the repository's, and the packaged binary runs.
    let root = out.0.join("root");
    assert!(run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root)).status.success());
    for unit in [GATEWAY_UNIT, FPMTUD_UNIT] {
        let packaged = std::fs::read(root.join("usr/lib/systemd/system").join(unit)).unwrap();
        assert_eq!(packaged, std::fs::read(unit_path(unit)).unwrap(), "{unit}");
    }
    let o = run(Command::new(root.join("usr/bin/px")).arg("--version"));
    assert!(o.status.success() && text(&o).starts_with("px "), "{}", text(&o));

    // Metadata and maintainer scripts: the user before anything else, the
    // gateway instances stopped on removal.
    let o = run(Command::new("dpkg-deb").arg("-f").arg(&deb).args(["Package", "Depends", "Section"]));
    let fields = text(&o);
    assert!(fields.contains("Package: px") && fields.contains("systemd-sysusers"), "{fields}");
    let control = out.0.join("control");
    assert!(run(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control)).status.success());
    let script = |n: &str| std::fs::read_to_string(control.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
    let postinst = script("postinst");
    assert!(postinst.contains("systemd-sysusers") && postinst.contains("px.conf"), "{postinst}");
    assert!(!postinst.contains("#DEBHELPER#"), "{postinst}");
    assert!(script("prerm").contains("systemctl stop 'px-gateway@*.service'"));
    for s in ["postinst", "prerm", "postrm"] {
        let o = run(Command::new("sh").arg("-n").arg(control.join(s)));
        assert!(o.status.success(), "{s}: {}", text(&o));
    }
}

/// `setpriv` as the units run the daemons: user nobody, no supplementary
/// group, no new privileges, exactly `caps` (inheritable, ambient and
/// bounding), then exec.
fn setpriv(caps: &[&String]) -> Vec<String> {
    let set: Vec<String> = std::iter::once("-all".to_owned()).chain(caps.iter().map(|c| format!("+{c}"))).collect();
    let set = set.join(",");
    let mut v: Vec<String> =
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--no-new-privs"].map(String::from).to_vec();
    v.extend([format!("--inh-caps={set}"), format!("--ambient-caps={set}"), format!("--bounding-set={set}")]);
    v.push("--".into());
    v
}

/// The gateway with the unit's capabilities and nothing else, as user
/// nobody: sha256-exact transfers both ways (IPv4 and IPv6, two workers,
/// metrics endpoint on), GRO turned on and promiscuous mode joined, and
/// both put back at exit. Then without each capability in turn: it
/// refuses to start, saying what was not permitted, and the ports are as
/// they were.
#[test]
fn gateway_runs_unprivileged_with_only_the_units_capabilities() {
    let test = "gateway_runs_unprivileged_with_only_the_units_capabilities";
    if !require_root_or_skip(test) {
        return;
    }
    if !have("setpriv", &[]) {
        return skipped(test, "no setpriv (util-linux)");
    }
    let caps = unit_capabilities(GATEWAY_UNIT);
    let _serial = serialize();
    let lab = GwLab::build(None);
    lab.gateway_ports_gro_off();
    let before = lab.gateway_ports();

    for dropped in &caps {
        let rest: Vec<&String> = caps.iter().filter(|c| *c != dropped).collect();
        let wrapper = setpriv(&rest);
        let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        match Gateway::start_wrapped(&lab, &wrapper, &[]) {
            Ok(gw) => panic!("started without {dropped}: {}", gw.stop().log),
            Err(log) => assert!(log.contains("Operation not permitted"), "without {dropped}: {log}"),
        }
        assert_eq!(lab.gateway_ports(), before, "ports changed by a gateway that failed without {dropped}");
    }

    let all: Vec<&String> = caps.iter().collect();
    let wrapper = setpriv(&all);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let gw = Gateway::start_wrapped(&lab, &wrapper, &["--workers", "2", "--metrics", "127.0.0.1:9464"])
        .unwrap_or_else(|e| panic!("with {caps:?}: {e}"));
    let uid = std::fs::read_to_string(format!("/proc/{}/status", gw.pid)).unwrap_or_default();
    assert!(uid.lines().any(|l| l.starts_with("Uid:") && l.contains("65534")), "not nobody:\n{uid}");
    let during = lab.gateway_ports();
    lab.ping_both();
    transfers_both_ways(&lab, LEGACY_V4, BNET_V4, 5401);
    transfers_both_ways(&lab, LEGACY_V6, BNET_V6, 5411);
    let exit = gw.stop();
    exit.assert_clean();
    assert!(exit.counter("mss_raised") >= 1 && exit.counter("merged_out") > 0, "{}", exit.stats);
    for d in &during {
        assert_eq!(d.gro, Some(true), "the unprivileged gateway turns GRO on: {d:?}");
        assert!(d.promiscuity.unwrap_or(0) >= 1, "its sockets are promiscuous: {d:?}");
    }
    assert_eq!(lab.gateway_ports(), before, "ports not restored by the unprivileged gateway");
}

/// `px probe` is timed against tracepath from exec to exit, and every
/// shared library the loader maps costs each start (libm: 0.1 ms,
/// docs/probe.md). The binary needs libc and the unwinder only.
#[test]
fn the_binary_loads_no_library_but_libc_and_the_unwinder() {
    if !have("readelf", &[]) {
        return skipped("the_binary_loads_no_library_but_libc_and_the_unwinder", "readelf (binutils) not found");
    }
    let o = run(Command::new("readelf").args(["-d"]).arg(px()));
    assert!(o.status.success(), "readelf: {}", text(&o));
    let needed: Vec<String> = text(&o)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).and_then(|r| r.split(']').next()).map(str::to_owned))
        .collect();
    assert!(needed.iter().any(|n| n.starts_with("libc.so")), "{needed:?}");
    for n in &needed {
        assert!(
            ["libc.so", "libgcc_s.so", "ld-linux"].iter().any(|ok| n.starts_with(ok)),
            "px needs {n} ({needed:?}): a start-up cost for every `px probe`"
        );
    }
}

/// Issue 38 item 5: every page says its exit status, signals, files and
/// related pages; the configuration file has a page; completions offer
/// `--fast-path`'s values, not file names, and leave the hidden `generate`
/// command out.
#[test]
fn generated_pages_and_completions_say_what_a_user_needs() {
    let dir = Scratch::new("generate");
    let o = run(Command::new(px()).args(["generate", "man"]).arg(dir.0.join("man1")));
    assert!(o.status.success(), "{}", text(&o));
    for page in ["px.1", "px-gateway.1", "px-status.1", "px-probe.1", "px-lab-border.1"] {
        let t = std::fs::read_to_string(dir.0.join("man1").join(page)).unwrap();
        for section in [".SH \"EXIT STATUS\"", ".SH SIGNALS", ".SH FILES", ".SH \"SEE ALSO\""] {
            assert!(t.contains(section), "{page}: no {section}");
        }
    }
    let gw = std::fs::read_to_string(dir.0.join("man1/px-gateway.1")).unwrap();
    assert!(gw.contains("SIGHUP") && gw.contains("px\\-gateway.toml"), "{gw}");
    let conf = std::fs::read_to_string(dir.0.join("man5/px-gateway.toml.5")).unwrap();
    assert!(
        conf.contains("merge_timeout_us") && conf.contains("control_socket") && conf.contains(".SH \"[engine]\""),
        "{conf}"
    );
    assert!(!dir.0.join("man1/px-generate.1").exists());
    let o = run(Command::new(px()).args(["generate", "completions"]).arg(dir.0.join("comp")));
    assert!(o.status.success(), "{}", text(&o));
    let bash = std::fs::read_to_string(dir.0.join("comp/px.bash")).unwrap();
    let fish = std::fs::read_to_string(dir.0.join("comp/px.fish")).unwrap();
    assert!(!fish.contains("-a \"generate\""), "fish completes the hidden command");
    assert!(!bash.contains("px,generate)") && !bash.contains("subcmd__generate"), "bash completes the hidden command");
    let offload = bash.split("--fast-path)").nth(1).unwrap_or_default();
    assert!(
        offload.trim_start().starts_with("COMPREPLY=($(compgen -W \"off on\""),
        "{}",
        &offload[..offload.len().min(200)]
    );
}
