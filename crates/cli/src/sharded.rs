//! Sharded checkpoints in `inspect`, `verify` and `convert`: a Hugging Face
//! or deathtensors index (`*.index.json`), or a deathtensors 0.3.0 index
//! file (a `.deathtensors` file with no tensors that lists its shards).

use std::io::Write;
use std::path::{Path, PathBuf};

use deathtensors_io::format::{Format, TensorInfo, TensorSpec};
use deathtensors_io::{
    is_legacy_index, write_index, ErrorKind, ReadOptions, ShardedReader, StagedFiles, WriteOptions, INDEX_SUFFIX,
};
use serde_json::{json, Value};

use crate::args::VerifyArgs;
use crate::context::RunContext;
use crate::exit::{CheckFailed, ExitCode};
use crate::out::{self, Out};
use crate::{copy, exit, progress};

/// Whether `path` names a sharded checkpoint rather than a single file.
pub fn is_index(ctx: &RunContext, path: &Path) -> bool {
    if deathtensors_io::is_json_index(path) {
        return true;
    }
    // A deathtensors 0.3.0 index: no tensors, and the flag in its metadata.
    let opened = ctx.open(path);
    let index = opened.as_ref().is_ok_and(is_legacy_index);
    // The command opens the URL next, as a file or as this index: it
    // takes this open.
    ctx.keep(path, opened);
    index
}

/// [`is_index`] for a command that opens files with `options` (signature
/// requirements): the file is opened with them, and the command takes
/// that open ([`crate::remote::open_with_keys`]), so a URL is opened once.
/// Only a file that fails a requirement is opened again without them, to
/// tell a deathtensors 0.3.0 index (never signed; its shards are what the
/// requirements apply to) from a file that is refused.
pub fn is_index_requiring(ctx: &RunContext, path: &Path, options: &ReadOptions) -> bool {
    if deathtensors_io::is_json_index(path) {
        return true;
    }
    let opened = ctx.open_with(path, options.clone());
    if opened.as_ref().is_err_and(|e| matches!(e.kind(), ErrorKind::Unsigned | ErrorKind::UntrustedSigner { .. })) {
        if is_index(ctx, path) {
            return true;
        }
        // Not an index: the command must meet the refusal, never the open
        // without requirements that `is_index` kept.
        ctx.keep(path, opened);
        return false;
    }
    let index = opened.as_ref().is_ok_and(is_legacy_index);
    ctx.keep(path, opened);
    index
}

struct ShardRow {
    path: PathBuf,
    format: &'static str,
    tensors: usize,
    bytes: u64,
    checksum: bool,
}

fn shard_rows(sharded: &ShardedReader) -> anyhow::Result<Vec<ShardRow>> {
    let mut rows = Vec::new();
    for (i, path) in sharded.shard_paths().into_iter().enumerate() {
        let r = sharded.shard_reader(i)?;
        rows.push(ShardRow {
            path,
            format: out::format_name(r.format()),
            tensors: r.header().len(),
            bytes: r.header().tensors().iter().map(|t| t.byte_len()).sum(),
            // Footer, digests, or (for a key holder) the tags of encrypted chunks.
            checksum: r.has_footer() || r.header().tensors().iter().any(|t| t.sha256.is_some()) || r.can_decrypt(),
        });
    }
    Ok(rows)
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// `inspect` of a sharded checkpoint: the index, its shards, and every
/// tensor with the shard that holds it (reads only headers).
pub fn inspect(ctx: &RunContext, path: &Path, as_json: bool) -> anyhow::Result<ExitCode> {
    let sharded = ctx.open_sharded(path, ctx.read_options())?;
    let rows = shard_rows(&sharded)?;
    let mut tensors = Vec::new();
    for name in sharded.keys() {
        let r = sharded.reader_of(name)?;
        let t = r.tensor(name)?.info;
        let shard = file_name(r.path());
        tensors.push((t.clone(), shard));
    }
    let total: u64 = rows.iter().map(|r| r.bytes).sum();
    let params: u64 = tensors.iter().map(|(t, _)| t.numel()).sum();
    let mut out = Out::new();
    if as_json {
        out.json(&json!({
            "index": path.to_string_lossy(),
            "metadata": sharded.metadata(),
            "total_size": sharded.total_size(),
            "shards": rows.iter().map(|r| json!({
                "path": r.path.to_string_lossy(), "format": r.format, "tensors": r.tensors,
                "bytes": r.bytes, "checksum": r.checksum,
            })).collect::<Vec<Value>>(),
            "tensors": tensors.iter().map(|(t, shard)| json!({
                "name": t.name, "dtype": t.dtype.name(), "shape": t.shape, "nbytes": t.byte_len(), "shard": shard,
            })).collect::<Vec<Value>>(),
            "total_bytes": total,
            "parameters": params,
        }))?;
    } else {
        let mut about = vec![
            vec!["index".into(), path.display().to_string()],
            vec!["shards".into(), out::count(rows.len(), "shard")],
            vec![
                "tensors".into(),
                format!(
                    "{}, {} bytes ({}), {params} parameters",
                    out::count(tensors.len(), "tensor"),
                    total,
                    out::size(total)
                ),
            ],
        ];
        if let Some(declared) = sharded.total_size() {
            about.push(vec!["total_size".into(), format!("{declared} (from the index)")]);
        }
        for (i, (k, v)) in sharded.metadata().iter().filter(|(k, _)| *k != "total_size").enumerate() {
            about.push(vec![if i == 0 { "metadata".into() } else { String::new() }, format!("{k} = {v}")]);
        }
        write!(out, "{}", out::table(&about))?;
        writeln!(out)?;
        let mut table = vec![vec!["shard".into(), "format".into(), "tensors".into(), "size".into(), "checksum".into()]];
        for r in &rows {
            table.push(vec![
                file_name(&r.path),
                r.format.into(),
                r.tensors.to_string(),
                out::size(r.bytes),
                if r.checksum { "yes" } else { "-" }.into(),
            ]);
        }
        write!(out, "{}", out::table(&table))?;
        writeln!(out)?;
        let mut table = vec![vec!["name".into(), "dtype".into(), "shape".into(), "size".into(), "shard".into()]];
        for (t, shard) in &tensors {
            table.push(vec![
                t.name.to_string(),
                t.dtype.name().into(),
                out::shape(&t.shape),
                out::size(t.byte_len()),
                shard.clone(),
            ]);
        }
        write!(out, "{}", out::table(&table))?;
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// `verify` of a sharded checkpoint: index and shards agree (every tensor in
/// the shard the index names, nothing else there, `total_size`), and every
/// checksum the shards carry; every shard is opened with `options` (keys,
/// trusted signers, requirements), so a shard that fails them fails. With
/// `--json`, a failure is one JSON document too.
pub fn verify(ctx: &RunContext, args: &VerifyArgs, options: ReadOptions) -> anyhow::Result<ExitCode> {
    verify_checked(ctx, args, options)
        .map_err(|e| crate::verdict::report_json(&args.file, crate::verdict::Kind::Sharded, args.json, e))
}

fn verify_checked(ctx: &RunContext, args: &VerifyArgs, options: ReadOptions) -> anyhow::Result<ExitCode> {
    let (path, allow_missing, as_json) = (args.file.as_path(), args.allow_missing, args.json);
    let signature_required = options.require_signature || !options.trusted_signers.is_empty();
    let sharded = ctx.open_sharded(path, options)?;
    let rows = shard_rows(&sharded)?;
    let bar = progress::bar(rows.iter().map(|r| r.bytes).sum(), "verifying");
    let result = sharded.verify();
    bar.finish_and_clear();
    let with_checksum = rows.iter().filter(|r| r.checksum).count();
    let display = path.display();
    if let Err(e) = result {
        let integrity = e.is_integrity() || matches!(e.kind(), ErrorKind::InvalidInput(_) | ErrorKind::Format(_));
        if integrity {
            return Err(CheckFailed(format!("{display}: FAILED: {e}")).into());
        }
        return Err(e.into());
    }
    if signature_required {
        for i in 0..rows.len() {
            crate::verdict::unsigned_tensors(sharded.shard_reader(i)?)?;
        }
    }
    if with_checksum == 0 && !allow_missing {
        return Err(CheckFailed(format!(
            "{display}: index and {} agree, but no shard carries a checksum to verify (pass --allow-missing to accept that)",
            out::count(rows.len(), "shard")
        ))
        .into());
    }
    let mut out = Out::new();
    if as_json {
        let checked = json!({
            "shards": rows.len(), "shards_with_checksum": with_checksum, "tensors": sharded.len(),
        });
        out.json(&crate::verdict::Report::ok(path, crate::verdict::Kind::Sharded, checked).to_json())?;
    } else {
        writeln!(
            out,
            "{display}: ok: index and {} agree ({}); {with_checksum} of the shards carry checksums, all verified",
            out::count(rows.len(), "shard"),
            out::count(sharded.len(), "tensor"),
        )?;
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// `convert` of a sharded checkpoint: into one file, or (when OUT is an
/// `*.index.json`) shard by shard into a sharded checkpoint of the other
/// format with a new index, each file written with `write` and the
/// metadata of its source. Streaming and atomic per file; the index last.
pub fn convert(
    ctx: &RunContext,
    input: &Path,
    output: &Path,
    write: &WriteOptions,
    read_options: ReadOptions,
) -> anyhow::Result<()> {
    let sharded = ctx.open_sharded(input, read_options)?;
    let format = write.format;
    let options_for = |metadata| WriteOptions { metadata, ..write.clone() };
    let spec_of = |name: &str| -> anyhow::Result<TensorSpec> {
        let t = sharded.reader_of(name)?.tensor(name)?.info;
        Ok(t.to_spec())
    };
    let name = output.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if let Some(stem) = name.strip_suffix(INDEX_SUFFIX) {
        let stem = stem.trim_end_matches(".safetensors").trim_end_matches(".deathtensors");
        let ext = match format {
            Format::Deathtensors => "deathtensors",
            Format::Safetensors => "safetensors",
            Format::Bintensors => "bt",
        };
        let dir = output.parent().unwrap_or(Path::new(""));
        let count = sharded.shard_paths().len();
        let mut weight_map = Vec::new();
        let mut total = 0u64;
        // Every file under a temp name until all are written, then renamed
        // into place, the index last: a failed convert leaves nothing and
        // replaces nothing.
        let mut staged = StagedFiles::new(true);
        for i in 0..count {
            let reader = sharded.shard_reader(i)?;
            let file = format!("{stem}-{:05}-of-{count:05}.{ext}", i + 1);
            let specs =
                reader.header().tensors().iter().map(|t| spec_of(&t.name)).collect::<anyhow::Result<Vec<_>>>()?;
            for s in &specs {
                weight_map.push((s.name.clone(), file.clone()));
                total += s.byte_len()?;
            }
            let metadata = reader.header().metadata().cloned().filter(|m| !m.is_empty());
            copy::copy_staged(reader, &mut staged, &dir.join(&file), specs, &options_for(metadata))?;
        }
        staged
            .write(output, |at| write_index(at, &weight_map, total, Some(sharded.metadata()), true))
            .map_err(|e| exit::writing(e, output))?;
        staged.commit().map_err(|e| exit::writing(e, output))?;
        return Ok(());
    }
    // Everything into one file, in index order.
    let specs = sharded.keys().map(spec_of).collect::<anyhow::Result<Vec<_>>>()?;
    // The index's total_size describes the shards, not the merged file.
    let mut metadata = sharded.metadata().clone();
    metadata.remove("total_size");
    let options = options_for(Some(metadata).filter(|m| !m.is_empty()));
    copy::copy_from(|name| sharded.reader_of(name), output, specs, &options)?;
    Ok(())
}

/// What a command that reads tensors opened: one file (or URL), or a
/// sharded checkpoint (either index layout, local or a URL). `ls`, `cat`,
/// `stats` take both, through this.
#[allow(clippy::large_enum_variant)] // one per run
pub enum Input {
    /// One file.
    File(deathtensors_io::Reader),
    /// A sharded checkpoint.
    Sharded(Box<ShardedReader>),
}

impl Input {
    /// Opens `path` with the run's keys: a sharded index, or a file.
    ///
    /// # Errors
    /// The open's.
    pub fn open(ctx: &RunContext, path: &Path) -> anyhow::Result<Input> {
        if is_index(ctx, path) {
            return Ok(Input::Sharded(Box::new(ctx.open_sharded(path, ctx.read_options())?)));
        }
        let reader = ctx.open(path)?;
        reader.check_not_hidden()?;
        Ok(Input::File(reader))
    }

    /// The tensor names, in the header's (or the index's) order.
    pub fn names(&self) -> Vec<&str> {
        match self {
            Input::File(r) => r.header().tensors().iter().map(|t| t.name.as_str()).collect(),
            Input::Sharded(s) => s.keys().collect(),
        }
    }

    /// The reader holding tensor `name` (opening its shard).
    ///
    /// # Errors
    /// `TensorNotFound`; the shard's open.
    pub fn reader_of(&self, name: &str) -> deathtensors_io::Result<&deathtensors_io::Reader> {
        match self {
            Input::File(r) => r.tensor(name).map(|_| r),
            Input::Sharded(s) => {
                let r = s.reader_of(name)?;
                r.check_not_hidden()?;
                Ok(r)
            }
        }
    }

    /// Every tensor's entry by name (opening every shard).
    ///
    /// # Errors
    /// As [`Input::reader_of`].
    pub fn infos(&self) -> deathtensors_io::Result<std::collections::HashMap<&str, &TensorInfo>> {
        let entry = |name| self.reader_of(name).and_then(|r| Ok((name, r.tensor(name)?.info)));
        self.names().into_iter().map(entry).collect()
    }

    /// Checks the digests (or the footer) of `names`, shard by shard.
    ///
    /// # Errors
    /// `ChecksumMismatch`; the reads' errors.
    pub fn check(&self, names: &[&str]) -> deathtensors_io::Result<()> {
        let mut runs: Vec<(&deathtensors_io::Reader, Vec<&str>)> = Vec::new();
        for &name in names {
            let reader = self.reader_of(name)?;
            match runs.iter_mut().find(|(r, _)| std::ptr::eq(*r, reader)) {
                Some((_, run)) => run.push(name),
                None => runs.push((reader, vec![name])),
            }
        }
        runs.iter().try_for_each(|(reader, names)| crate::integrity::check(reader, names))
    }
}

impl deathtensors_io::TensorSet for Input {
    fn check_listed(&self) -> deathtensors_io::Result<()> {
        match self {
            Input::File(r) => r.check_listed(),
            Input::Sharded(s) => s.check_listed(),
        }
    }

    fn names(&self) -> Vec<&str> {
        Input::names(self)
    }

    fn global_metadata(&self) -> deathtensors_io::format::Metadata {
        match self {
            Input::File(r) => r.global_metadata(),
            Input::Sharded(s) => s.global_metadata(),
        }
    }

    fn reader_of(&self, name: &str) -> deathtensors_io::Result<&deathtensors_io::Reader> {
        Input::reader_of(self, name)
    }
}
