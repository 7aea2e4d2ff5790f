//! Timing the steps of a task: each step's wall time, printed as a table
//! when the task ends (or fails), so that the next slow step is visible.

use std::time::{Duration, Instant};

/// The steps run so far and how long each took.
#[derive(Debug)]
pub struct Steps {
    task: &'static str,
    started: Instant,
    done: Vec<(String, Duration, bool)>,
}

impl Steps {
    /// A task's steps, timed from now.
    pub fn new(task: &'static str) -> Steps {
        Steps { task, started: Instant::now(), done: Vec::new() }
    }

    /// Runs `f` as the step `name`, timing it; a step that fails is
    /// recorded as failed and its error returned.
    pub fn run<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        eprintln!("xtask: == {name}");
        let start = Instant::now();
        let out = f();
        self.done.push((name.to_string(), start.elapsed(), out.is_ok()));
        out
    }

    /// The table of steps, slowest marked, and the total.
    pub fn table(&self) -> String {
        let total = self.started.elapsed();
        let width = self.done.iter().map(|(n, _, _)| n.len()).max().unwrap_or(4).max(4);
        let slowest = self.done.iter().map(|(_, d, _)| *d).max().unwrap_or_default();
        let mut s = format!("xtask: {} took {}", self.task, clock(total));
        // The wall clock of the whole command: cargo built xtask first.
        if let Some(since) = since_cargo_started().filter(|d| d.saturating_sub(total) >= Duration::from_secs(1)) {
            s.push_str(&format!(
                " ({} since `cargo xtask` started: building xtask itself took {})",
                clock(since),
                clock(since.saturating_sub(total))
            ));
        }
        s.push('\n');
        for (name, d, ok) in &self.done {
            let share = if total.is_zero() { 0.0 } else { 100.0 * d.as_secs_f64() / total.as_secs_f64() };
            let mark = match (ok, *d == slowest) {
                (false, _) => "  FAILED",
                (true, true) => "  <- slowest",
                _ => "",
            };
            s.push_str(&format!("  {name:<width$}  {:>8}  {share:>5.1}%{mark}\n", clock(*d)));
        }
        s
    }
}

impl Drop for Steps {
    /// Printed at the end of the task, whether it passed or failed.
    fn drop(&mut self) {
        eprint!("{}", self.table());
    }
}

/// How long ago `cargo xtask ...` started, so that a task's total
/// matches the wall clock of the command: `cargo run` replaces itself with
/// xtask (exec, on Unix), so this process's own start time (Linux: /proc)
/// is cargo's, before it built xtask. `None` elsewhere.
fn since_cargo_started() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Field 22 (starttime, in clock ticks since boot) is the 20th after
    // the command name's ")".
    let (_, rest) = stat.rsplit_once(')')?;
    let ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
    // /proc counts in USER_HZ, 100 on Linux.
    let ago = uptime - ticks / 100.0;
    (ago >= 0.0).then(|| Duration::from_secs_f64(ago))
}

/// `m:ss` (or `h:mm:ss`).
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_each_step_and_marks_failures() {
        let mut steps = Steps::new("test");
        steps.run("quick", || Ok(())).unwrap();
        let failed: Result<(), String> = steps.run("broken", || Err("no".into()));
        assert_eq!(failed, Err("no".to_string()));
        let table = steps.table();
        assert!(table.starts_with("xtask: test took 0:00"), "{table}");
        assert!(table.contains("  quick "), "{table}");
        assert!(table.lines().any(|l| l.contains("broken") && l.ends_with("FAILED")), "{table}");
        std::mem::forget(steps);
    }

    #[test]
    fn clock_reads_minutes_and_hours() {
        assert_eq!(clock(Duration::from_secs(65)), "1:05");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }
}
