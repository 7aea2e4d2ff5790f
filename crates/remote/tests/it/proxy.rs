//! A small HTTP proxy on loopback in front of a server: it counts requests
//! and body bytes, and injects faults into the requests it is told to.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to do to one request, in the order requests arrive.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Close the connection without an answer.
    Reset,
    /// Answer 503 Service Unavailable.
    Unavailable,
    /// Answer after a delay.
    Slow(Duration),
    /// Forward the request without its Range header (the whole object, 200).
    IgnoreRange,
    /// Send the head and half the body, then close.
    Truncate,
}

#[derive(Debug, Default)]
struct Shared {
    requests: AtomicU64,
    body_bytes: AtomicU64,
    faults: Mutex<VecDeque<Fault>>,
    /// Every request's Range header, in order.
    ranges: Mutex<Vec<String>>,
    stop: AtomicBool,
}

/// The proxy; stopped on drop.
#[derive(Debug)]
pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || serve(conn, upstream, &s));
            }
        });
        Proxy { port, shared, accept: Some(accept) }
    }

    /// The URL of `name` through the proxy.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// Faults for the next requests, one each, in order.
    pub fn inject(&self, faults: &[Fault]) {
        self.shared.faults.lock().unwrap().extend(faults.iter().cloned());
    }

    /// Requests received so far (faulted ones too).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Response body bytes sent so far.
    pub fn bytes(&self) -> u64 {
        self.shared.body_bytes.load(Ordering::SeqCst)
    }

    /// The Range headers of the requests so far.
    pub fn ranges(&self) -> Vec<String> {
        self.shared.ranges.lock().unwrap().clone()
    }

    /// Zeroes the counts.
    pub fn reset(&self) {
        self.shared.requests.store(0, Ordering::SeqCst);
        self.shared.body_bytes.store(0, Ordering::SeqCst);
        self.shared.ranges.lock().unwrap().clear();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Reads one request head (GETs have no body); `None` at the end.
fn read_head(conn: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
        if head.len() > 64 << 10 {
            return None;
        }
    }
    Some(head)
}

fn serve(mut conn: TcpStream, upstream: u16, s: &Shared) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
    while let Some(head) = read_head(&mut conn) {
        s.requests.fetch_add(1, Ordering::SeqCst);
        let fault = s.faults.lock().unwrap().pop_front();
        let text = String::from_utf8_lossy(&head).to_string();
        let mut lines: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
        let range = lines.iter().find(|l| l.to_ascii_lowercase().starts_with("range:")).map(|l| l[6..].trim());
        s.ranges.lock().unwrap().push(range.unwrap_or("").to_string());
        lines.retain(|l| {
            let l = l.to_ascii_lowercase();
            let drop_range = matches!(fault, Some(Fault::IgnoreRange)) && l.starts_with("range:");
            !(l.starts_with("connection:") || drop_range)
        });
        match fault {
            Some(Fault::Reset) => {
                let _ = conn.shutdown(Shutdown::Both);
                return;
            }
            Some(Fault::Unavailable) => {
                let _ = conn.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
                continue;
            }
            Some(Fault::Slow(d)) => std::thread::sleep(d),
            _ => {}
        }
        let request = format!("{}\r\nConnection: close\r\n\r\n", lines.join("\r\n"));
        let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
        if up.write_all(request.as_bytes()).is_err() {
            return;
        }
        let mut response = Vec::new();
        if up.read_to_end(&mut response).is_err() {
            return;
        }
        let split = response.windows(4).position(|w| w == b"\r\n\r\n").map_or(response.len(), |p| p + 4);
        // Keep the client's connection: drop upstream's `Connection: close`.
        let head = String::from_utf8_lossy(&response[..split]).to_string();
        let head: Vec<&str> = head
            .split("\r\n")
            .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
            .collect();
        let head = format!("{}\r\n\r\n", head.join("\r\n"));
        let body = &response[split..];
        let body = match fault {
            Some(Fault::Truncate) => &body[..body.len() / 2],
            _ => body,
        };
        // Counted before they are sent: a client that has them all may look
        // at the count at once.
        s.body_bytes.fetch_add(body.len() as u64, Ordering::SeqCst);
        if conn.write_all(head.as_bytes()).is_err() || conn.write_all(body).is_err() {
            return;
        }
        if matches!(fault, Some(Fault::Truncate)) {
            let _ = conn.shutdown(Shutdown::Both);
            return;
        }
    }
}
