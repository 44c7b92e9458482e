//! Seeds for the seeded random tests.
//!
//! Every seeded test runs its fixed regression seeds plus one fresh seed per
//! run, so CI explores a new sequence each time while the seeds that once
//! found a bug keep being checked:
//!
//! * `MLX5_FRESH_SEED=n` sets the fresh seed (`.ci/run` sets it once per
//!   run and prints it); unset, it is derived from the clock;
//! * `MLX5_PROP_SEED` replaces the whole list: one seed (`1062`), a
//!   comma-separated list (`1062,2920`) or a range (`1000..3000`,
//!   `1000..=2999`); `tests/sweep.sh` uses ranges.
//!
//! The seeds a test uses are printed on stderr, past the test harness's
//! output capture, so every CI log shows them. Each seed runs to its end even
//! if an earlier one failed; every failing seed is printed with the command
//! that replays it, and the test fails at the end naming them all. With
//! `MLX5_SEED_TIMEOUT=secs` a seed that runs longer is reported the same way
//! and the process exits with status 124 (a hang cannot be caught otherwise).

use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Replaces the seed list (one seed, a list or a range).
pub const PROP_SEED: &str = "MLX5_PROP_SEED";
/// The fresh seed of this run (default: from the clock).
pub const FRESH_SEED: &str = "MLX5_FRESH_SEED";
/// Seconds one seed may run before the process is stopped (default: no limit).
pub const SEED_TIMEOUT: &str = "MLX5_SEED_TIMEOUT";
/// The prefix of every line this module writes, for `tests/sweep.sh` to grep.
pub const TAG: &str = "mlx5-seeds:";

/// One seeded test: where it lives (for the reproduction command) and which
/// seeds it runs.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// The integration-test binary (the crate name of the test target).
    bin: String,
    /// The test's path in that binary (`module::test`), as `cargo test`
    /// names it.
    test: String,
    ignored: bool,
    seeds: Vec<u64>,
    /// Where the seeds came from, for the printed line.
    origin: String,
    /// True when the list is the fixed seeds plus the fresh one.
    default_list: bool,
}

/// What one seed of a run returned, or that it failed.
pub type Outcome<T> = Vec<(u64, T)>;

impl Seeded {
    /// The seeds of test `test` of the module `module` (pass
    /// `module_path!()`: `integration::cq_prop` names the binary
    /// `integration` and the test `cq_prop::test`): `MLX5_PROP_SEED` if set,
    /// else `fixed` followed by the fresh seed. Panics on an unparsable
    /// variable.
    pub fn new(module: &'static str, test: &'static str, fixed: &[u64]) -> Seeded {
        let (bin, test) = match module.split_once("::") {
            Some((bin, _)) => (bin.to_owned(), test_path(module, test)),
            None => (module.to_owned(), test.to_owned()),
        };
        check_name(&test);
        let (seeds, origin, default_list) = match std::env::var(PROP_SEED) {
            Ok(s) => (
                parse_list(&s).unwrap_or_else(|e| panic!("{PROP_SEED}={s}: {e}")),
                format!("{PROP_SEED}={s}"),
                false,
            ),
            Err(_) => {
                let (fresh, from) = fresh_seed();
                let mut v = fixed.to_vec();
                v.push(fresh);
                (v, format!("fixed {fixed:?} + fresh {fresh} ({from})"), true)
            }
        };
        Seeded {
            bin,
            test,
            ignored: false,
            seeds,
            origin,
            default_list,
        }
    }

    /// Mark the test `#[ignore]`d (its reproduction command needs `--ignored`).
    pub fn ignored(mut self) -> Seeded {
        self.ignored = true;
        self
    }

    /// The seeds this run uses.
    pub fn seeds(&self) -> &[u64] {
        &self.seeds
    }

    /// True when the run is the default one (fixed seeds + fresh seed), not
    /// a list from `MLX5_PROP_SEED`.
    pub fn is_default_list(&self) -> bool {
        self.default_list
    }

    /// The shell command that replays `seed` of this test alone, in the
    /// build profile this binary was built with.
    pub fn command(&self, seed: u64) -> String {
        format!(
            "{PROP_SEED}={seed} cargo test{} -p mlx5-tests --test {} -- --exact {}{}",
            if cfg!(debug_assertions) {
                ""
            } else {
                " --release"
            },
            self.bin,
            self.test,
            if self.ignored { " --ignored" } else { "" },
        )
    }

    /// Run `body` once per seed, in order. A seed that panics is reported
    /// with its reproduction command and the next seed still runs; at the
    /// end the test panics if any seed failed. Returns what every seed
    /// returned, for assertions over the whole run.
    pub fn run<T>(&self, mut body: impl FnMut(u64) -> T) -> Outcome<T> {
        say(&format!(
            "{} runs {} seed(s): {}",
            self.test,
            self.seeds.len(),
            self.origin
        ));
        let watch = Watchdog::start(self);
        let mut done = Vec::with_capacity(self.seeds.len());
        let mut failed = Vec::new();
        for &seed in &self.seeds {
            watch.begin(seed);
            match catch_unwind(AssertUnwindSafe(|| body(seed))) {
                Ok(v) => done.push((seed, v)),
                Err(_) => {
                    say(&format!("FAIL seed {seed}: {}", self.command(seed)));
                    failed.push(seed);
                }
            }
        }
        watch.stop();
        if !failed.is_empty() {
            let cmds: Vec<String> = failed.iter().map(|&s| self.command(s)).collect();
            panic!(
                "{} of {} seeds failed: {failed:?}; reproduce with:\n  {}",
                failed.len(),
                self.seeds.len(),
                cmds.join("\n  ")
            );
        }
        done
    }
}

/// The path `cargo test` names test `test` of module `module` by
/// (`module_path!()` of the test's module): the module path without the
/// crate's own name, then the test (`integration::in_place` and
/// `stack_child` give `in_place::stack_child`).
pub fn test_path(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{test}"),
        None => test.to_owned(),
    }
}

/// Write one line to the process's stderr, bypassing the test harness's
/// capture (which only intercepts `print!`/`eprint!`), so CI logs show it.
pub fn say(line: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{TAG} {line}");
}

/// The fresh seed: `MLX5_FRESH_SEED`, else a number below 2^32 mixed from
/// the clock (short enough to type). Returns it and where it came from.
pub fn fresh_seed() -> (u64, &'static str) {
    static FRESH: OnceLock<(u64, &'static str)> = OnceLock::new();
    *FRESH.get_or_init(read_fresh_seed)
}

/// One process uses one fresh seed: the tests of a binary print the same.
fn read_fresh_seed() -> (u64, &'static str) {
    if let Ok(s) = std::env::var(FRESH_SEED) {
        let n = s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{FRESH_SEED}={s}: {e}"));
        return (n, FRESH_SEED);
    }
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (splitmix(t ^ u64::from(std::process::id())) >> 32, "clock")
}

/// splitmix64: spreads the clock's low bits over the whole word.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `n`, `a,b,c`, `a..b` (end excluded) or `a..=b`.
pub fn parse_list(s: &str) -> Result<Vec<u64>, String> {
    let num = |t: &str| t.trim().parse::<u64>().map_err(|e| format!("{t:?}: {e}"));
    let v: Vec<u64> = if let Some((a, b)) = s.split_once("..=") {
        (num(a)?..=num(b)?).collect()
    } else if let Some((a, b)) = s.split_once("..") {
        (num(a)?..num(b)?).collect()
    } else {
        s.split(',').map(num).collect::<Result<_, _>>()?
    };
    if v.is_empty() {
        return Err("no seed".into());
    }
    Ok(v)
}

/// Integration tests run on a thread named after the test: a name passed to
/// [`Seeded::new`] that is not the running test's would print a command
/// that replays nothing.
fn check_name(test: &str) {
    if let Some(t) = std::thread::current().name() {
        if t != "main" {
            assert_eq!(t, test, "Seeded::new names the wrong test");
        }
    }
}

/// Stops the process when one seed runs longer than `MLX5_SEED_TIMEOUT`.
struct Watchdog {
    current: Arc<Mutex<Option<(u64, Instant)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(s: &Seeded) -> Watchdog {
        let current = Arc::new(Mutex::new(None::<(u64, Instant)>));
        let stop = Arc::new(AtomicBool::new(false));
        let limit = std::env::var(SEED_TIMEOUT).ok().map(|v| {
            Duration::from_secs(
                v.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("{SEED_TIMEOUT}={v}: {e}")),
            )
        });
        let thread = limit.map(|limit| {
            let (current, stop, s) = (current.clone(), stop.clone(), s.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    let now = *current.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some((seed, t0)) = now {
                        if t0.elapsed() > limit {
                            say(&format!(
                                "TIMEOUT seed {seed} ran over {}s: {}",
                                limit.as_secs(),
                                s.command(seed)
                            ));
                            std::process::exit(124);
                        }
                    }
                }
            })
        });
        Watchdog {
            current,
            stop,
            thread,
        }
    }

    fn begin(&self, seed: u64) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some((seed, Instant::now()));
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_list;

    #[test]
    fn test_paths_leave_out_the_crate() {
        assert_eq!(
            super::test_path("integration::cq_prop", "random"),
            "cq_prop::random"
        );
        assert_eq!(super::test_path("integration", "random"), "random");
        // On a thread of its own: the name check compares the test thread's name.
        let s = std::thread::spawn(|| super::Seeded::new("integration::cq_prop", "random", &[1]))
            .join()
            .unwrap();
        assert_eq!(
            s.command(7).split(" -- ").nth(1),
            Some("--exact cq_prop::random")
        );
        assert!(s.command(7).contains("--test integration "));
    }

    #[test]
    fn lists_and_ranges_parse() {
        assert_eq!(parse_list("7").unwrap(), [7]);
        assert_eq!(parse_list("1062, 2920").unwrap(), [1062, 2920]);
        assert_eq!(parse_list("3..6").unwrap(), [3, 4, 5]);
        assert_eq!(parse_list("3..=5").unwrap(), [3, 4, 5]);
        assert!(parse_list("5..5").is_err());
        assert!(parse_list("x").is_err());
    }
}
