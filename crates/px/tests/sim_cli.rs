//! `px sim …` end to end: runs the built binary on small parameters and
//! checks the JSON keys issue 5 promises, the table, the SVG and the errors.

use std::path::PathBuf;
use std::process::{Command, Output};

fn px(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_px")).args(args).output().expect("px runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = px(args);
    assert!(out.status.success(), "px {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn temp_svg(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("px-sim-cli-{}-{name}.svg", std::process::id()))
}

#[test]
fn mtu_drop_json_has_one_row_per_variant_with_the_issue_keys() {
    let svg = temp_svg("mtu-drop");
    let svg_arg = svg.to_str().expect("utf-8 path");
    let v =
        json(&["sim", "mtu-drop", "--file-bytes", "200000", "--variants", "classic,3v", "--json", "--svg", svg_arg]);
    let rows = v.as_array().expect("an array");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["variant"], "Classic");
    assert_eq!(rows[1]["variant"], "Once 3V");
    for row in rows {
        for key in ["variant", "completion_s", "losses", "blog_completion_s", "blog_losses", "srtt_at_drop_s"] {
            assert!(row.get(key).is_some(), "{key} missing in {row}");
        }
        // 200 kB at 1 Mb/s takes 1.6 s of serialization at least, and the
        // MTU drop at 1 s costs losses.
        let t = row["completion_s"].as_f64().expect("completed");
        assert!(t > 1.6 && t < 30.0, "{row}");
        assert!(row["losses"].as_u64().expect("count") > 0, "{row}");
    }
    let text = std::fs::read_to_string(&svg).expect("svg written");
    let _ = std::fs::remove_file(&svg);
    assert!(text.starts_with("<svg") && text.contains("Once 3V") && text.contains("Classic"), "{text}");
}

#[test]
fn pmtud_compare_json_has_the_issue_keys_per_method() {
    let v = json(&["sim", "pmtud-compare", "--paths", "40", "--seed", "3", "--json"]);
    let sums = v.as_array().expect("an array");
    let methods: Vec<&str> = sums.iter().map(|s| s["method"].as_str().expect("label")).collect();
    assert_eq!(methods, ["F-PMTUD", "DPLPMTUD lsquic", "DPLPMTUD bisection", "ICMP PMTUD"]);
    for s in sums {
        for key in ["method", "success_rate", "exact_rate", "p50_s", "p99_s", "probes_mean", "loss_free_exact_rate"] {
            assert!(s.get(key).is_some(), "{key} missing in {s}");
        }
        // The split by path class.
        let classes: Vec<&str> =
            s["classes"].as_array().expect("classes").iter().map(|c| c["class"].as_str().expect("label")).collect();
        assert_eq!(classes, ["clean", "lossy", "black hole", "fragment filter", "IPv6"], "{s}");
        let rate = s["success_rate"].as_f64().expect("number");
        assert!((0.0..=1.0).contains(&rate), "{s}");
    }
    // F-PMTUD answers on every path (black holes included).
    assert_eq!(sums[0]["success_rate"].as_f64(), Some(1.0));
    // Deterministic: the same seed prints the same JSON.
    assert_eq!(v, json(&["sim", "pmtud-compare", "--paths", "40", "--seed", "3", "--json"]));
}

#[test]
fn mtu_benefit_json_is_an_object_with_the_ratio() {
    let v = json(&[
        "sim",
        "mtu-benefit",
        "--duration-s",
        "3",
        "--runs",
        "1",
        "--bandwidth-gbps",
        "1",
        "--loss",
        "0.001",
        "--json",
    ]);
    assert!(v.is_object(), "{v}");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["mss"], 1448);
    assert_eq!(runs[1]["mss"], 8948);
    for key in ["throughput_ratio", "growth_ratio", "params"] {
        assert!(v.get(key).is_some(), "{key} missing");
    }
    assert!(v["throughput_ratio"].as_f64().expect("number") > 1.0, "{v}");
}

#[test]
fn mtu_drop_packet_size_follows_a_smaller_path_mtu() {
    let v = json(&[
        "sim",
        "mtu-drop",
        "--mtu-before",
        "1400",
        "--mtu-after",
        "1300",
        "--file-bytes",
        "400000",
        "--variants",
        "3v",
        "--json",
    ]);
    // Discovery reaches the 1400-byte path (the default 1468 would not fit),
    // the drop costs packets, and the PLPMTU ends at or below 1300.
    assert_eq!(v[0]["plpmtu_at_drop"], 1400);
    assert!(v[0]["losses"].as_u64().expect("count") > 0, "{v}");
    let after = v[0]["final_plpmtu"].as_u64().expect("number");
    assert!((1200..=1300).contains(&after), "{v}");
}

#[test]
fn tables_show_sim_and_seed_figures_side_by_side() {
    let out = px(&["sim", "mtu-drop", "--file-bytes", "150000", "--variants", "4v"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sim / blog") && text.contains("Once 4V") && text.contains("/ 10.7"), "{text}");
    let out = px(&["sim", "mtu-benefit", "--duration-s", "2", "--runs", "1", "--bandwidth-gbps", "1"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("paper: 2.5x"));
}

#[test]
fn out_of_range_parameters_are_refused_with_the_flag_named() {
    for (args, flag) in [
        (vec!["sim", "mtu-drop", "--mtu-after", "1600"], "--mtu-after"),
        (vec!["sim", "mtu-drop", "--max-packet", "1500", "--mtu-before", "1400"], "--max-packet"),
        (vec!["sim", "mtu-drop", "--loss", "0.7"], "--loss"),
        (vec!["sim", "mtu-drop", "--bandwidth-mbps", "nan"], "--bandwidth"),
        (vec!["sim", "mtu-drop", "--variants", "5v"], "--variants"),
        (vec!["sim", "pmtud-compare", "--paths", "0"], "--paths"),
        (vec!["sim", "pmtud-compare", "--min-hops", "9", "--max-hops", "3"], "--min-hops"),
        (vec!["sim", "pmtud-compare", "--black-hole-share", "1.5"], "--black-hole-share"),
        (vec!["sim", "mtu-benefit", "--mss", "100"], "--mss"),
    ] {
        let out = px(&args);
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
    }
}

/// Issue 29 item 8: durations take units everywhere (`1s` was refused
/// with `invalid float literal`), loss is a fraction or a percentage, and
/// the old spellings (bare numbers in the old names' units) still work.
#[test]
fn durations_take_units_and_old_spellings_still_work() {
    let run = |args: &[&str]| {
        let out = px(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let base = ["sim", "mtu-benefit", "--json", "--runs", "1", "--bandwidth-gbps", "1"];
    let new: Vec<&str> =
        base.iter().copied().chain(["--duration", "2s", "--delay", "10ms", "--loss", "0.01%"]).collect();
    let old: Vec<&str> =
        base.iter().copied().chain(["--duration-s", "2", "--delay-ms", "10", "--loss", "0.0001"]).collect();
    assert_eq!(run(&new), run(&old), "the same run, spelled two ways");
    let out = px(&["sim", "mtu-benefit", "--duration", "2 fortnights"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"), "{out:?}");
}

/// Issue 29 item 9: the plots a reader misread. pmtud-compare's time
/// panels are on log axes; mtu-drop's RTT lines are told apart by dashes
/// where they coincide.
#[test]
fn plots_use_log_axes_and_dashes_where_a_reader_needs_them() {
    let svg = temp_svg("pmtud-compare-log");
    let out = px(&["sim", "pmtud-compare", "--paths", "40", "--seed", "3", "--svg", svg.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    assert!(text.contains("seconds (log scale)") && text.contains("round trips (log scale)"), "{text}");
    let svg = temp_svg("mtu-drop-dashes");
    let out = px(&["sim", "mtu-drop", "--file-bytes", "200000", "--svg", svg.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    for dash in ["none", "8 4", "2 3", "10 3 2 3"] {
        assert!(text.contains(&format!("stroke-dasharray=\"{dash}\"")), "no line dashed {dash}");
    }
}

/// Issue 38 item 5: rate flags are named alike (`--bandwidth`) and take
/// units; the old names keep their bare unit (Mb/s for mtu-drop, Gb/s for
/// mtu-benefit).
#[test]
fn rates_take_units_under_one_name() {
    let table = |args: &[&str]| {
        let out = px(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().to_string()
    };
    let base = ["sim", "mtu-drop", "--file-bytes", "20000", "--variants", "classic"];
    let with = |extra: &[&'static str]| [&base[..], extra].concat();
    let old = table(&with(&["--bandwidth-mbps", "2"]));
    assert!(old.contains("over 2 Mb/s"), "{old}");
    assert_eq!(table(&with(&["--bandwidth", "2Mbps"])), old);
    assert_eq!(table(&with(&["--bandwidth", "2000kbps"])), old);
    let out = px(&["sim", "mtu-benefit", "--bandwidth", "5 furlongs"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"), "{out:?}");
}
