//! The tokio runtime that runs object_store's futures behind the blocking
//! API.

use std::future::Future;
use std::io;
use std::sync::OnceLock;

/// One runtime for the process, made on first use: its worker threads drive
/// the connections; the futures of a read run on the caller's thread.
fn runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        // Two workers keep a loopback or 10 Gb/s link busy; more only with
        // more cores to give.
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("deathtensors-remote")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime of remote reads: {e}"))
    });
    runtime.as_ref().map_err(|m| io::Error::other(m.clone()))
}

/// Runs `future` to completion on the runtime, from synchronous code. From
/// inside another tokio runtime (a caller's async code), on a scoped thread
/// of its own, since a runtime cannot block inside one.
pub(crate) fn block_on<F: Future + Send>(future: F) -> io::Result<F::Output>
where
    F::Output: Send,
{
    let runtime = runtime()?;
    if tokio::runtime::Handle::try_current().is_ok() {
        return Ok(std::thread::scope(|s| {
            s.spawn(|| runtime.block_on(future)).join().unwrap_or_else(|p| std::panic::resume_unwind(p))
        }));
    }
    Ok(runtime.block_on(future))
}
