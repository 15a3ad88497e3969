//! Root tests of what an operator reads from a running gateway: the wire
//! counters against the kernel's own (`ip -s link`), and `px status` over
//! the control socket. Topology and helpers as in `gateway_lab.rs` (the
//! `common` module); each test skips with a message when not root.

mod common;

use std::time::Duration;

use common::*;
use px_lab::require_root_or_skip;

/// The gateway's wire counts of `port` from its metrics (all workers; one here).
fn gateway_counts(text: &str, port: &str) -> [u64; 4] {
    let m = |fam: &str, dir: &str| {
        metric(text, &format!("{fam}{{worker=\"0\",port=\"{port}\",direction=\"{dir}\"}}")) as u64
    };
    [
        m("px_gateway_packets_total", "rx"),
        m("px_gateway_bytes_total", "rx"),
        m("px_gateway_packets_total", "tx"),
        m("px_gateway_bytes_total", "tx"),
    ]
}

const COUNTERS_METRICS: &str = "127.0.0.1:9467";

/// Bulk TCP both ways through GRO on both ports (so the gateway receives
/// super-packets and hands GSO frames back): over the transfers, the
/// gateway's `px_gateway_packets_total` and `px_gateway_bytes_total` of
/// each port and direction agree with the kernel's `ip -s link` counts of
/// the same port within 1 %, while its super-packet counts are far fewer
/// (what the old metric showed).
#[test]
fn wire_counters_agree_with_ip_link_within_one_percent() {
    if !require_root_or_skip("wire_counters_agree_with_ip_link_within_one_percent") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &["--metrics", COUNTERS_METRICS]);
    lab.ping_both();
    // Workers publish every 200 ms: a quiet moment for the baseline.
    std::thread::sleep(Duration::from_millis(500));
    let before_gw = metrics(&lab, COUNTERS_METRICS);
    let before_k = [kernel_counts(&lab, GW_OUTER), kernel_counts(&lab, GW_INNER)];
    exact_both_ways(&lab, LEGACY_V4, BNET_V4, 5471, 2, 24 << 20);
    std::thread::sleep(Duration::from_millis(500));
    let after_gw = metrics(&lab, COUNTERS_METRICS);
    let after_k = [kernel_counts(&lab, GW_OUTER), kernel_counts(&lab, GW_INNER)];
    let names = ["rx packets", "rx bytes", "tx packets", "tx bytes"];
    let mut report = String::new();
    for (k, port) in ["outer", "inner"].into_iter().enumerate() {
        let (g0, g1) = (gateway_counts(&before_gw, port), gateway_counts(&after_gw, port));
        for j in 0..4 {
            let gw_delta = g1[j] - g0[j];
            let mut k_delta = after_k[k][j] - before_k[k][j];
            if j == 1 {
                // veth in NAPI mode (GRO on) counts a received frame's
                // bytes after the Ethernet header is pulled (`veth_xdp_rcv`),
                // its sent bytes with it; a NIC counts both with it.
                k_delta += 14 * (after_k[k][0] - before_k[k][0]);
            }
            let off = (gw_delta as f64 - k_delta as f64).abs() / k_delta.max(1) as f64;
            report.push_str(&format!(
                "{port} {}: gateway {gw_delta}, ip -s link {k_delta}, {:.3} %\n",
                names[j],
                off * 100.0
            ));
            assert!(k_delta > 1_000 || j % 2 == 1, "too little traffic to compare:\n{report}");
        }
    }
    eprintln!("{report}");
    for line in report.lines() {
        let pct: f64 = line.rsplit(", ").next().unwrap().trim_end_matches(" %").parse().unwrap();
        assert!(pct <= 1.0, "more than 1 % apart:\n{report}");
    }
    // GRO did merge on the way in: the sockets saw fewer frames than the
    // wire (not on DPDK's AF_PACKET driver, which reads frames).
    let sp = |t: &str| metric(t, "px_gateway_super_packets_total{worker=\"0\",port=\"outer\",direction=\"rx\"}");
    let wire = |t: &str| metric(t, "px_gateway_packets_total{worker=\"0\",port=\"outer\",direction=\"rx\"}");
    let (sp_d, wire_d) = (sp(&after_gw) - sp(&before_gw), wire(&after_gw) - wire(&before_gw));
    eprintln!("outer rx: {wire_d} wire frames in {sp_d} super-packets");
    if dpdk_datapath() {
        assert_eq!(sp_d, wire_d, "DPDK reads frames, not super-packets");
    } else {
        assert!(sp_d < wire_d, "no super-packets: GRO off? {sp_d} >= {wire_d}");
    }
    let exit = gw.stop();
    exit.assert_clean();
    assert!(exit.stats["wire"]["outer"]["rx_packets"].as_u64().unwrap() > 0, "{}", exit.stats);
}

/// `px status` run in the gateway's namespace, text and `--json`, while
/// a paced transfer runs through it: both name the ports and their MTUs,
/// count wire frames with a rate, list the transfer's flow with its MSSs
/// and segment sizes (and as not offloaded), and show the configuration
/// generation, which a SIGHUP reload moves to 1. With the gateway gone,
/// `px status` exits 3 and says no gateway runs.
#[test]
fn px_status_shows_a_running_gateway_in_text_and_json() {
    use std::sync::atomic::AtomicU64;
    if !require_root_or_skip("px_status_shows_a_running_gateway_in_text_and_json") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let cfg = std::env::temp_dir().join(format!("px-status-{}.toml", std::process::id()));
    let write_cfg = |timeout: u32| {
        let text = format!(
            "[engine]\nmerge_timeout_us = {timeout}\nicmp_source_v4 = \"{ICMP_SRC_V4}\"\nicmp_source_v6 = \"{ICMP_SRC_V6}\"\n"
        );
        std::fs::write(&cfg, text).unwrap();
    };
    write_cfg(500);
    let gw = Gateway::start(&lab, &["--config", cfg.to_str().unwrap()]);
    lab.ping_both();
    let status = |args: &[&str]| px_status(&lab, args);
    let progress = AtomicU64::new(0);
    let spec = BulkSpec {
        server: sock(BNET_V4, 5481),
        flows: 1,
        bytes_per_flow: 48 << 20,
        // About 16 MB/s: still flowing while status is asked.
        pace: Pace { chunk: 16 << 10, gap: Duration::from_millis(1) },
        stall_timeout: Duration::from_secs(15),
        sha256: true,
    };
    let (text, json) = std::thread::scope(|s| {
        let t = s.spawn(|| transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), spec, &progress));
        while progress.load(std::sync::atomic::Ordering::Relaxed) < 4 << 20 {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Rates are over the last sampled second.
        std::thread::sleep(Duration::from_millis(1200));
        let (code, text, err) = status(&[]);
        assert_eq!(code, Some(0), "{text}{err}");
        let (code, json, err) = status(&["--json"]);
        assert_eq!(code, Some(0), "{json}{err}");
        assert_exact(&t.join().unwrap(), 48 << 20);
        (text, json)
    });
    eprintln!("{text}");
    assert!(text.contains(&format!("PID {}", gw.pid)), "{text}");
    assert!(text.contains("configuration generation 0"), "{text}");
    assert!(text.contains(&format!("  outer  {GW_OUTER:<15}   1500")), "{text}");
    assert!(text.contains(&format!("  inner  {GW_INNER:<15}   9000")), "{text}");
    assert!(text.contains(&format!("{BNET_V4}:5481")), "the flow is listed:\n{text}");
    assert!(text.contains("kernel fast path: off"), "{text}");
    assert!(!text.contains("WARNING: no ICMP source"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(v["pid"], gw.pid);
    assert_eq!(v["ports"][0]["role"], "outer");
    assert_eq!(v["ports"][0]["name"], GW_OUTER);
    assert_eq!(v["ports"][0]["mtu"], 1500);
    assert_eq!(v["ports"][1]["mtu"], 9000);
    assert!(v["ports"][0]["wire"]["rx_packets"].as_u64().unwrap() > 1000, "{json}");
    assert!(v["ports"][0]["rx_pps"].as_f64().unwrap() > 100.0, "no inbound rate during the transfer: {json}");
    assert_eq!(v["config"]["icmp_source_v4"], ICMP_SRC_V4);
    let flow = &v["flows"][0];
    assert_eq!(flow["inner"], format!("{BNET_V4}:5481"), "{json}");
    assert_eq!(flow["state"], "established", "{json}");
    assert!(flow["bytes_in"].as_u64().unwrap() >= 4 << 20, "{json}");
    assert_eq!(flow["largest_segment_in"], 1448, "{json}");
    assert!(flow["inner_mss"].as_u64().unwrap() > 1460, "the raised MSS: {json}");
    assert_eq!(flow["offloaded"], false, "offload is off: {json}");
    assert_eq!(v["offload"]["active"], false);
    // A reload is a new generation.
    write_cfg(800);
    gw.reload();
    gw.wait_log("px gateway: reloaded the configuration:");
    let (_, json, _) = status(&["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["config"]["generation"], 1, "{json}");
    assert_eq!(v["config"]["merge_timeout_us"], 800, "{json}");
    let exit = gw.stop();
    exit.assert_clean();
    let _ = std::fs::remove_file(&cfg);
    let (code, out, err) = status(&[]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains("no running px gateway found"), "{err}");
    let (code, out, _) = status(&["--json"]);
    assert_eq!(code, Some(3));
    assert!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["error"].is_string(), "{out}");
}

/// Issue 29 item 1: a gateway started with no ICMP source still tells a
/// b-network host that a DF datagram was too big for the outside (from
/// RFC 7600's 192.0.0.8): the host learns the 1500-byte path MTU and its
/// next large send is refused with EMSGSIZE; the start log says where
/// ICMPv4 errors come from and warns that IPv6 gets none.
#[test]
fn without_an_icmp_source_large_df_udp_from_inside_still_gets_frag_needed() {
    use std::os::fd::AsRawFd;
    if !require_root_or_skip("without_an_icmp_source_large_df_udp_from_inside_still_gets_frag_needed") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    let log = gw.wait_log("ICMPv6");
    assert!(log.contains("ICMPv4 errors (\"fragmentation needed\") come from 192.0.0.8"), "{log}");
    assert!(log.contains(" WARN px gateway: no ICMPv6 source"), "{log}");
    let b = lab.ns(lab.bnet);
    let tx = b.run(|| std::net::UdpSocket::bind(sock(BNET_V4, 6101))).unwrap().unwrap();
    set_sock_int(tx.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO).unwrap();
    tx.connect(sock(LEGACY_V4, 6101)).unwrap();
    let mut refused = None;
    for _ in 0..20 {
        match tx.send(&[7u8; 4000]) {
            Err(e) => {
                refused = Some(e);
                break;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let e = refused.expect("the host never heard that 4028 bytes were too big (a black hole)");
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    let route = b.ip(&["route", "get", LEGACY_V4]).unwrap();
    assert!(route.contains("mtu 1500"), "{route}");
    let exit = gw.stop();
    exit.assert_clean();
    assert!(exit.counter("icmp_sent") >= 1 && exit.counter("icmp_no_source") == 0, "{}", exit.stats);
    // The stats file names its reasons.
    assert!(exit.stats["drops"]["too_big_df"].as_u64() >= Some(1), "{}", exit.stats);
    assert!(exit.stats["flushes"]["shutdown"].is_u64(), "{}", exit.stats);
}

/// `px ARGS` with `TMPDIR` set to `tmp` (where `px lab up` keeps its
/// state, so a lab another user has up is not this test's), run in
/// namespace `ns` if given: (exit code, stdout, stderr).
fn px_in(ns: Option<&str>, tmp: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let px = env!("CARGO_BIN_EXE_px");
    let mut c = match ns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns, px]);
            c
        }
        None => std::process::Command::new(px),
    };
    let out = c.args(args).env("TMPDIR", tmp).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The word after `key` in `text`.
fn word_after<'t>(text: &'t str, key: &str) -> &'t str {
    let at = text.find(key).unwrap_or_else(|| panic!("no {key:?} in:\n{text}")) + key.len();
    text[at..].split_whitespace().next().unwrap()
}

/// Waits (up to 5 s) until `px status` answers in `ns`; its JSON.
fn wait_status(ns: &str, tmp: &std::path::Path) -> serde_json::Value {
    let t0 = std::time::Instant::now();
    loop {
        let (code, out, err) = px_in(Some(ns), tmp, &["status", "--json"]);
        if code == Some(0) {
            return serde_json::from_str(&out).unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "px status never answered: {out}{err}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 29 item 5: `px lab up` is the packaged service's hands-on twin.
/// Its gateway runs from a configuration file, answers `px status`, serves
/// metrics, sends ICMP errors from the configured sources (a probe from
/// inside finds 1500 by classic PMTUD, IPv4 and IPv6), F-PMTUD responders
/// answer on both hosts; `px lab down` removes everything. With
/// `--no-gateway` it prints the command that starts the gateway, and that
/// command works as printed.
#[test]
fn lab_up_is_the_hands_on_twin_of_the_service() {
    if !require_root_or_skip("lab_up_is_the_hands_on_twin_of_the_service") {
        return;
    }
    let _serial = serialize();
    let tmp = Scratch::new("lab-up");
    std::fs::create_dir_all(&tmp.0).unwrap();
    /// `px lab down` on every exit path (before the scratch directory,
    /// which holds its state, goes).
    struct Down<'a>(&'a std::path::Path);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let up = |e: std::fs::DirEntry| e.file_name().to_string_lossy().starts_with("px-lab-up-");
            if std::fs::read_dir(self.0).into_iter().flatten().flatten().any(up) {
                let _ = px_in(None, self.0, &["lab", "down"]);
            }
        }
    }
    let _down = Down(&tmp.0);
    let (code, out, err) = px_in(None, &tmp.0, &["lab", "up"]);
    assert_eq!(code, Some(0), "{out}{err}");
    eprintln!("{out}");
    let names = word_after(&out, "namespaces: legacy ");
    let line = out.lines().find(|l| l.starts_with("namespaces: ")).unwrap();
    let gw = word_after(line, ", gateway ").trim_end_matches(',').to_string();
    let bnet_ns = word_after(line, ", b-network ").to_string();
    assert!(names.starts_with("px-legacy-"), "{line}");
    assert!(out.contains(&format!("px gateway running in {gw} ")), "{out}");
    let config = word_after(&out, "gateway configuration: ").to_string();
    assert!(
        out.contains(&format!("started as: ip netns exec {gw} "))
            && out.contains(&format!("gateway --config {config}")),
        "{out}"
    );
    assert_eq!(out.matches("F-PMTUD responder (px fpmtud) in ").count(), 2, "{out}");
    let s = wait_status(&gw, &tmp.0);
    assert_eq!((s["ports"][0]["mtu"].as_u64(), s["ports"][1]["mtu"].as_u64()), (Some(1500), Some(9000)), "{s}");
    assert_eq!(s["config"]["metrics"], "127.0.0.1:9464", "{s}");
    assert_eq!(s["config"]["icmp_source_v6"], ICMP_SRC_V6, "{s}");
    let (ok, metrics) = {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &gw, "bash", "-c"])
            .arg("exec 3<>/dev/tcp/127.0.0.1/9464 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    assert!(ok && metrics.contains("px_gateway_packets_total{"), "{metrics}");
    // Classic PMTUD from inside: the gateway's "too big" reaches the host.
    for (family, target) in [("-4", LEGACY_V4), ("-6", LEGACY_V6)] {
        let (code, out, err) = px_in(Some(&bnet_ns), &tmp.0, &["probe", target, family, "--method", "icmp", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        assert_eq!((v["pmtu"].as_u64(), code), (Some(1500), Some(0)), "{family}: {out}{err}");
    }
    // F-PMTUD against the responder on the legacy host.
    let (code, out, err) = px_in(Some(&bnet_ns), &tmp.0, &["probe", LEGACY_V4, "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = px_in(None, &tmp.0, &["lab", "down"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let left = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(!left.contains(&gw) && !left.contains(&bnet_ns), "namespaces left: {left}");
    assert!(!std::path::Path::new(&config).exists(), "config file left");

    // --no-gateway: the printed command starts it.
    let (code, out, err) = px_in(None, &tmp.0, &["lab", "up", "--no-gateway"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let command = out
        .split("start it by hand with:\n  ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .unwrap_or_else(|| panic!("no command printed:\n{out}"))
        .to_string();
    let words: Vec<&str> = command.split_whitespace().collect();
    let gw = words[3].to_string();
    let child =
        std::process::Command::new(words[0]).args(&words[1..]).stderr(std::process::Stdio::null()).spawn().unwrap();
    /// The gateway this test started by hand, stopped (once) on every exit path.
    struct Stop(Option<std::process::Child>);
    impl Stop {
        fn stop(&mut self) -> Option<std::process::ExitStatus> {
            let mut c = self.0.take()?;
            // SAFETY: SIGTERM to the gateway this test started, not yet reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            c.wait().ok()
        }
    }
    impl Drop for Stop {
        fn drop(&mut self) {
            self.stop();
        }
    }
    let pid = child.id();
    let mut child = Stop(Some(child));
    let s = wait_status(&gw, &tmp.0);
    assert_eq!(s["pid"].as_u64(), Some(pid as u64), "{s}");
    assert!(child.stop().is_some_and(|st| st.success()));
    let (code, out, err) = px_in(None, &tmp.0, &["lab", "down"]);
    assert_eq!(code, Some(0), "{out}{err}");
}
