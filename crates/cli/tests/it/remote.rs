//! URLs in place of paths: each reading command on a file served by nginx
//! on loopback (started and stopped here; skipped with a message when nginx
//! is not installed), its output the same as for the local file.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{assert_one_error_line, check, json, valid, Scratch};

/// nginx serving `dir/www`, killed on drop.
pub(crate) struct Nginx(Child, pub(crate) u16);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn nginx(dir: &Path) -> Option<Nginx> {
    let Some(bin) = ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.is_file()) else {
        eprintln!("SKIP: nginx is not installed (cargo xtask setup installs it with apt-get)");
        return None;
    };
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let d = dir.display();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 64; }}\n\
         http {{ access_log off; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; \
         uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
         server {{ listen 127.0.0.1:{port}; root {d}/www; location / {{ }} }} }}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new(bin)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let server = Nginx(child, port);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "nginx did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(server)
}

#[test]
fn reading_commands_take_urls() {
    let dir = Scratch::new("remote");
    std::fs::create_dir_all(dir.path("www/sharded")).unwrap();
    let file = "all_dtypes.safetensors";
    std::fs::copy(valid(&format!("safetensors-0.8.0/{file}")), dir.path(&format!("www/{file}"))).unwrap();
    for e in std::fs::read_dir(valid("safetensors-0.8.0/sharded")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path("www/sharded").join(e.file_name())).unwrap();
    }
    let Some(server) = nginx(&dir.0) else { return };
    let url = format!("http://127.0.0.1:{}/{file}", server.1);
    let local = dir.path(&format!("www/{file}"));
    for cmd in ["inspect", "ls", "stats"] {
        let mut remote = json([cmd, url.as_str()], 0);
        let mut here = json([cmd, local.to_str().unwrap()], 0);
        for v in [&mut remote, &mut here] {
            if let Some(o) = v.as_object_mut() {
                o.remove("path");
                o.remove("file");
            }
        }
        assert_eq!(remote, here, "{cmd}");
    }
    check(["diff", url.as_str(), local.to_str().unwrap()], 0);
    check(["cat", url.as_str(), "u64"], 0);
    check(["verify", "--allow-missing", url.as_str()], 0);
    let out = dir.path("out.dt");
    check(["convert", "--checksum", url.as_str(), out.to_str().unwrap()], 0);
    check(["verify", out.to_str().unwrap()], 0);
    let index = format!("http://127.0.0.1:{}/sharded/model.safetensors.index.json", server.1);
    check(["verify", "--allow-missing", index.as_str()], 0);
    let r = check(["ls", &format!("http://127.0.0.1:{}/none.dt", server.1)], 2);
    assert_one_error_line(&r, &["none.dt", "no such object"]);
}
