//! Prints the header of a deathtensors, safetensors or bintensors file, reading only
//! the head of the file (the format crate itself does no I/O).
//!
//! ```text
//! cargo run -p deathtensors-format --example inspect -- model.safetensors
//! ```

use std::io::Read;

use deathtensors_format::{Head, Limits, PROBE_LEN};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: inspect FILE")?;
    let mut file = std::fs::File::open(&path)?;
    let file_len = file.metadata()?.len();
    let limits = Limits::DEFAULT;

    // Read the probe, ask how much of the head is needed, read that much.
    let mut head = Vec::new();
    (&mut file).take(PROBE_LEN as u64).read_to_end(&mut head)?;
    let needed = Head::needed(&head, &limits).map_err(|e| format!("{path}: {e}"))?;
    (&mut file).take(needed.saturating_sub(head.len() as u64)).read_to_end(&mut head)?;
    let head = Head::parse(&head, file_len, &limits).map_err(|e| format!("{path}: {e}"))?;

    let header = &head.header;
    println!("{path}: {:?}, {} tensors, data {}..{}", header.format(), header.len(), head.data_start, head.data_end);
    if let Some(meta) = header.metadata() {
        for (k, v) in meta {
            println!("  {k} = {v}");
        }
    }
    for t in header.tensors() {
        println!("  {:<40} {:<8} {:<16} {:>10} bytes", t.name, t.dtype.name(), format!("{:?}", t.shape), t.byte_len());
    }
    Ok(())
}
