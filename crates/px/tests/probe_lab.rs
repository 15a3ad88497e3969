//! Root integration tests of `px probe` and `px fpmtud` on real lab paths
//! (px-lab's `standard_paths`): the exact path MTU on every path, `auto`
//! (parallel probing) in at most 3 round trips, F-PMTUD alone exact where
//! fragments pass, DPLPMTUD alone exact everywhere, the
//! classic ICMP method failing on black holes, and a responder that never
//! sent more bytes than it received. Skipped with a message when not root.

use std::process::{Command, Stdio};
use std::time::Duration;

use px_lab::pmtud::{PathSpec, PmtudLab, lossy_path, standard_paths};
use px_lab::{LabChild, require_root_or_skip};
use px_pmtud::fpmtud::wire::{ProbeKind, ProbeRepr, Reply, parse_reply};

const PX: &str = env!("CARGO_BIN_EXE_px");

fn spec(name: &str) -> PathSpec {
    standard_paths().into_iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no path {name}"))
}

/// `px probe` in the prober's namespace; its JSON and exit code.
fn probe(lab: &PmtudLab, method: &str) -> (serde_json::Value, Option<i32>) {
    let target = lab.target().to_string();
    let out = lab
        .prober_ns()
        .command(PX)
        .args(["probe", &target, "--method", method, "--json", "--timeout", "20s"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null);
    (v, out.status.code())
}

/// Starts `px fpmtud --json-stats` in the responder's namespace and waits
/// until its port is bound.
fn start_responder(lab: &PmtudLab, extra: &[&str]) -> LabChild {
    let mut cmd = lab.responder_ns().command(PX);
    cmd.args(["fpmtud", "--json-stats", "--rate", "1000", "--burst", "1000"]).args(extra).stdout(Stdio::piped());
    let child = LabChild::spawn(&mut cmd).unwrap();
    assert!(lab.wait_responder_listening(Duration::from_secs(5)).unwrap(), "px fpmtud did not bind its port");
    child
}

/// Stops the responder with SIGTERM; its exit code and counters.
fn stop_responder(child: LabChild) -> (Option<i32>, serde_json::Value) {
    let pid = child.id().unwrap();
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    (out.status.code(), serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null))
}

/// Builds `name`, checks every expectation, tears down. `fragments_pass`:
/// an IPv4 path without a fragment filter (F-PMTUD alone answers).
fn check_path(name: &str, fragments_pass: bool, icmp_answers: bool) {
    if !require_root_or_skip(name) {
        return;
    }
    let spec = spec(name);
    let truth = u64::from(spec.true_pmtu());
    let lab = PmtudLab::build(&spec).unwrap();
    let responder = start_responder(&lab, &[]);
    lab.warm_up().unwrap();

    let (auto, code) = probe(&lab, "auto");
    assert_eq!(code, Some(0), "{name}: {auto}");
    assert_eq!(auto["pmtu"].as_u64(), Some(truth), "{name}: auto {auto}");
    assert_eq!(auto["exact"], true, "{name}: {auto}");
    assert!(auto["method"].as_str().unwrap().ends_with("parallel"), "{name}: {auto}");
    // Issue 14's target: at most 3 round trips on every path, and no timer
    // on a loss-free path (each round closed by its control probe).
    assert!(auto["round_trips"].as_u64().unwrap() <= 3, "{name}: {auto}");
    if fragments_pass {
        // F-PMTUD alone, as the report ran it.
        lab.forget_learned_pmtu().unwrap();
        let (f, code) = probe(&lab, "fpmtud");
        assert_eq!((f["pmtu"].as_u64(), f["exact"].as_bool(), code), (Some(truth), Some(true), Some(0)), "{name}: {f}");
        assert_eq!(f["pmtu_high"].as_u64(), Some(truth), "{name}: {f}");
    }

    lab.forget_learned_pmtu().unwrap();
    let (d, code) = probe(&lab, "dplpmtud");
    assert_eq!((d["pmtu"].as_u64(), code), (Some(truth), Some(0)), "{name}: dplpmtud {d}");

    lab.forget_learned_pmtu().unwrap();
    let (i, code) = probe(&lab, "icmp");
    if icmp_answers {
        assert_eq!((i["pmtu"].as_u64(), code), (Some(truth), Some(0)), "{name}: icmp {i}");
    } else {
        // A black hole: no ICMP comes back, classic PMTUD has no answer.
        assert_eq!((i["pmtu"].is_null(), code), (true, Some(3)), "{name}: icmp {i}");
    }

    let (code, stats) = stop_responder(responder);
    assert_eq!(code, Some(0), "responder exit: {stats}");
    let sent = stats["ip_bytes_sent"].as_u64().unwrap();
    let received = stats["ip_bytes_received"].as_u64().unwrap();
    assert!(stats["replies"].as_u64().unwrap() > 0, "{stats}");
    assert!(sent <= received, "{name}: responder sent {sent} bytes for {received} received");
    assert_eq!(stats["send_errors"], 0, "{stats}");
}

#[test]
fn probe_chain_9000_1500_1400() {
    check_path("chain-9000-1500-1400", true, true);
}

#[test]
fn probe_chain_9000_4000_1280() {
    check_path("chain-9000-4000-1280", true, true);
}

#[test]
fn probe_ethernet_1500() {
    check_path("ethernet-1500", true, true);
}

#[test]
fn probe_pppoe_1500_1492() {
    check_path("pppoe-1500-1492", true, true);
}

#[test]
fn probe_icmp_black_hole() {
    check_path("blackhole-9000-1500", true, false);
}

#[test]
fn probe_fragment_filter() {
    check_path("fragfilter-9000-1500", false, true);
}

#[test]
fn probe_10ms_rtt() {
    check_path("rtt10ms-9000-1500-1400", true, true);
}

#[test]
fn probe_ipv6_black_hole_20ms_away() {
    check_path("ipv6-blackhole-rtt20ms-9000-1500", false, false);
}

#[test]
fn probe_odd_mtu_between_routers() {
    check_path("odd-1500-1499-1500", true, true);
}

#[test]
fn probe_odd_mtu_1497_between_routers() {
    check_path("odd-1500-1497-1500", true, true);
}

#[test]
fn probe_1280_between_routers() {
    check_path("mid-1500-1280-1500", true, true);
}

#[test]
fn probe_68_byte_steps() {
    check_path("steps68-1500-1432-1364-1296", true, true);
}

#[test]
fn probe_ipv6() {
    check_path("ipv6-9000-1500-1400", false, true);
}

#[test]
fn probe_ipv6_black_hole() {
    check_path("ipv6-blackhole-9000-1500", false, false);
}

/// The responder answers the legacy format of the paper authors' tool with
/// the 4-byte largest IP length, over a fragmenting path, and `px probe
/// --legacy` finds the exact path MTU through it.
#[test]
fn legacy_probe_over_fragmenting_path() {
    if !require_root_or_skip("legacy_probe_over_fragmenting_path") {
        return;
    }
    let lab = PmtudLab::build(&spec("chain-9000-1500-1400")).unwrap();
    let responder = start_responder(&lab, &[]);
    lab.warm_up().unwrap();
    let target = lab.target().to_string();
    // Legacy probes ("FPMT" + padding) get legacy 4-byte answers, which
    // the prober accepts only in --legacy mode and still refines.
    let out = lab
        .prober_ns()
        .command(PX)
        .args(["probe", &target, "--method", "fpmtud", "--legacy", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pmtu"].as_u64(), Some(1400), "{v}");
    let (_, stats) = stop_responder(responder);
    assert!(stats["legacy_probes"].as_u64().unwrap() >= 1, "{stats}");
    // Sanity: nothing is left of the lab after the drop.
    let names: Vec<String> = vec![lab.prober_ns().name().to_owned()];
    drop(lab);
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(names.iter().all(|n| !left.contains(n.as_str())), "{left}");
}

/// Interop with the paper authors' reference destination, as it behaves
/// on the wire (`px fpmtud --legacy-late-bind`: binds its port only after
/// it saw the first probe, answers 4 bytes without a nonce): on first
/// contact the kernel's ICMP "port unreachable" comes just before the
/// answer. `px probe --legacy` waits for the answer; `auto` (extended
/// probes) uses the legacy answer and says it is unauthenticated.
#[test]
fn reference_like_responder_that_binds_late() {
    if !require_root_or_skip("reference_like_responder_that_binds_late") {
        return;
    }
    let lab = PmtudLab::build(&spec("chain-9000-1500-1400")).unwrap();
    lab.warm_up().unwrap();
    let target = lab.target().to_string();
    for args in [&["--method", "fpmtud", "--legacy"][..], &["--method", "auto"]] {
        // A fresh destination each time: the first contact is the race.
        let mut cmd = lab.responder_ns().command(PX);
        cmd.args(["fpmtud", "--legacy-late-bind", "--json-stats"]).stdout(Stdio::piped());
        let responder = LabChild::spawn(&mut cmd).unwrap();
        // Its packet socket opens; the port stays unbound.
        std::thread::sleep(Duration::from_millis(500));
        lab.forget_learned_pmtu().unwrap();
        let out = lab
            .prober_ns()
            .command(PX)
            .args(["probe", &target, "--json", "--timeout", "5s"])
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {v}");
        assert_eq!((v["pmtu"].as_u64(), v["exact"].as_bool()), (Some(1400), Some(true)), "{args:?}: {v}");
        assert_eq!(v["authenticated"], false, "{args:?}: {v}");
        assert!(v["note"].as_str().unwrap().contains("unauthenticated"), "{args:?}: {v}");
        let (code, stats) = stop_responder(responder);
        assert_eq!(code, Some(0), "{stats}");
        assert!(stats["replies"].as_u64().unwrap() >= 2, "{stats}");
    }
}

/// With `--packet-socket` the responder sees every fragment (root) and
/// reports them all; the answer stays exact and within the byte budget.
#[test]
fn packet_socket_responder_reports_every_fragment() {
    if !require_root_or_skip("packet_socket_responder_reports_every_fragment") {
        return;
    }
    let lab = PmtudLab::build(&spec("chain-9000-4000-1280")).unwrap();
    let responder = start_responder(&lab, &["--packet-socket"]);
    lab.warm_up().unwrap();
    let (v, code) = probe(&lab, "fpmtud");
    assert_eq!((v["pmtu"].as_u64(), code), (Some(1280), Some(0)), "{v}");

    // A hand-made round-1 probe of 9000 bytes, DF clear: the report must
    // list fragments that tile the 8980 bytes after the IP header exactly,
    // none larger than the path MTU, the largest equal to it minus the
    // alignment slack (1276 = 20 + 8 * 157).
    let target = std::net::SocketAddr::new(lab.target(), 9999);
    let report = lab
        .prober_ns()
        .run(move || {
            let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            let off: libc::c_int = libc::IP_PMTUDISC_INTERFACE;
            // SAFETY: an int option on a live socket.
            let r = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&sock),
                    libc::IPPROTO_IP,
                    libc::IP_MTU_DISCOVER,
                    (&raw const off).cast(),
                    4,
                )
            };
            assert_eq!(r, 0);
            sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut p = vec![0u8; 9000 - 28];
            ProbeRepr { kind: ProbeKind::Probe, nonce: 77, probe_id: 1, ip_len: 9000 }.emit(&mut p).unwrap();
            sock.send_to(&p, target).unwrap();
            let mut buf = [0u8; 65536];
            let n = sock.recv(&mut buf).unwrap();
            buf[..n].to_vec()
        })
        .unwrap();
    let Reply::Report(r) = parse_reply(&report).unwrap() else { panic!("legacy reply") };
    assert_eq!((r.nonce, r.probe_id, r.fragmented, r.largest_ip_len), (77, 1, true, 1276), "{r:?}");
    let mut recs: Vec<_> = r.fragments.iter().collect();
    assert!(!r.truncated && recs.len() >= 8, "{recs:?}");
    recs.sort_by_key(|f| f.offset);
    let mut next = 0u32;
    for f in &recs {
        assert_eq!(u32::from(f.offset), next, "gap or overlap: {recs:?}");
        assert!(f.ip_len <= 1280);
        next += u32::from(f.ip_len) - 20;
    }
    assert_eq!(next, 8980, "{recs:?}");
    assert!(!recs.last().unwrap().more_fragments && recs[..recs.len() - 1].iter().all(|f| f.more_fragments));

    let (code, stats) = stop_responder(responder);
    assert_eq!(code, Some(0), "{stats}");
    // Both round-1 probes arrived in fragments, all recorded.
    assert!(stats["fragment_reports"].as_u64().unwrap() >= 2, "{stats}");
    assert!(stats["ip_bytes_sent"].as_u64().unwrap() <= stats["ip_bytes_received"].as_u64().unwrap(), "{stats}");
}

/// Under 5 % random loss each way on the 1500-byte link (seeded), every
/// answer `px probe` gives is a size the path carried (never above the
/// true path MTU: F-PMTUD reports fragments that crossed it, DPLPMTUD only
/// keeps acknowledged sizes), and most runs are still exact.
#[test]
fn random_loss_never_overestimates() {
    if !require_root_or_skip("random_loss_never_overestimates") {
        return;
    }
    let spec = lossy_path(0.05, 7);
    let truth = u64::from(spec.true_pmtu());
    let lab = PmtudLab::build(&spec).unwrap();
    let responder = start_responder(&lab, &[]);
    lab.warm_up().unwrap();
    let mut exact = 0;
    let runs = 12;
    let mut seen = Vec::new();
    for _ in 0..runs {
        let (v, _) = probe(&lab, "auto");
        if let Some(p) = v["pmtu"].as_u64() {
            assert!(p <= truth, "overestimate: {v}");
            exact += usize::from(p == truth);
        }
        seen.push(v["pmtu"].as_u64());
    }
    eprintln!("random_loss_never_overestimates: answers under 5 % loss: {seen:?}");
    assert!(exact * 3 >= runs * 2, "only {exact}/{runs} exact: {seen:?}");
    let (_, stats) = stop_responder(responder);
    assert!(stats["ip_bytes_sent"].as_u64().unwrap() <= stats["ip_bytes_received"].as_u64().unwrap(), "{stats}");
}

/// `px lab pmtud` end to end on one path, each tool run twice: every tool
/// that answers is exact in both runs, reported by its median time with
/// both runs' times, and tracepath needs at least as many round trips as
/// `px probe` (auto), which takes one here.
#[test]
fn lab_pmtud_repeats_every_tool_and_reports_the_median() {
    if !require_root_or_skip("lab_pmtud_repeats_every_tool_and_reports_the_median") {
        return;
    }
    let out = Command::new(PX)
        .args(["lab", "pmtud", "--only", "ethernet-1500", "--repeat", "2", "--json"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "px lab pmtud: {:?}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    let row = &rows[0];
    assert_eq!(row["true_pmtu"], 1500, "{row}");
    for tool in ["px_auto", "px_fpmtud", "px_dplpmtud", "px_icmp", "tracepath", "scamper"] {
        let t = &row[tool];
        let runs: Vec<f64> = t["runs_seconds"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        if tool.starts_with("px_") || tool == "tracepath" {
            assert_eq!(t["exact"], true, "{tool}: {t}");
        }
        if t["exact"] == true {
            assert_eq!(runs.len(), 2, "{tool}: {t}");
            let (lo, hi) = (runs[0].min(runs[1]), runs[0].max(runs[1]));
            let s = t["seconds"].as_f64().unwrap();
            assert!(s == lo || s == hi, "{tool}: the median of two runs is one of them: {t}");
        }
    }
    assert_eq!(row["px_auto"]["round_trips"], 1, "{row}");
    assert!(row["tracepath"]["round_trips"].as_u64() >= row["px_auto"]["round_trips"].as_u64(), "{row}");
}

/// Issue 29 item 7, in a namespace of its own (loopback only): a probe
/// capped by `--max-size` below the link's MTU reports a floor, not an
/// exact path MTU, and the link's real MTU; an unreachable target is
/// named in the error, and `--json` prints it as an object; the responder
/// names a `--bind` address it cannot use.
#[test]
fn probe_reports_a_capped_size_as_a_floor_and_names_its_target() {
    if !px_lab::require_root_or_skip("probe_reports_a_capped_size_as_a_floor_and_names_its_target") {
        return;
    }
    let ns = px_lab::Netns::new("probecap").unwrap();
    let px = env!("CARGO_BIN_EXE_px");
    let mut responder = ns
        .command(px)
        .args(["fpmtud", "--bind", "127.0.0.1"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = ns.command(px).args(["probe", "127.0.0.1", "--max-size", "1000", "--json"]).output().unwrap();
    // SAFETY: SIGTERM to the responder this test started, not yet reaped.
    unsafe { libc::kill(responder.id() as i32, libc::SIGTERM) };
    let _ = responder.wait();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(v["pmtu"], 1000, "{v}");
    assert_eq!(v["exact"], false, "a floor, not the path MTU: {v}");
    assert!(v["link_mtu"].as_u64().unwrap() > 1000, "the link's own MTU: {v}");
    let out = ns.command(px).args(["probe", "203.0.113.77", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert!(v["error"].as_str().unwrap().contains("203.0.113.77:9999"), "{v}");
    let out = ns.command(px).args(["fpmtud", "--bind", "198.51.100.9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("198.51.100.9:9999") && !err.contains("listening"), "{err}");
}
