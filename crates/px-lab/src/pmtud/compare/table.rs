//! Rendering the comparison: the JSON of each [`Row`] and the table `px lab
//! pmtud` prints. A cell reads `PMTU TIME ROUND-TRIPS PACKETS`, `!` after a
//! wrong answer, `--` for none and `>` for a run killed at its timeout.

use super::{Row, TOOLS, ToolRun};

impl Row {
    /// The row's JSON object in `px lab pmtud --json`: per tool its answer,
    /// times, packets and round trips.
    pub fn json(&self) -> serde_json::Value {
        let r = self;
        let mut o = serde_json::Map::new();
        o.insert("topology".into(), r.topology.clone().into());
        o.insert("true_pmtu".into(), r.true_pmtu.into());
        for (name, t) in &r.tools {
            let answered = t.pmtu.is_some();
            o.insert(
                (*name).to_owned(),
                serde_json::json!({
                    "pmtu": t.pmtu,
                    "seconds": answered.then_some(t.seconds),
                    "probes": answered.then_some(t.packets),
                    "exact": t.pmtu == Some(r.true_pmtu),
                    "elapsed_seconds": t.seconds,
                    "packets_sent": t.packets,
                    "internal_seconds": t.internal_seconds,
                    "round_trips": t.round_trips,
                    "note": t.note,
                    "runs_seconds": t.runs_seconds,
                }),
            );
        }
        serde_json::Value::Object(o)
    }
}

fn cell(t: &ToolRun, truth: u32) -> String {
    match t.pmtu {
        Some(p) => format!(
            "{p}{} {} {}{}p",
            if p == truth { "" } else { "!" },
            secs(t.seconds),
            t.round_trips.map_or(String::new(), |n| format!("{n}rt ")),
            t.packets
        ),
        None if t.note == "timed out" => format!("-- >{}", secs(t.seconds)),
        None => format!("-- {} {}p", secs(t.seconds), t.packets),
    }
}

fn secs(s: f64) -> String {
    if s < 1.0 { format!("{:.1}ms", s * 1e3) } else { format!("{s:.1}s") }
}

/// The table of `px lab pmtud`: each tool's cell per path, then px probe
/// against the fastest other exact tool and against scamper.
pub fn table(rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Path MTU discovery in the lab: answer, wall time of the process (median of the runs), round trips (rt),\n\
         packets the prober sent ('!' = wrong answer in some run, '--' = no answer; '>' = killed at the timeout).\n\
         Offloads: veth defaults.\n\
         Round trips: px probe's own count; tracepath and scamper send one probe at a time, so their probes.\n"
    );
    let _ = write!(s, "{:<34}{:>5}", "topology", "true");
    for t in TOOLS {
        let _ = write!(s, "  {t:<24}");
    }
    s.push('\n');
    for r in rows {
        let _ = write!(s, "{:<34}{:>5}", r.topology, r.true_pmtu);
        for (_, t) in &r.tools {
            let _ = write!(s, "  {:<24}", cell(t, r.true_pmtu));
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "\npx probe (auto) against the fastest other tool with the exact answer (wall time; 'ok' within 1 ms or 10 %):"
    );
    for r in rows {
        let _ = writeln!(s, "  {:<34} {}", r.topology, versus_fastest(r));
    }
    let _ = writeln!(s, "\nSpeed-up of px probe (auto) over scamper where both found the exact path MTU:");
    for r in rows {
        let get = |n: &str| r.tools.iter().find(|(k, _)| *k == n).map(|(_, t)| t);
        let (Some(px), Some(sc)) = (get("px_auto"), get("scamper")) else { continue };
        if px.pmtu == Some(r.true_pmtu) && sc.pmtu == Some(r.true_pmtu) {
            let internal = px.internal_seconds.map_or(String::new(), |i| {
                format!(", {:.0}x on px's own measurement time ({})", sc.seconds / i.max(1e-9), secs(i))
            });
            let _ = writeln!(s, "  {:<26} {:.0}x wall time{internal}", r.topology, sc.seconds / px.seconds.max(1e-9));
        }
    }
    s
}

/// px probe (auto)'s wall time against the fastest other tool that found
/// the exact path MTU on the path.
fn versus_fastest(r: &Row) -> String {
    let exact = |t: &ToolRun| t.pmtu == Some(r.true_pmtu);
    let Some(px) = r.tools.iter().find(|(k, _)| *k == "px_auto").map(|(_, t)| t) else { return "-".into() };
    let fastest =
        r.tools.iter().filter(|(k, t)| *k != "px_auto" && exact(t)).min_by(|a, b| a.1.seconds.total_cmp(&b.1.seconds));
    match (exact(px), fastest) {
        (false, _) => "px auto not exact".into(),
        (true, None) => format!("{} (no other tool exact)", secs(px.seconds)),
        (true, Some((name, t))) => {
            let ok = px.seconds <= t.seconds + 0.001 || px.seconds <= t.seconds * 1.1;
            format!("{} vs {name} {}: {}", secs(px.seconds), secs(t.seconds), if ok { "ok" } else { "SLOWER" })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmtud::compare::parse_px;

    #[test]
    fn px_json_and_table() {
        let out = r#"{"exact":true,"link_mtu":9000,"method":"fpmtud","note":"x","pmtu":1400,"probes":9,"round_trips":2,"seconds":0.0012,"target":"198.51.100.34:9999"}"#;
        let r = parse_px(out, 0.005, 9);
        assert_eq!(r.round_trips, Some(2));
        assert_eq!((r.pmtu, r.internal_seconds, r.note.as_str()), (Some(1400), Some(0.0012), "fpmtud"));
        assert_eq!(parse_px("", 0.1, 0).pmtu, None);
        let sc = ToolRun {
            pmtu: Some(1400),
            seconds: 0.5,
            packets: 40,
            internal_seconds: None,
            round_trips: Some(40),
            note: String::new(),
            runs_seconds: vec![0.5, 0.6, 0.4],
        };
        let none = ToolRun {
            pmtu: None,
            seconds: 10.0,
            packets: 30,
            internal_seconds: None,
            round_trips: Some(30),
            note: "timed out".into(),
            runs_seconds: vec![10.0],
        };
        let row = Row {
            topology: "t".into(),
            true_pmtu: 1400,
            tools: vec![("px_auto", r.clone()), ("tracepath", none), ("scamper", sc)],
        };
        let j = row.json();
        assert_eq!(j["px_auto"]["pmtu"], 1400);
        assert_eq!(j["px_auto"]["probes"], 9);
        assert!(j["tracepath"]["pmtu"].is_null() && j["tracepath"]["seconds"].is_null());
        assert_eq!(j["tracepath"]["elapsed_seconds"], 10.0);
        assert_eq!(j["scamper"]["runs_seconds"], serde_json::json!([0.5, 0.6, 0.4]));
        assert_eq!((j["px_auto"]["round_trips"].as_u64(), j["scamper"]["round_trips"].as_u64()), (Some(2), Some(40)));
        let t = table(&[row]);
        assert!(t.contains("1400 5.0ms 2rt 9p"), "{t}");
        assert!(t.contains("5.0ms vs scamper 500.0ms: ok"), "{t}");
        assert!(t.contains("-- >10.0s"), "{t}");
        assert!(t.contains("100x wall time"), "{t}");
    }
}
