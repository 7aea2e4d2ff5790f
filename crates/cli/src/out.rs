//! Writing to stdout and stderr, and formatting numbers and sizes for people.
//!
//! Nothing here uses `println!`, which panics on a closed pipe: stdout is
//! written through [`Out`], whose errors (`BrokenPipe` for `| head`) travel
//! up as `io::Error`s and end the run quietly.

use std::io::{self, BufWriter, Stdout, Write};

/// Buffered stdout.
#[derive(Debug)]
pub struct Out(BufWriter<Stdout>);

impl Out {
    /// Buffered stdout.
    pub fn new() -> Out {
        Out(BufWriter::with_capacity(64 << 10, io::stdout()))
    }

    /// Writes `value` as one JSON document and a newline.
    pub fn json(&mut self, value: &serde_json::Value) -> io::Result<()> {
        // Through a string: serde_json's writer errors hide the io::Error.
        let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
        self.0.write_all(text.as_bytes())?;
        self.0.write_all(b"\n")
    }

    /// Flushes what is buffered; the error a closed pipe gives shows here.
    pub fn finish(mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Prints `deathtensors: error: {message}` on stderr.
pub fn error(message: &str) {
    let _ = writeln!(io::stderr(), "deathtensors: error: {message}");
}

/// Prints `deathtensors: warning: {message}` on stderr.
pub fn warn(message: &str) {
    let _ = writeln!(io::stderr(), "deathtensors: warning: {message}");
}

/// Prints `deathtensors: note: {message}` on stderr.
pub fn note(message: &str) {
    let _ = writeln!(io::stderr(), "deathtensors: note: {message}");
}

/// A byte count for people: `512 B`, `1.5 KiB`, `7.0 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A count for people, in powers of 1000: `512`, `12.3 K`, `1.02 B`
/// (three significant digits; billions as B, as model sizes are said).
pub fn quantity(n: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "B", "T", "Q"];
    if n < 1000 {
        return n.to_string();
    }
    let mut value = n as f64;
    let mut unit = 0;
    value /= 1000.0;
    while value >= 999.995 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    let digits = if value >= 99.95 {
        0
    } else if value >= 9.995 {
        1
    } else {
        2
    };
    format!("{value:.digits$} {}", UNITS[unit])
}

/// A format's name as the command line spells it.
pub fn format_name(format: deathtensors_io::format::Format) -> &'static str {
    match format {
        deathtensors_io::format::Format::Deathtensors => "deathtensors",
        deathtensors_io::format::Format::Safetensors => "safetensors",
        deathtensors_io::format::Format::Bintensors => "bintensors",
    }
}

/// `1 tensor`, `2 tensors`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A shape as `[2, 3]` (`[]` for a scalar).
pub fn shape(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// A number with 6 significant digits, as C's `%g`: `0.5`, `255`, `1.5e-07`.
pub fn g(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return match x {
            x if x.is_nan() => "nan".into(),
            f64::INFINITY => "inf".into(),
            f64::NEG_INFINITY => "-inf".into(),
            _ => "0".into(),
        };
    }
    // The exponent after rounding to 6 significant digits.
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let mantissa = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    trim_zeros(&format!("{x:.decimals$}")).to_string()
}

/// `1.500` to `1.5`, `2.000` to `2`; integers unchanged.
fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Rows as columns aligned with two spaces, the last column unpadded.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', widths[c] - cell.chars().count() + 2));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_for_people() {
        assert_eq!(quantity(0), "0");
        assert_eq!(quantity(999), "999");
        assert_eq!(quantity(1000), "1.00 K");
        assert_eq!(quantity(12_345), "12.3 K");
        assert_eq!(quantity(999_999), "1.00 M");
        assert_eq!(quantity(124_439_808), "124 M");
        assert_eq!(quantity(1_021_886_464), "1.02 B");
        assert_eq!(quantity(70_553_706_496), "70.6 B");
    }

    #[test]
    fn numbers_for_people() {
        assert_eq!(g(0.0), "0");
        assert_eq!(g(255.0), "255");
        assert_eq!(g(0.5), "0.5");
        assert_eq!(g(-1.25), "-1.25");
        assert_eq!(g(1.0 / 3.0), "0.333333");
        assert_eq!(g(1.5e-7), "1.5e-07");
        assert_eq!(g(123456789.0), "1.23457e+08");
        assert_eq!(g(999999.9), "1e+06");
        assert_eq!(g(f64::NAN), "nan");
        assert_eq!(g(f64::NEG_INFINITY), "-inf");
        assert_eq!(size(16), "16 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 << 30), "3.0 GiB");
        assert_eq!(shape(&[]), "[]");
        assert_eq!(shape(&[2, 3]), "[2, 3]");
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![vec!["a".into(), "bb".into(), "c".into()], vec!["ddd".into(), "e".into(), "".into()]];
        assert_eq!(table(&rows), "a    bb  c\nddd  e\n");
    }
}
