//! Whether a process of this host still runs: what tells a dead writer's
//! temp file (`atomic`) and a crashed save's marker
//! (`tools::dcp::protocol`) from a live one's.

/// Whether process `pid` of this host exists: `None` when the system
/// cannot say (a pid no process can have, a check that failed).
pub(crate) fn lives(pid: u64) -> Option<bool> {
    #[cfg(unix)]
    {
        let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
        // Signal 0 only checks whether the process exists; EPERM means it
        // does (another user's).
        match rustix::process::test_kill_process(pid) {
            Err(rustix::io::Errno::SRCH) => Some(false),
            Ok(()) | Err(rustix::io::Errno::PERM) => Some(true),
            Err(_) => None,
        }
    }
    #[cfg(windows)]
    {
        use windows_sys::Win32::Foundation::{CloseHandle, GetLastError, ERROR_INVALID_PARAMETER, WAIT_TIMEOUT};
        use windows_sys::Win32::System::Threading::{OpenProcess, WaitForSingleObject, PROCESS_SYNCHRONIZE};
        let pid = u32::try_from(pid).ok()?;
        // SAFETY: OpenProcess takes plain values and returns a handle or
        // null; the handle is closed below and used for nothing else.
        let handle = unsafe { OpenProcess(PROCESS_SYNCHRONIZE, 0, pid) };
        if handle.is_null() {
            // No such process, or one we may not open (it exists).
            // SAFETY: reads this thread's last error; no argument.
            return Some(unsafe { GetLastError() } != ERROR_INVALID_PARAMETER);
        }
        // SAFETY: `handle` is the process handle just opened, with the
        // SYNCHRONIZE right; a zero timeout only polls it.
        let running = unsafe { WaitForSingleObject(handle, 0) } == WAIT_TIMEOUT;
        // SAFETY: closes the handle opened above, once.
        unsafe { CloseHandle(handle) };
        Some(running)
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = pid;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::lives;

    #[test]
    fn this_process_lives_and_a_reaped_child_does_not() {
        assert_eq!(lives(u64::from(std::process::id())), Some(true));
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .arg("--list")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = u64::from(child.id());
        child.wait().unwrap();
        // A pid is reused only after many others: right after the reap, it
        // names no process.
        assert_eq!(lives(pid), Some(false));
        assert_eq!(lives(u64::MAX), None);
    }
}
