//! One module per `px` subcommand.

pub mod bench;
pub mod bench_gateway;
pub mod caravan;
pub mod fpmtud;
pub mod gateway;
pub mod generate;
pub mod lab;
pub mod lab_border;
pub mod lab_demo;
pub mod lab_exp;
pub mod lab_pmtud;
pub mod lab_quic;
pub mod lab_rr;
pub mod lab_rtt;
pub mod lab_survey;
pub mod probe;
pub mod sim;
pub mod status;
pub mod survey;

/// A gateway's early-flush counters (`counters.flush`, in the order of
/// [`px_gateway::FlushReason::ALL`]) by reason name, for `--json`.
pub(crate) fn named_flushes(counts: &[u64]) -> serde_json::Map<String, serde_json::Value> {
    px_gateway::FlushReason::ALL.iter().zip(counts).map(|(f, n)| (f.name().to_string(), (*n).into())).collect()
}

/// The same for a table: the reasons that occurred, in the JSON's key
/// order (`"psh_fin 12, timeout 3"`), or `"none"`.
pub(crate) fn early_flushes_text(counts: &[u64]) -> String {
    let seen: Vec<String> =
        named_flushes(counts).iter().filter(|(_, n)| n.as_u64() != Some(0)).map(|(k, n)| format!("{k} {n}")).collect();
    if seen.is_empty() { "none".into() } else { seen.join(", ") }
}
