//! URLs of a server that never answers: the command opens the URL once,
//! fails within the timeouts of `--storage-option`, and says so. See:
//! <https://github.com/death-legion/deathtensors/issues/30>

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{assert_one_error_line, check};

/// A loopback server that accepts connections, counts them, and never
/// answers; stopped when dropped (and after a minute whatever happens).
struct Silent {
    port: u16,
    connections: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Silent {
    fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (connections, stop) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicBool::new(false)));
        let (counted, stopped) = (connections.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let mut held = Vec::new();
            while !stopped.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(60) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        counted.fetch_add(1, Ordering::Relaxed);
                        held.push(conn);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Silent { port, connections, stop, thread: Some(thread) }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_url_of_a_silent_server_is_opened_once_and_times_out() {
    let server = Silent::start();
    let url = format!("http://127.0.0.1:{}/m.dt", server.port);
    let out = std::env::temp_dir().join(format!("dt-cli-{}-dead-out.dt", std::process::id()));
    let out = out.to_str().unwrap();
    // Commands with signature requirements open the URL once too.
    let commands: [&[&str]; 5] = [
        &["inspect", &url],
        &["verify", &url],
        &["ls", &url],
        &["verify", &url, "--require-signature"],
        &["convert", &url, out, "--require-signature"],
    ];
    for args in commands {
        let command = args.join(" ");
        let before = server.connections.load(Ordering::Relaxed);
        let start = Instant::now();
        let r = check([args, &["--storage-option", "timeout=1s", "--storage-option", "max_retries=0"]].concat(), 2);
        let took = start.elapsed();
        assert_one_error_line(&r, &["timed out", &url]);
        // One attempt of 1 s: two opens would take 2 s.
        assert!(took < Duration::from_millis(1900), "{command}: {took:?}");
        assert_eq!(server.connections.load(Ordering::Relaxed) - before, 1, "{command}: connections");
    }
}

#[test]
fn malformed_timeouts_are_refused_in_words() {
    let r = check(["inspect", "http://127.0.0.1:9/m.dt", "--storage-option", "retry_timeout=5x"], 2);
    assert_one_error_line(&r, &["retry_timeout: \"5x\" is not a duration (e.g. 30s, 500ms)"]);
    let r = check(["inspect", "http://127.0.0.1:9/m.dt", "--storage-option", "allow_http=false"], 2);
    assert_one_error_line(&r, &["allow_http is false but the URL is http://"]);
}
