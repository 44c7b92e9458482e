//! `mlx5 run` (a script file or stdin) and `mlx5 shell` (statements typed
//! one at a time): bring-up, the statements, cleanup, teardown, and the
//! report saying which line failed and why.

use std::io::BufRead;

use mlx5_hal::Hal;
use serde_json::{json, Value};

use super::parse::{parse, parse_line, Line};
use super::{Session, Verdict};
use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::{bring_up, teardown, Env};
use crate::common::trace::Tracer;

type Outcome = (Value, Result<(), CliError>);

/// Read a script (`-`: stdin).
pub fn read_script(file: &str) -> Result<String, CliError> {
    let r = if file == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    };
    r.map_err(|e| {
        CliError::usage(
            format!("cannot read the script {file}: {e}"),
            "give a readable file, or - for stdin",
        )
    })
}

/// Run a script; `text` was read before the device was opened.
pub fn run<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    json_mode: bool,
    progress: bool,
    lines: &[Line],
    all: bool,
) -> Outcome {
    let mut r = Report::new(json_mode, true, progress);
    let (hca, _) = match bring_up(hal, env, t, &mut r) {
        Ok(x) => x,
        Err(e) => return (Value::Null, Err(e)),
    };
    let mut s = Session::new(&hca, !json_mode);
    s.all_fields = all;
    let mut stmts = Vec::new();
    let mut res = Ok(());
    let mut failed_line = None;
    for (i, line) in lines.iter().enumerate() {
        let before = t.count();
        let step = s.exec(line, lines.get(i + 1));
        let (verdict, mut doc) = match step {
            Ok(x) => x,
            Err(e) => {
                failed_line = Some(line.no);
                stmts.push(json!({"line": line.no, "text": line.text, "result": "error", "error": e.message()}));
                res = Err(e);
                break;
            }
        };
        doc["line"] = json!(line.no);
        doc["text"] = json!(line.text);
        doc["commands"] = json!(t.count() - before);
        let stop = match verdict {
            Verdict::Pass => {
                doc["result"] = json!("ok");
                None
            }
            Verdict::Failed(why) => {
                doc["result"] = json!("failed");
                Some(CliError::failed(
                    format!("line {}: {} failed: {why}", line.no, line.text),
                    "add `expect status=...` after the line if the failure is what you test",
                ))
            }
            Verdict::ExpectFailed(why) => {
                doc["result"] = json!("expect_failed");
                Some(CliError::Expect {
                    what: format!("line {}: {}: {why}", line.no, line.text),
                })
            }
        };
        stmts.push(doc);
        if let Some(e) = stop {
            failed_line = Some(line.no);
            res = Err(e);
            break;
        }
    }
    let (cleanup, cres) = s.cleanup();
    drop(s);
    if !json_mode && !cleanup.is_empty() {
        outln!("cleanup: {}", cleanup.join(", "));
    }
    let mut quiet = Report::new(json_mode, false, progress);
    let (td, tres) = teardown(hca, env, &mut quiet);
    if !json_mode {
        outln!(
            "teardown: {} pages given, {} returned{}",
            td.pages_given,
            td.pages_returned,
            if td.clean() { ", all back" } else { "" }
        );
    }
    let result = res.and(cres).and(tres).and_then(|()| {
        if td.clean() {
            Ok(())
        } else {
            Err(CliError::check(
                "teardown did not get every page back, or objects were left behind",
            ))
        }
    });
    let v = json!({
        "statements": stmts,
        "failed_line": failed_line,
        "cleanup": cleanup,
        "commands_sent": t.count(),
    });
    (v, result)
}

/// Parse a whole script before the device is opened.
pub fn load(file: &str) -> Result<Vec<Line>, CliError> {
    parse(&read_script(file)?)
}

/// `mlx5 shell`: statements read one line at a time (a prompt on a
/// terminal); a failure is reported and the session goes on. `quit` or
/// end of input ends it.
pub fn shell<H: Hal>(hal: H, env: &Env<'_>, t: &Tracer, progress: bool) -> Outcome {
    let mut r = Report::new(false, true, progress);
    let (hca, _) = match bring_up(hal, env, t, &mut r) {
        Ok(x) => x,
        Err(e) => return (Value::Null, Err(e)),
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdin());
    let mut s = Session::new(&hca, true);
    let mut history = Vec::new();
    let stdin = std::io::stdin();
    let mut no = 0;
    let mut failures = 0u64;
    let mut input_err: Option<CliError> = None;
    if tty {
        eprintln!(
            "mlx5 shell on {}: commands, steps, raw, expect, let; `history`, `quit`",
            env.target.label()
        );
    }
    loop {
        if tty {
            eprint!("mlx5> ");
        }
        let mut raw = Vec::new();
        match stdin.lock().read_until(b'\n', &mut raw) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                input_err = Some(CliError::failed(
                    format!("cannot read line {} of the input: {e}", no + 1),
                    "the statements before it ran; the session was torn down",
                ));
                break;
            }
        }
        no += 1;
        // Bytes that are not text end the session, loudly: they are not a
        // statement and what follows them cannot be trusted to be either.
        let Ok(text) = String::from_utf8(raw) else {
            input_err = Some(CliError::usage(
                format!("line {no} of the input is not UTF-8 text"),
                "the shell reads statements as text, one a line (docs/cli.md)",
            ));
            break;
        };
        match text.trim() {
            "quit" | "exit" => break,
            "history" => {
                for (i, h) in history.iter().enumerate() {
                    outln!("{:>4}  {h}", i + 1);
                }
                continue;
            }
            _ => {}
        }
        let line = match parse_line(no, &text) {
            Ok(Some(l)) => l,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("mlx5: {}; {}", e.message(), e.hint().unwrap_or_default());
                failures += 1;
                continue;
            }
        };
        history.push(line.text.clone());
        match s.exec(&line, None) {
            Ok((Verdict::Pass, _)) => {}
            Ok((Verdict::Failed(w) | Verdict::ExpectFailed(w), _)) => {
                failures += 1;
                eprintln!("mlx5: line {no}: {w}")
            }
            Err(e) => {
                failures += 1;
                eprintln!("mlx5: {}", e.message())
            }
        }
    }
    let (cleanup, cres) = s.cleanup();
    drop(s);
    if !cleanup.is_empty() {
        outln!("cleanup: {}", cleanup.join(", "));
    }
    let mut quiet = Report::new(false, false, progress);
    let (td, tres) = teardown(hca, env, &mut quiet);
    outln!(
        "teardown: {} pages given, {} returned",
        td.pages_given,
        td.pages_returned
    );
    (
        json!({"statements": no, "failures": failures, "history": history}),
        match input_err {
            Some(e) => Err(e),
            None => cres.and(tres),
        },
    )
}
