//! `deathtensors convert`: between deathtensors, safetensors and bintensors,
//! streaming and atomic.

use std::io::Write;
use std::path::Path;

use anyhow::bail;
use deathtensors_io::format::{Format, Header, Limits, TensorInfo, TensorSpec, DEFAULT_ALIGNMENT};
use deathtensors_io::WriteOptions;

use crate::args::{ConvertArgs, FormatArg};
use crate::context::RunContext;
use crate::copy;
use crate::exit::ExitCode;
use crate::out::{self, Out};

/// The format named by a file's extension (or, for an index
/// `*.<ext>.index.json`, by the extension before it), if it names one.
fn format_of(path: &Path) -> Option<Format> {
    let name = path.file_name()?.to_str()?;
    let name = name.strip_suffix(deathtensors_io::INDEX_SUFFIX).unwrap_or(name);
    match Path::new(name).extension()?.to_str()? {
        "safetensors" => Some(Format::Safetensors),
        "dt" | "deathtensors" => Some(Format::Deathtensors),
        "bt" | "bintensors" => Some(Format::Bintensors),
        _ => None,
    }
}

/// `decrypt` given only Ed25519 keys (a signer's, public or secret): said
/// as precisely as an X25519 public key is (issue 61: it was "no key given
/// matches").
fn signer_keys_only(files: &[std::path::PathBuf]) -> anyhow::Result<()> {
    let mut described = Vec::new();
    for f in files {
        described.push((f, deathtensors_io::describe_key_file(f)?));
    }
    let signers_only =
        !described.is_empty() && described.iter().all(|(_, keys)| keys.iter().all(|k| k.kind == "ed25519"));
    if let (true, Some((f, keys))) = (signers_only, described.first()) {
        let kid = keys.first().and_then(|k| k.kid.as_deref()).map_or(String::new(), |kid| format!(" {kid:?}"));
        bail!(
            "--key {}: this is an Ed25519 key{kid}, a signer's (it signs and checks signatures); decrypting needs a \
             symmetric key or an X25519 secret key (keygen --type symmetric or x25519 --out writes one)",
            f.display()
        );
    }
    Ok(())
}

/// A torch pickle checkpoint (`.bin`, `.pt`, ...) converted through io's
/// pickle reader, which runs nothing (docs/PICKLE.md).
fn torch_checkpoint(
    args: &ConvertArgs,
    format: Format,
    compress: deathtensors_io::Compress,
) -> anyhow::Result<ExitCode> {
    let write = torch_write_options(args, format, compress)?;
    let header = deathtensors_io::convert_torch_checkpoint(&args.input, &args.output, &write, args.skip_other_values)?;
    let mut out = Out::new();
    writeln!(
        out,
        "{} -> {}: {} tensors of a torch checkpoint (read without running its pickle) written as {}",
        args.input.display(),
        args.output.display(),
        header.tensors().len(),
        out::format_name(format)
    )?;
    out.finish()?;
    Ok(ExitCode::Success)
}

/// A sharded torch checkpoint (transformers' `pytorch_model.bin.index.json`)
/// converted shard by shard through io, its index written last.
fn torch_index(args: &ConvertArgs, format: Format, compress: deathtensors_io::Compress) -> anyhow::Result<ExitCode> {
    let write = torch_write_options(args, format, compress)?;
    let shards = deathtensors_io::convert_torch_index(&args.input, &args.output, &write, args.skip_other_values)?;
    let mut out = Out::new();
    writeln!(
        out,
        "{} -> {}: {} torch shards (read without running their pickles) written as {}",
        args.input.display(),
        args.output.display(),
        shards.len(),
        out::format_name(format)
    )?;
    out.finish()?;
    Ok(ExitCode::Success)
}

/// The write options of a torch checkpoint's conversion.
fn torch_write_options(
    args: &ConvertArgs,
    format: Format,
    compress: deathtensors_io::Compress,
) -> anyhow::Result<WriteOptions> {
    if format == Format::Bintensors {
        bail!("a torch checkpoint converts to safetensors or deathtensors; convert that to bintensors after");
    }
    if format != Format::Deathtensors && (args.checksum || args.alignment.is_some()) {
        bail!("--checksum and --alignment apply to deathtensors output only");
    }
    Ok(WriteOptions {
        format,
        alignment: args.alignment.unwrap_or(DEFAULT_ALIGNMENT),
        checksum: args.checksum && format == Format::Deathtensors,
        compress,
        ..WriteOptions::default()
    })
}

pub fn run(args: ConvertArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    run_with(args, false, ctx)
}

/// `convert`, or `decrypt` when `decrypt`: only `decrypt` writes the
/// plaintext of an encrypted file, so that no conversion drops encryption
/// by accident.
pub fn run_with(args: ConvertArgs, decrypt: bool, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    // The input first: a missing input is the error, whatever OUT is.
    if crate::remote::url(&args.input).is_none() {
        if let Err(e) = args.input.symlink_metadata() {
            // The same words as every command's for a file it cannot open.
            return Err(deathtensors_io::Error::from_io(e, &args.input, "cannot open the input").into());
        }
    }
    if !decrypt && crate::collection::is_collection(&args.input) {
        // A collection becomes a collection (OUT without an extension) or
        // one tensor of a file.
        let format = match args.format {
            Some(FormatArg::Deathtensors) => Some(Format::Deathtensors),
            Some(FormatArg::Safetensors) => Some(Format::Safetensors),
            Some(FormatArg::Bintensors) => Some(Format::Bintensors),
            None => format_of(&args.output),
        };
        if args.output.extension().is_some() && format.is_none() {
            bail!(
                "cannot tell the output format of {}: name it .safetensors, .dt or .bt to export the rows, \
                 or give a directory without an extension for a new collection",
                args.output.display()
            );
        }
        return crate::collection::convert(&args.input, &args.output, format, args.checksum, None);
    }
    let format = match args.format {
        Some(FormatArg::Deathtensors) => Format::Deathtensors,
        Some(FormatArg::Safetensors) => Format::Safetensors,
        Some(FormatArg::Bintensors) => Format::Bintensors,
        None => match format_of(&args.output) {
            Some(format) => format,
            None => bail!(
                "cannot tell the output format of {}: name it .safetensors, .dt, .deathtensors or .bt, or pass --format",
                args.output.display()
            ),
        },
    };
    if args.compress.is_some() && format != Format::Deathtensors {
        bail!("--compress applies to deathtensors output only");
    }
    let compress = match (args.compress, args.blob) {
        (None, _) => deathtensors_io::Compress::Off,
        (Some(level), false) => deathtensors_io::Compress::Chunked { level },
        (Some(level), true) => deathtensors_io::Compress::Blob { level },
    };
    if decrypt {
        signer_keys_only(&args.read.keys.keys)?;
    }
    if !decrypt && crate::remote::url(&args.input).is_none() {
        if deathtensors_io::is_torch_checkpoint(&args.input) {
            return torch_checkpoint(&args, format, compress);
        }
        if deathtensors_io::is_torch_index(&args.input) {
            return torch_index(&args, format, compress);
        }
    }
    // Signatures and requirements (--signer, --require-signature) are
    // checked at open; every tensor is then checked against what the
    // signature commits to as it is read. The input is opened once.
    let options = ctx.read_options_requiring(&args.signer, args.require_signature)?;
    if crate::sharded::is_index_requiring(ctx, &args.input, &options) {
        if format != Format::Deathtensors && (args.checksum || args.alignment.is_some()) {
            bail!("--checksum and --alignment apply to deathtensors output only");
        }
        let write = WriteOptions {
            format,
            alignment: args.alignment.unwrap_or(DEFAULT_ALIGNMENT),
            checksum: args.checksum && format == Format::Deathtensors,
            compress,
            ..WriteOptions::default()
        };
        crate::sharded::convert(ctx, &args.input, &args.output, &write, options)?;
        let mut out = Out::new();
        writeln!(
            out,
            "{} -> {}: sharded checkpoint converted to {}",
            args.input.display(),
            args.output.display(),
            out::format_name(format)
        )?;
        out.finish()?;
        return Ok(ExitCode::Success);
    }
    let reader = ctx.open_kept_or(&args.input, || options)?;
    if reader.is_encrypted() && !decrypt {
        bail!(
            "{} is encrypted: `convert` would write its plaintext; use `deathtensors decrypt` for that, or \
             `deathtensors encrypt` to re-encrypt it",
            args.input.display()
        );
    }
    if decrypt && !reader.is_encrypted() {
        bail!("{} is not encrypted: use `deathtensors convert`", args.input.display());
    }
    let header = reader.header();
    // Warnings about what the copy drops, printed once it is done: a copy
    // that fails did not drop anything.
    let mut warnings: Vec<String> = Vec::new();
    if !reader.signatures().is_empty() {
        warnings.push(
            if format == Format::Deathtensors {
                "the input's signatures are not carried over: sign the output again (`deathtensors sign`)"
            } else {
                "the input's signatures are not carried over: the output's format cannot be signed"
            }
            .to_string(),
        );
    }
    let had_checksum = reader.has_footer() || header.tensors().iter().any(|t| t.sha256.is_some());
    let checksum = match format {
        Format::Safetensors => {
            if args.checksum {
                bail!("--checksum: safetensors files have no checksum; convert to deathtensors to keep one");
            }
            if args.alignment.is_some() {
                bail!("--alignment: safetensors files pack their tensors with no alignment; convert to deathtensors");
            }
            if let Some(t) = header.tensors().iter().find(|t| !Format::Safetensors.holds(t.dtype)) {
                bail!(
                    "cannot convert {} to safetensors: tensor {:?} is C128 (complex128), which safetensors cannot \
                     store; keep it in deathtensors",
                    args.input.display(),
                    t.name
                );
            }
            let with_metadata: Vec<&str> =
                header.tensors().iter().filter(|t| !t.metadata.is_empty()).map(|t| t.name.as_str()).collect();
            if let Some(first) = with_metadata.first() {
                warnings.push(format!(
                    "per-tensor metadata of {} tensor(s) (first {first:?}) is dropped: safetensors has none",
                    with_metadata.len()
                ));
            }
            if had_checksum {
                warnings.push("the input's checksums are dropped: safetensors has none".into());
            }
            false
        }
        Format::Bintensors => {
            let name = "bintensors";
            if args.checksum {
                bail!("--checksum: {name} files have no checksum; convert to deathtensors to keep one");
            }
            if args.alignment.is_some() {
                bail!("--alignment: {name} files pack their tensors with no alignment; convert to deathtensors");
            }
            // bintensors has 15 of our dtypes: ask the format crate which.
            let storable = |t: &TensorInfo| Header::new_bintensors(vec![t.to_spec()], None, &Limits::DEFAULT).is_ok();
            if let Some(t) = header.tensors().iter().find(|t| !storable(t)) {
                bail!(
                    "cannot convert {} to {name}: tensor {:?} is {}, which {name} cannot store; keep it in \
                     deathtensors or safetensors",
                    args.input.display(),
                    t.name,
                    t.dtype
                );
            }
            let with_metadata: Vec<&str> =
                header.tensors().iter().filter(|t| !t.metadata.is_empty()).map(|t| t.name.as_str()).collect();
            if let Some(first) = with_metadata.first() {
                warnings.push(format!(
                    "per-tensor metadata of {} tensor(s) (first {first:?}) is dropped: {name} has none",
                    with_metadata.len()
                ));
            }
            if had_checksum {
                warnings.push(format!("the input's checksums are dropped: {name} has none"));
            }
            false
        }
        Format::Deathtensors => args.checksum || (had_checksum && !args.no_checksum),
    };
    let metadata = match (format, header.format(), reader.model_metadata()) {
        // An empty global_metadata becomes no __metadata__ at all, as
        // safetensors writes a file saved without metadata; and no
        // metadata in bintensors (which tells it from an empty map) unless
        // the input is bintensors with an empty map.
        (Format::Safetensors, _, Some(m)) if m.is_empty() => None,
        (Format::Bintensors, from, Some(m)) if m.is_empty() && from != Format::Bintensors => None,
        (_, _, m) => m,
    };
    let specs: Vec<TensorSpec> = header.tensors().iter().map(TensorInfo::to_spec).collect();
    let options = WriteOptions {
        format,
        alignment: args.alignment.unwrap_or(DEFAULT_ALIGNMENT),
        checksum,
        metadata,
        compress,
        ..WriteOptions::default()
    };
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    crate::integrity::footer_for(&reader, &names)?;
    let (bytes, n) = (header.tensors().iter().map(|t| t.byte_len()).sum::<u64>(), header.len());
    copy::copy(reader, &args.output, specs, &options)?;
    for w in &warnings {
        out::warn(w);
    }
    let mut out = Out::new();
    let with = match (checksum, compress) {
        (true, deathtensors_io::Compress::Off) => ", with checksum",
        (false, deathtensors_io::Compress::Off) => "",
        (true, _) => ", compressed, with checksum",
        (false, _) => ", compressed",
    };
    writeln!(
        out,
        "{} -> {}: {}, {}, {}{with}",
        args.input.display(),
        args.output.display(),
        out::format_name(format),
        out::count(n, "tensor"),
        out::size(bytes)
    )?;
    out.finish()?;
    Ok(ExitCode::Success)
}
