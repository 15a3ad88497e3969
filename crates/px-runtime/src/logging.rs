//! Daemon logs through `tracing`: human-readable lines on stderr by
//! default (time, level, message), one JSON object per line with
//! `--log-format json` (for journald or a log shipper). The messages are
//! the runtime's log lines as they are: `px gateway: inner ...` at start,
//! the periodic summary, `... stopped; flushed everything held. ...` at
//! exit, in both formats.

use std::io::IsTerminal;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `2026-01-01T00:00:00.000000Z  INFO px gateway: ...`
    #[default]
    Human,
    /// `{"timestamp":"...","level":"INFO","fields":{"message":"px gateway: ..."},"target":"px::gateway"}`
    Json,
}

/// A log format name other than `human` or `json` (the name given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown log format {0:?} (human or json)")]
pub struct UnknownLogFormat(pub String);

impl std::str::FromStr for LogFormat {
    type Err = UnknownLogFormat;
    fn from_str(s: &str) -> Result<Self, UnknownLogFormat> {
        match s {
            "human" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            other => Err(UnknownLogFormat(other.to_owned())),
        }
    }
}

/// Installs the process' subscriber, writing to stderr (INFO and above).
/// A second call changes nothing.
pub fn init(format: LogFormat) {
    let _ = tracing::dispatcher::set_global_default(dispatch(format, std::io::stderr, std::io::stderr().is_terminal()));
}

/// The subscriber for `format`, writing through `writer`.
fn dispatch<W>(format: LogFormat, writer: W, ansi: bool) -> tracing::Dispatch
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let b = tracing_subscriber::fmt().with_writer(writer).with_max_level(tracing::Level::INFO).with_ansi(ansi);
    match format {
        LogFormat::Human => b.with_target(false).finish().into(),
        LogFormat::Json => b.json().with_current_span(false).with_span_list(false).finish().into(),
    }
}

/// Logs one of the runtime's lines: refusals and failures as warnings,
/// the rest as information.
pub fn line(text: &str) {
    if is_warning(text) {
        tracing::warn!(target: "px::gateway", "{text}");
    } else {
        tracing::info!(target: "px::gateway", "{text}");
    }
}

/// Logs the gateway's periodic summary: its text as the message, and
/// every figure as a field of its own (`--log-format json` writes them
/// under `fields`, so a log shipper needs no parsing).
pub fn summary(s: &crate::gateway::metrics::Summary) {
    let nan = |v: Option<f64>| v.unwrap_or(f64::NAN);
    tracing::info!(
        target: "px::gateway",
        outer_rx_packets = s.outer_rx_packets,
        outer_tx_packets = s.outer_tx_packets,
        inner_rx_packets = s.inner_rx_packets,
        inner_tx_packets = s.inner_tx_packets,
        outer_rx_pps = nan(s.outer_rx_pps),
        outer_tx_pps = nan(s.outer_tx_pps),
        inner_rx_pps = nan(s.inner_rx_pps),
        inner_tx_pps = nan(s.inner_tx_pps),
        outer_rx_super_packets = s.outer_rx_super_packets,
        inner_rx_super_packets = s.inner_rx_super_packets,
        merged_in_frames = s.merged_in_frames,
        merged_out_segments = s.merged_out_segments,
        conversion_yield = nan(s.conversion_yield),
        split_in = s.split_in,
        split_out = s.split_out,
        gso_out = s.gso_out,
        mss_raised = s.mss_raised,
        mss_clamped = s.mss_clamped,
        caravans_built = s.caravans_built,
        caravans_opened = s.caravans_opened,
        flows = s.flows as u64,
        held_bytes = s.held_bytes as u64,
        drops = s.drops,
        socket_drops = s.socket_drops,
        send_errors = s.send_errors,
        fast_path_flows = s.fast_path.as_ref().map_or(0, |f| f.flows as u64),
        fast_path_installed = s.fast_path.as_ref().map_or(0, |f| f.installed),
        fast_path_passed_on = s.fast_path.as_ref().map_or(0, |f| f.passed_on),
        fast_path_backlog = s.fast_path.as_ref().map_or(0, |f| f.backlog),
        "px gateway: {s}"
    );
}

fn is_warning(text: &str) -> bool {
    text.contains("refused") || text.contains("px gateway: restoring") || text.contains("WARNING")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_and_refusals_warn() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("human".parse::<LogFormat>(), Ok(LogFormat::Human));
        assert_eq!("xml".parse::<LogFormat>().unwrap_err().to_string(), "unknown log format \"xml\" (human or json)");
        assert!(is_warning("px gateway: reload refused: `workers` cannot change"));
        assert!(!is_warning("px gateway: inner a (iMTU 9000) <-> outer b"));
    }

    /// What a format writes for two of the gateway's lines.
    fn written(format: LogFormat) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let d = dispatch(format, move || buf.clone(), false);
        tracing::dispatcher::with_default(&d, || {
            line("px gateway: inner px-gwi (iMTU 9000) <-> outer px-gwo (eMTU 1500), 1 worker(s)");
            line("px gateway: reload refused: `workers` cannot change while running (1 -> 2)");
        });
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn human_lines_keep_the_text_the_tests_grep() {
        let text = written(LogFormat::Human);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains(" INFO px gateway: inner px-gwi (iMTU 9000) <-> outer px-gwo"), "{text}");
        assert!(lines[1].contains(" WARN px gateway: reload refused: `workers`"), "{text}");
    }

    #[test]
    fn json_lines_are_objects_with_level_and_message() {
        let text = written(LogFormat::Json);
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["level"], "INFO");
        assert!(lines[0]["fields"]["message"].as_str().unwrap().starts_with("px gateway: inner px-gwi"), "{text}");
        assert_eq!(lines[1]["level"], "WARN");
        assert!(lines[0]["timestamp"].is_string());
    }

    /// The periodic summary in JSON: its figures are fields of their own.
    #[test]
    fn json_summary_has_a_field_per_figure() {
        use crate::gateway::metrics::{Summary, WorkerSnapshot};
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let mut now = WorkerSnapshot::default();
        now.wire[px_gateway::Port::Outer as usize].rx_packets = 3000;
        now.counters.merged_in = 7;
        let s = Summary::new(&now, Some((&WorkerSnapshot::default(), std::time::Duration::from_secs(2))));
        let d = dispatch(LogFormat::Json, move || buf.clone(), false);
        tracing::dispatcher::with_default(&d, || summary(&s));
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        let f = &v["fields"];
        assert_eq!(f["outer_rx_packets"], 3000, "{text}");
        assert_eq!(f["outer_rx_pps"], 1500.0, "{text}");
        assert_eq!(f["merged_in_frames"], 7, "{text}");
        assert!(f["message"].as_str().unwrap().starts_with("px gateway: wire pkts: outer rx 3000 (1.5k/s)"), "{text}");
    }
}
