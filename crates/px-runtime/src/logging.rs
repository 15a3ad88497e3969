//! Daemon logs through `tracing`: human-readable lines on stderr by
//! default (time, level, message), one JSON object per line with
//! `--log-format json` (for journald or a log shipper).
//!
//! Every log call says its level: the runtime logs with this module's
//! `error!`, `warn!` and `info!` (tracing's, with the gateway's
//! [`TARGET`]), and nothing looks at the words of a line to choose one.
//! ERROR: the gateway cannot do what it was configured to do (a start that
//! fails, a worker that died, a port it could not put back); WARN: it runs,
//! but something needs the operator (a refused reload, frames dropped on
//! receive, evicted flows, a port without carrier); INFO: what it does.
//!
//! A human line is its message alone: the periodic summary's figures are
//! fields of the event, which only `--log-format json` writes (under
//! `fields`, so a log shipper needs no parsing). Under systemd, where
//! stderr is the journal's stream (`JOURNAL_STREAM`), each human line
//! starts with its syslog priority (`<3>` for ERROR), which journald takes
//! as the entry's priority (`journalctl -p err`) and strips.

use std::io::IsTerminal;

pub use tracing::Level;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};

/// The target of the gateway's events (`"target"` of a JSON line).
pub const TARGET: &str = "px::gateway";

macro_rules! px_error {
    ($($arg:tt)+) => { ::tracing::error!(target: $crate::logging::TARGET, $($arg)+) };
}
macro_rules! px_warn {
    ($($arg:tt)+) => { ::tracing::warn!(target: $crate::logging::TARGET, $($arg)+) };
}
macro_rules! px_info {
    ($($arg:tt)+) => { ::tracing::info!(target: $crate::logging::TARGET, $($arg)+) };
}
/// An ERROR event of the gateway (`format!` arguments).
pub(crate) use px_error as error;
/// An INFO event of the gateway (`format!` arguments).
pub(crate) use px_info as info;
/// A WARN event of the gateway (`format!` arguments).
pub(crate) use px_warn as warn;

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
    let journal = stderr_is_journal();
    let _ = tracing::dispatcher::set_global_default(dispatch(
        format,
        std::io::stderr,
        std::io::stderr().is_terminal(),
        journal,
    ));
}

/// The subscriber for `format`, writing through `writer`; `journal`: each
/// human line starts with its syslog priority.
fn dispatch<W>(format: LogFormat, writer: W, ansi: bool, journal: bool) -> tracing::Dispatch
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let b = tracing_subscriber::fmt().with_writer(writer).with_max_level(tracing::Level::INFO).with_ansi(ansi);
    match format {
        LogFormat::Human => {
            let inner = tracing_subscriber::fmt::format().with_target(false).with_ansi(ansi);
            b.fmt_fields(message_only()).event_format(Priority { inner, journal }).finish().into()
        }
        LogFormat::Json => b.json().with_current_span(false).with_span_list(false).finish().into(),
    }
}

/// The human format's fields: the message alone (the figures of an event
/// are JSON's to write).
fn message_only() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    tracing_subscriber::fmt::format::debug_fn(
        |w: &mut Writer<'_>, field: &tracing::field::Field, value| {
            if field.name() == "message" { write!(w, "{value:?}") } else { Ok(()) }
        },
    )
}

/// A human line, with its syslog priority in front when the journal reads
/// it (`sd-daemon(3)`'s `<N>` prefix).
struct Priority<F> {
    inner: F,
    journal: bool,
}

impl<S, N, F> FormatEvent<S, N> for Priority<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if self.journal {
            write!(writer, "<{}>", syslog_priority(*event.metadata().level()))?;
        }
        self.inner.format_event(ctx, writer, event)
    }
}

/// syslog(3)'s priority of a level: LOG_ERR, LOG_WARNING, LOG_INFO,
/// LOG_DEBUG.
fn syslog_priority(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        _ => 7,
    }
}

/// Whether stderr is the journal's stream: systemd sets `JOURNAL_STREAM`
/// to its `device:inode` (a redirected stderr keeps the variable but not
/// the inode).
fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else { return false };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one `struct stat` into `st`, read only on success.
    if unsafe { libc::fstat(2, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, so `st` is initialised.
    let st = unsafe { st.assume_init() };
    dev.parse() == Ok(st.st_dev) && ino.parse() == Ok(st.st_ino)
}

/// Logs `text` at `level` (for callers outside this crate, whose events
/// must carry the gateway's target: `px gateway`'s start errors).
pub fn log(level: tracing::Level, text: &str) {
    match level {
        tracing::Level::ERROR => error!("{text}"),
        tracing::Level::WARN => warn!("{text}"),
        _ => info!("{text}"),
    }
}

/// Logs a summary of the gateway's counters at INFO: `prefix` and its
/// short text as the message, every figure as a field of its own
/// (`--log-format json` writes them under `fields`; the human line is the
/// message alone).
pub fn summary(prefix: &str, s: &crate::gateway::metrics::Summary) {
    let nan = |v: Option<f64>| v.unwrap_or(f64::NAN);
    info!(
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
        "{prefix}{s}"
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::gateway::metrics::{Summary, WorkerSnapshot};

    /// What the events logged by `f` come out as, in `format`.
    pub(crate) fn written_by(format: LogFormat, journal: bool, f: impl FnOnce()) -> String {
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
        let d = dispatch(format, move || buf.clone(), false, journal);
        tracing::dispatcher::with_default(&d, f);
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn formats_parse() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("human".parse::<LogFormat>(), Ok(LogFormat::Human));
        assert_eq!("xml".parse::<LogFormat>().unwrap_err().to_string(), "unknown log format \"xml\" (human or json)");
    }

    /// Three lines, one per level; the words of a line choose nothing.
    fn three_levels() {
        info!("px gateway: a line about something refused, at INFO because the call says so");
        warn!("px gateway: reload refused: `workers` cannot change while running (1 -> 2)");
        error!("px gateway: imtu: cannot read kernel table 100: Permission denied");
    }

    #[test]
    fn each_line_has_the_level_its_call_says() {
        let text = written_by(LogFormat::Human, false, three_levels);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains(" INFO px gateway: a line about something refused"), "{text}");
        assert!(lines[1].contains(" WARN px gateway: reload refused: `workers`"), "{text}");
        assert!(lines[2].contains(" ERROR px gateway: imtu: cannot read"), "{text}");
        let json = written_by(LogFormat::Json, false, three_levels);
        let levels: Vec<String> = json
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["level"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(levels, ["INFO", "WARN", "ERROR"], "{json}");
        let text = written_by(LogFormat::Human, false, || log(tracing::Level::ERROR, "px gateway: no port"));
        assert!(text.contains(" ERROR px gateway: no port"), "{text}");
    }

    #[test]
    fn journal_lines_start_with_their_syslog_priority() {
        let text = written_by(LogFormat::Human, true, three_levels);
        let prefixes: Vec<&str> = text.lines().map(|l| &l[..3]).collect();
        assert_eq!(prefixes, ["<6>", "<4>", "<3>"], "{text}");
        // Not under the journal: no prefix.
        assert!(written_by(LogFormat::Human, false, three_levels).lines().all(|l| !l.starts_with('<')));
        // This test's stderr is not the journal's stream.
        assert!(!stderr_is_journal());
    }

    #[test]
    fn json_lines_are_objects_with_level_message_and_target() {
        let text = written_by(LogFormat::Json, false, three_levels);
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[1]["fields"]["message"].as_str().unwrap().starts_with("px gateway: reload refused"), "{text}");
        assert_eq!(lines[1]["target"], TARGET);
        assert!(lines[0]["timestamp"].is_string());
    }

    /// A busy gateway's counters, every figure non-zero.
    fn busy() -> Summary {
        let mut now = WorkerSnapshot::default();
        for w in &mut now.wire {
            w.rx_packets = 6_350_123_456;
            w.tx_packets = 6_310_987_654;
        }
        now.counters.merged_in = 7_000_000_000;
        now.counters.merged_out = 1_000_000_000;
        now.counters.inner_tcp_data_out = 1000;
        now.counters.inner_tcp_full_out = 978;
        now.counters.drop[0] = 123_456;
        now.flows = 1_048_576;
        now.held_bytes = 12_345_678;
        now.socket_drops = 99_999;
        now.send_errors = 88_888;
        now.in_kernel = 4096;
        now.counters.fast_path.installed = 12_345;
        Summary::new(&now, Some((&WorkerSnapshot::default(), std::time::Duration::from_secs(10))))
    }

    /// The periodic line in the human format: short, and no key=value.
    #[test]
    fn the_human_summary_is_short_and_its_figures_are_for_json() {
        let s = busy();
        let text = written_by(LogFormat::Human, false, || summary("px gateway: ", &s));
        let line = text.trim_end();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!line.contains('='), "key=value in the human line: {line}");
        let message = line.split(" INFO ").nth(1).unwrap();
        assert!(message.len() <= 200, "{} characters: {message}", message.len());
        for part in ["outer rx 635.01M/s", "yield 0.978", "1.05M flows", "socket drops 99999"] {
            assert!(message.contains(part), "no {part:?} in {message}");
        }
    }

    /// The periodic summary in JSON: the same short message, and every
    /// figure a field of its own.
    #[test]
    fn json_summary_has_a_field_per_figure() {
        let mut now = WorkerSnapshot::default();
        now.wire[px_gateway::Port::Outer as usize].rx_packets = 3000;
        now.counters.merged_in = 7;
        let s = Summary::new(&now, Some((&WorkerSnapshot::default(), std::time::Duration::from_secs(2))));
        let text = written_by(LogFormat::Json, false, || summary("px gateway: ", &s));
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        let f = &v["fields"];
        assert_eq!(f["outer_rx_packets"], 3000, "{text}");
        assert_eq!(f["outer_rx_pps"], 1500.0, "{text}");
        assert_eq!(f["merged_in_frames"], 7, "{text}");
        assert_eq!(f["message"], format!("px gateway: {s}"), "{text}");
        assert!(f["message"].as_str().unwrap().starts_with("px gateway: outer rx 1.5k/s"), "{text}");
    }
}
