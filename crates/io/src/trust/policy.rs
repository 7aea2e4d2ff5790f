//! Rego policies, evaluated with `regorus` before a file's keys are
//! released: cryptotensors' `__policy__` (its `local` module), and ours
//! (the `__policy__` global metadata of deathtensors files). A policy is a
//! module of package `model` whose rule `allow` must be exactly `true` for
//! the caller's `input` (see `docs/SECURITY.md` for what this can and cannot
//! enforce: it binds honest readers; whoever holds a key can skip it).
//!
//! A policy is code from the file, and regorus bounds neither memory nor
//! recursion: `numbers.range(1, 100000000)` aborts on a failed allocation and
//! a function calling itself overflows the stack, either of which would kill
//! the reading process. On Linux a policy therefore runs in a child process
//! (forked, so nothing is re-read or re-parsed), bounded in time
//! ([`TIME_LIMIT`]) and address space ([`MEMORY_LIMIT`] above what the
//! process already maps); a child that crashes, is killed or runs out of
//! time makes the policy refuse access with a message saying so. Elsewhere
//! (Windows, macOS) no child can be forked from a library: the policy runs
//! on a thread of its own with a [`STACK`] of its own and regorus' time
//! limit, and a policy whose evaluation could outgrow that stack (Rust
//! cannot catch an overflow) is refused before it runs ([`bounds`]:
//! recursion, long chains of rules, deep nesting). Memory is not bounded
//! there (see docs/PLATFORMS.md).

use std::time::Duration;

#[cfg(any(not(target_os = "linux"), test))]
mod bounds;

/// The stack of a policy's thread off Linux: reserved, not committed, so
/// its size costs address space only. A policy [`bounds`] takes nests at
/// most 32 brackets and 32 rule calls deep, well within it.
#[cfg(not(target_os = "linux"))]
const STACK: usize = 256 << 20;

/// The rule a policy must make true.
const RULE: &str = "data.model.allow";

/// The longest a policy may run.
pub(crate) const TIME_LIMIT: Duration = Duration::from_secs(10);

/// The most memory a policy's evaluation may add (bytes).
#[cfg(target_os = "linux")]
pub(crate) const MEMORY_LIMIT: u64 = 1 << 30;

/// Evaluates `rego` against `input` (JSON; no input if `None`); `Err` says
/// why access is refused.
pub(crate) fn evaluate(rego: &str, input: Option<&serde_json::Value>) -> Result<(), String> {
    if allows_everything(rego) {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        isolated::evaluate(rego, input)
    }
    #[cfg(not(target_os = "linux"))]
    {
        evaluate_on_thread(rego, input)
    }
}

/// Evaluates the policy on a thread of its own (off Linux): refused first
/// if its depth is unbounded ([`bounds`]).
#[cfg(not(target_os = "linux"))]
fn evaluate_on_thread(rego: &str, input: Option<&serde_json::Value>) -> Result<(), String> {
    if let Some(why) = bounds::check(rego) {
        return Err(format!("the policy cannot be evaluated: {why}"));
    }
    let (rego, input) = (rego.to_string(), input.cloned());
    let thread = std::thread::Builder::new()
        .name("deathtensors-policy".into())
        .stack_size(STACK)
        .spawn(move || evaluate_here(&rego, input.as_ref()))
        .map_err(|e| format!("the policy cannot be evaluated: no thread for it ({e})"))?;
    thread.join().unwrap_or_else(|_| Err("the policy cannot be evaluated: it crashed".into()))
}

/// Whether `rego` is one of the few modules whose `allow` is `true` for
/// every input, token for token: `package model` and then `allow = true`,
/// `allow := true` or `default allow := true` (or `=`). cryptotensors writes
/// `package model\nallow = true` into every file saved without a policy.
/// Such a module is answered here, without the engine and its child
/// process: a fork of a large process (a loaded model's page tables) costs
/// milliseconds on every open. Anything else, however close, is evaluated.
fn allows_everything(rego: &str) -> bool {
    // Rego's own blanks only: other Unicode spaces do not separate tokens.
    let mut tokens = rego.split([' ', '\t', '\n', '\r']).filter(|t| !t.is_empty());
    let mut next = || tokens.next();
    let head = (next(), next());
    let rule = matches!(
        (next(), next(), next(), next(), next()),
        (Some("allow"), Some("=" | ":="), Some("true"), None, _)
            | (Some("default"), Some("allow"), Some("=" | ":="), Some("true"), None)
    );
    head == (Some("package"), Some("model")) && rule
}

/// Evaluates the policy in this thread.
fn evaluate_here(rego: &str, input: Option<&serde_json::Value>) -> Result<(), String> {
    let mut engine = regorus::Engine::new();
    engine.set_execution_timer_config(regorus::utils::limits::ExecutionTimerConfig {
        limit: TIME_LIMIT,
        check_interval: core::num::NonZeroU32::new(64).unwrap_or(core::num::NonZeroU32::MIN),
    });
    engine.add_policy("model.rego".into(), rego.into()).map_err(|e| format!("the policy does not parse: {e}"))?;
    if let Some(input) = input {
        let value = regorus::Value::from_json_str(&input.to_string()).map_err(|e| format!("bad policy input: {e}"))?;
        engine.set_input(value);
    }
    match engine.eval_rule(RULE.into()) {
        Ok(regorus::Value::Bool(true)) => Ok(()),
        Ok(regorus::Value::Bool(false)) => Err("the policy denies access".into()),
        Ok(regorus::Value::Undefined) => Err("the policy's allow rule is undefined for this input".into()),
        Ok(other) => Err(format!("the policy's allow rule is not a boolean but {other}")),
        Err(e) => Err(format!("the policy cannot be evaluated: {e}")),
    }
}

#[cfg(target_os = "linux")]
mod isolated {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::time::Instant;

    use super::{evaluate_here, MEMORY_LIMIT, TIME_LIMIT};

    /// The child's answer: one status byte, then the message.
    const ALLOWED: u8 = 1;
    const REFUSED: u8 = 2;

    pub(super) fn evaluate(rego: &str, input: Option<&serde_json::Value>) -> Result<(), String> {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            // No pipe (descriptors exhausted): evaluate here rather than not at all.
            return evaluate_here(rego, input);
        }
        // SAFETY: both descriptors are fresh and owned here alone.
        let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let limit = address_space_now().map(|used| used.saturating_add(MEMORY_LIMIT));
        // SAFETY: the child only evaluates the policy (allocation through
        // glibc's malloc, which is made safe to use after fork), writes its
        // answer to the pipe and leaves with `_exit`, running no destructor
        // or atexit handler of the parent's; it never returns from here.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return evaluate_here(rego, input);
        }
        if pid == 0 {
            drop(read_end);
            // Quiet: an abort's report is the parent's to make, as an error.
            // The crash signals go back to their default action, so that a
            // handler the parent installed (Python's faulthandler, which
            // writes to a descriptor of its own) prints no trace of the
            // parent's threads from this child.
            // SAFETY: plain system calls on a path literal, fd 2 and signal
            // numbers; signal() is async-signal-safe.
            unsafe {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
                if null >= 0 {
                    libc::dup2(null, 2);
                }
                for sig in [libc::SIGSEGV, libc::SIGABRT, libc::SIGBUS, libc::SIGFPE, libc::SIGILL] {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            if let Some(limit) = limit {
                let rlim = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                // SAFETY: plain system call on a valid struct.
                unsafe { libc::setrlimit(libc::RLIMIT_AS, &rlim) };
            }
            let (status, message) = match evaluate_here(rego, input) {
                Ok(()) => (ALLOWED, String::new()),
                Err(m) => (REFUSED, m),
            };
            let mut answer = vec![status];
            answer.extend_from_slice(message.as_bytes());
            let mut out = std::fs::File::from(write_end);
            let code = i32::from(std::io::Write::write_all(&mut out, &answer).is_err());
            // SAFETY: ends the child at once, as fork's child must.
            unsafe { libc::_exit(code) }
        }
        drop(write_end);
        let answer = read_answer(read_end, pid);
        let status = reap(pid);
        match answer {
            Some(a) if a.first() == Some(&ALLOWED) => Ok(()),
            Some(a) if a.first() == Some(&REFUSED) => Err(String::from_utf8_lossy(&a[1..]).into_owned()),
            _ => Err(format!("the policy cannot be evaluated: {}", describe(status))),
        }
    }

    /// The child's answer, or `None` if it wrote none within the time
    /// limit (it is then killed).
    fn read_answer(read_end: OwnedFd, pid: libc::pid_t) -> Option<Vec<u8>> {
        let deadline = Instant::now() + TIME_LIMIT + std::time::Duration::from_secs(1);
        let mut pipe = std::fs::File::from(read_end);
        let mut answer = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&pipe), events: libc::POLLIN, revents: 0 };
            let millis = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, millis) };
            if ready < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if ready <= 0 {
                // SAFETY: `pid` is our own child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return None;
            }
            let mut buf = [0u8; 4096];
            match pipe.read(&mut buf) {
                Ok(0) => return (!answer.is_empty()).then_some(answer),
                Ok(n) if answer.len() < 1 << 20 => answer.extend_from_slice(&buf[..n]),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// Waits for the child; its wait status.
    fn reap(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        loop {
            // SAFETY: `pid` is our own child; `status` is valid.
            let r = unsafe { libc::waitpid(pid, &mut status, 0) };
            if r >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return status;
            }
        }
    }

    fn describe(status: i32) -> String {
        if libc::WIFSIGNALED(status) {
            match libc::WTERMSIG(status) {
                libc::SIGKILL => format!("it ran longer than {} s (or was killed)", TIME_LIMIT.as_secs()),
                libc::SIGABRT | libc::SIGSEGV => {
                    "it crashed: out of memory (over 1 GiB more), or a stack overflow (recursion without end)".into()
                }
                signal => format!("it was stopped by signal {signal}"),
            }
        } else {
            "its evaluation failed without an answer".into()
        }
    }

    /// The address space this process maps now (bytes), from
    /// `/proc/self/statm` (its first field, in pages).
    fn address_space_now() -> Option<u64> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
        // SAFETY: plain query.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        pages.checked_mul(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_and_denies_by_input() {
        let rego = "package model\nimport rego.v1\ndefault allow := false\nallow if input.user == \"alice\"\n";
        assert_eq!(evaluate(rego, Some(&serde_json::json!({"user": "alice"}))), Ok(()));
        let denied = evaluate(rego, Some(&serde_json::json!({"user": "bob"}))).unwrap_err();
        assert!(denied.contains("denies"), "{denied}");
        assert!(evaluate("package model\nallow := ", None).unwrap_err().contains("does not parse"));
    }

    #[test]
    fn only_policies_that_allow_everything_skip_the_engine_and_the_engine_agrees() {
        let trivial = [
            "package model\nallow = true",
            "package model\r\n\tallow := true\r\n",
            "  package model allow = true",
            "package model\ndefault allow := true",
            "package model\ndefault allow = true\n",
        ];
        for rego in trivial {
            assert!(allows_everything(rego), "{rego:?}");
            // What the engine says of the same module, for any input.
            assert_eq!(evaluate_here(rego, None), Ok(()), "{rego:?}");
            assert_eq!(evaluate_here(rego, Some(&serde_json::json!({"user": "x"}))), Ok(()), "{rego:?}");
        }
        let not_trivial = [
            "package model\nallow = false",
            "package other\nallow = true",
            "package model\nallow = true\nallow = false",
            "package model\nallow = true\nimport rego.v1",
            "package model\ndefault allow := true\nallow := false",
            "package model\nallow=true",
            "package\u{a0}model\nallow = true",
            "package model\u{c}allow = true",
            "package model\nallow = \"true\"",
            "package model\ndeny = true",
            "package model",
            "",
        ];
        for rego in not_trivial {
            assert!(!allows_everything(rego), "{rego:?}");
        }
        // Evaluated by the engine, so still refused (or denied).
        assert!(evaluate("package model\nallow = false", None).unwrap_err().contains("denies"));
        assert!(evaluate("package other\nallow = true", None).is_err());
    }

    #[test]
    // Off Linux memory is not bounded: the allocation would succeed or abort.
    #[cfg(target_os = "linux")]
    fn a_policy_that_exhausts_memory_is_refused_not_fatal() {
        let rego =
            "package model\nimport rego.v1\nallow if { count([x | some x in numbers.range(1, 100000000)]) > 0 }\n";
        let e = evaluate(rego, None).unwrap_err();
        assert!(e.contains("cannot be evaluated"), "{e}");
        #[cfg(target_os = "linux")]
        assert!(e.contains("crashed: out of memory"), "{e}");
    }

    #[test]
    fn a_policy_recursing_without_end_is_refused_not_fatal() {
        let rego = "package model\nimport rego.v1\nf(x) := f(x + 1)\nallow if f(1) > 0\n";
        let e = evaluate(rego, None).unwrap_err();
        assert!(e.contains("cannot be evaluated"), "{e}");
        #[cfg(target_os = "linux")]
        assert!(e.contains("stack overflow"), "{e}");
        #[cfg(not(target_os = "linux"))]
        assert!(e.contains("recurses (f -> f)"), "{e}");
    }
}
