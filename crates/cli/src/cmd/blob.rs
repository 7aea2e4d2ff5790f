//! `deathtensors blob`: what is specific to collections (create, append,
//! truncate, export, convert); `inspect`, `verify` and `convert` also take
//! collection directories.

use std::io::Write;

use anyhow::{bail, Context};
use deathtensors_io::format::{Dtype, Format, RowLayout};
use deathtensors_io::{dtype_from_name, Collection, CollectionOptions, Reader, WriteOptions};

use crate::args::{BlobArgs, BlobCommand, FormatArg};
use crate::context::RunContext;
use crate::exit::ExitCode;
use crate::out::{self, Out};

pub fn run(args: BlobArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let mut out = Out::new();
    match args.command {
        BlobCommand::Create { dir, dtype, shape, block_rows, from, tensor } => {
            let (dtype, shape) = match (&from, dtype, shape) {
                (Some(file), None, None) => {
                    let reader = ctx.open(file)?;
                    let name = tensor_name(&reader, tensor.as_deref())?;
                    let info = reader.tensor(&name)?.info;
                    let Some((_, row)) = info.shape.split_first() else {
                        bail!("tensor {name:?} of {} is a scalar: rows need a first dimension", file.display())
                    };
                    (info.dtype, row.to_vec())
                }
                (_, Some(d), Some(s)) => (parse_dtype(&d)?, parse_shape(&s)?),
                _ => bail!("give --dtype and --shape, or --from FILE to take them from a tensor of FILE"),
            };
            let layout = RowLayout::new(dtype, shape, block_rows)?;
            if dir.exists() && std::fs::read_dir(&dir).map(|mut d| d.next().is_some()).unwrap_or(true) {
                bail!("{} exists and is not empty: `blob create` makes a new collection", dir.display());
            }
            let existed = dir.exists();
            let mut c = Collection::create(&dir, layout, CollectionOptions::default())?;
            let filled = (|| -> anyhow::Result<u64> {
                let mut appended = 0;
                if let Some(file) = &from {
                    let reader = ctx.open(file)?;
                    let name = tensor_name(&reader, tensor.as_deref())?;
                    crate::integrity::footer_for(&reader, &[name.as_str()])?;
                    appended = c.append_tensor(&reader, &name)?;
                }
                c.flush()?;
                Ok(appended)
            })();
            let appended = match filled {
                Ok(n) => n,
                Err(e) => {
                    // The collection this command made goes with its failure.
                    drop(c);
                    let _ = if existed { remove_contents(&dir) } else { std::fs::remove_dir_all(&dir) };
                    return Err(e);
                }
            };
            writeln!(
                out,
                "{}: collection of {} {} rows created, {appended} rows",
                dir.display(),
                dtype,
                out::shape(&c.layout().shape)
            )?;
        }
        BlobCommand::Append { dir, file, tensor } => {
            let reader = ctx.open(&file)?;
            let mut c = Collection::open_writable(&dir, CollectionOptions::default())?;
            let names: Vec<String> = match tensor {
                Some(t) => vec![t],
                None => reader.header().tensors().iter().map(|t| t.name.to_string()).collect(),
            };
            let mut appended = 0;
            crate::integrity::footer_for(&reader, &names.iter().map(String::as_str).collect::<Vec<_>>())?;
            for name in &names {
                appended += c.append_tensor(&reader, name)?;
            }
            c.flush()?;
            writeln!(
                out,
                "{}: {appended} rows appended from {}, {} rows now",
                dir.display(),
                file.display(),
                c.rows()
            )?;
        }
        BlobCommand::Truncate { dir, rows } => {
            let mut c = Collection::open_writable(&dir, CollectionOptions::default())?;
            let before = c.rows();
            c.truncate(rows.min(before))?;
            c.flush()?;
            writeln!(out, "{}: {before} -> {} rows", dir.display(), c.rows())?;
        }
        BlobCommand::Export { dir, output, rows, name, format, checksum } => {
            let c = Collection::open(&dir)?;
            let range = parse_range(rows.as_deref(), c.rows())?;
            let format = match format {
                Some(FormatArg::Safetensors) => Format::Safetensors,
                Some(FormatArg::Deathtensors) => Format::Deathtensors,
                Some(FormatArg::Bintensors) => Format::Bintensors,
                None if output.extension().is_some_and(|e| e == "safetensors") => Format::Safetensors,
                None if output.extension().is_some_and(|e| e == "bt") => Format::Bintensors,
                None => Format::Deathtensors,
            };
            if checksum && format != Format::Deathtensors {
                bail!("--checksum: {} files have no checksum", out::format_name(format));
            }
            let options = WriteOptions { format, checksum, ..WriteOptions::default() };
            let n = range.end - range.start;
            c.export(range, &name, &output, &options)?;
            writeln!(
                out,
                "{} -> {}: {n} rows as tensor {name:?} ({})",
                dir.display(),
                output.display(),
                out::format_name(format)
            )?;
        }
        BlobCommand::Convert { input, output, block_rows } => {
            let c = Collection::open(&input)?;
            let rows = crate::collection::copy_collection(&c, &output, block_rows)?;
            writeln!(out, "{} -> {}: {rows} rows, collection written", input.display(), output.display())?;
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

fn parse_dtype(name: &str) -> anyhow::Result<Dtype> {
    dtype_from_name(name).with_context(|| format!("unknown dtype {name:?} (F32, BF16, F8_E4M3, float32, ...)"))
}

fn parse_shape(s: &str) -> anyhow::Result<Vec<u64>> {
    let s = s.trim().trim_start_matches(['(', '[']).trim_end_matches([')', ']']);
    s.split([',', 'x'])
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<u64>().with_context(|| format!("bad row shape dimension {d:?}")))
        .collect()
}

/// `A:B`, `A:`, `:B` or `N` (the first N rows), within `rows`.
fn parse_range(spec: Option<&str>, rows: u64) -> anyhow::Result<std::ops::Range<u64>> {
    let Some(spec) = spec else { return Ok(0..rows) };
    let num = |s: &str, default: u64| -> anyhow::Result<u64> {
        if s.is_empty() {
            return Ok(default);
        }
        s.parse::<u64>().with_context(|| format!("bad row number {s:?} in --rows"))
    };
    let (a, b) = match spec.split_once(':') {
        Some((a, b)) => (num(a, 0)?, num(b, rows)?),
        None => (0, num(spec, rows)?),
    };
    if a > b || b > rows {
        bail!("--rows {spec}: not within the collection's {rows} rows");
    }
    Ok(a..b)
}

fn tensor_name(reader: &Reader, given: Option<&str>) -> anyhow::Result<String> {
    if let Some(name) = given {
        return Ok(name.to_string());
    }
    match reader.header().tensors() {
        [only] => Ok(only.name.to_string()),
        tensors => bail!(
            "{} holds {} tensors: name the one to take rows from with --tensor",
            reader.path().display(),
            tensors.len()
        ),
    }
}

/// Removes what is in `dir`, keeping `dir` (a directory that was empty
/// before `blob create` made a collection in it).
fn remove_contents(dir: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}
