//! Opens one file once and prints how long it took: for timing a fresh
//! process's open (`perf record`, `hyperfine`), which a benchmark loop in
//! one process cannot show.
//!
//! `cargo run --release -p deathtensors-io --example open_once -- FILE [N]`

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: open_once FILE");
    let t = std::time::Instant::now();
    // SAFETY: the file is not changed while it is open (a benchmark's).
    let r = unsafe { deathtensors_io::Reader::open_mmap(&path) }.expect("open");
    let opened = t.elapsed();
    let n = r.header().len();
    drop(r);
    println!(
        "open {:.3} ms ({n} tensors), with drop {:.3} ms",
        opened.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );
}
