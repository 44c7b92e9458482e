//! Output: human narration on stdout as it happens, or one JSON document at
//! the end (`--json`). Progress goes to stderr in both modes.

use std::io::Write;
use std::sync::Mutex;

use serde_json::{Map, Value};

/// Collects a run's narration (human) and structured results (JSON).
pub struct Report {
    show: bool,
    progress: bool,
    steps: Vec<Value>,
    cur: Option<Map<String, Value>>,
    n: u32,
    keep_lines: bool,
}

impl Report {
    /// `json`: print nothing while running, collect; `show`: print the
    /// human narration (false for `stats`, which prints only its table);
    /// `progress`: progress lines on stderr.
    pub fn new(json: bool, show: bool, progress: bool) -> Report {
        Report {
            show: show && !json,
            progress,
            steps: Vec::new(),
            cur: None,
            n: 0,
            keep_lines: false,
        }
    }

    /// Also keep every narration line in its step's `lines` (the
    /// self-test's report bundle), whatever the output mode.
    pub fn keep_lines(&mut self) {
        self.keep_lines = true;
    }

    /// Start a numbered step: a heading for humans, a new object in
    /// `steps` for JSON.
    pub fn step(&mut self, id: &str, title: &str) {
        self.flush();
        self.n += 1;
        let mut m = Map::new();
        m.insert("step".into(), Value::from(id));
        self.cur = Some(m);
        if self.show {
            outln!("\n{}. {title}", self.n);
        }
    }

    /// A plain heading (no number, no JSON step).
    pub fn heading(&mut self, title: &str) {
        self.flush();
        if self.show {
            outln!("\n{title}");
        }
    }

    /// One line of narration (human mode only).
    pub fn say(&mut self, text: impl AsRef<str>) {
        if self.show {
            outln!("  {}", text.as_ref());
        }
        if self.keep_lines {
            if let Some(m) = &mut self.cur {
                if let Value::Array(a) =
                    m.entry("lines").or_insert_with(|| Value::Array(Vec::new()))
                {
                    a.push(Value::from(text.as_ref()));
                }
            }
        }
    }

    /// A value of the current step (JSON mode).
    pub fn set(&mut self, key: &str, v: impl Into<Value>) {
        if let Some(m) = &mut self.cur {
            m.insert(key.into(), v.into());
        }
    }

    /// A progress line on stderr (while waiting).
    pub fn progress(&self, text: impl AsRef<str>) {
        if self.progress {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(e, "mlx5: {}", text.as_ref());
        }
    }

    fn flush(&mut self) {
        if let Some(m) = self.cur.take() {
            self.steps.push(Value::Object(m));
        }
    }

    /// The steps recorded so far.
    pub fn take_steps(&mut self) -> Vec<Value> {
        self.flush();
        std::mem::take(&mut self.steps)
    }
}

/// The first error writing stdout, other than a closed pipe.
static WRITE_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Write to stdout. When the reader went away (`| head`), exit at once with
/// 141 (128 + SIGPIPE, what a shell reports for a killed writer). Any other
/// write error (a full disk: `mlx5 demo > /dev/full`) is remembered, later
/// output is dropped, and the run carries on so the device is still torn
/// down; [`write_error`] then turns it into a non-zero exit.
pub fn emit(s: &str) {
    let mut failed = WRITE_ERROR.lock().unwrap_or_else(|e| e.into_inner());
    if failed.is_some() {
        return;
    }
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(s.as_bytes()).and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        *failed = Some(e.to_string());
    }
}

/// The first stdout write error of the run, if any.
pub fn write_error() -> Option<String> {
    WRITE_ERROR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}
