//! `deathtensors diff`: what differs between two files, across formats.

use std::io::Write;

use deathtensors_io::format::TensorInfo;
use deathtensors_io::{diff, values, Compare, MetadataChange};
use serde_json::{json, Value};

use crate::args::DiffArgs;
use crate::context::RunContext;
use crate::exit::ExitCode;
use crate::out::{self, Out};
use crate::progress;
use crate::sharded::Input;

fn metadata_json(changes: &[MetadataChange]) -> Value {
    changes.iter().map(|c| json!({ "key": c.key, "a": c.a, "b": c.b })).collect::<Vec<_>>().into()
}

fn describe_change(c: &MetadataChange) -> String {
    let key = &c.key;
    match (&c.a, &c.b) {
        (None, Some(b)) => format!("{key:?} added: {b:?}"),
        (Some(a), None) => format!("{key:?} removed (was {a:?})"),
        (Some(a), Some(b)) => format!("{key:?}: {a:?} -> {b:?}"),
        (None, None) => key.to_string(),
    }
}

pub fn run(args: DiffArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    // io's rule; the flags' names said here.
    let compare = Compare::tolerances(args.atol, args.rtol).map_err(|m| anyhow::anyhow!("--atol/--rtol: {m}"))?;
    // Files or sharded checkpoints, either side.
    let a = Input::open(ctx, &args.a)?;
    let b = Input::open(ctx, &args.b)?;
    let (ha, hb) = (a.infos()?, b.infos()?);
    // The tensors both sides have are compared: each side checked first.
    let both: Vec<&str> = ha.keys().copied().filter(|n| hb.contains_key(n)).collect();
    a.check(&both)?;
    b.check(&both)?;
    let total = both.iter().map(|n| ha[n].byte_len()).sum();
    let bar = progress::bar(total, "comparing");
    let d = diff(&a, &b, compare, |n| bar.inc(n))?;
    bar.finish_and_clear();
    let identical = d.identical();
    // Every name below is in the side it is looked up in.
    let in_a = |name: &String| ha[name.as_str()];
    let in_b = |name: &String| hb[name.as_str()];
    let removed: Vec<&TensorInfo> = d.removed.iter().map(in_a).collect();
    let added: Vec<&TensorInfo> = d.added.iter().map(in_b).collect();
    let retyped: Vec<(&TensorInfo, &TensorInfo)> = d.retyped.iter().map(|n| (in_a(n), in_b(n))).collect();
    let changed: Vec<(&TensorInfo, _)> = d.values.iter().map(|(n, v)| (in_a(n), v)).collect();
    let (global, per_tensor) = (&d.metadata, &d.tensor_metadata);

    let mut out = Out::new();
    if args.json {
        let brief = |t: &TensorInfo| json!({ "name": t.name, "dtype": t.dtype.name(), "shape": t.shape });
        let doc = json!({
            "a": args.a.to_string_lossy(),
            "b": args.b.to_string_lossy(),
            "identical": identical,
            "comparison": match compare {
                Compare::Exact => json!("exact"),
                Compare::Close { atol, rtol } => json!({ "atol": atol, "rtol": rtol }),
            },
            "removed": removed.iter().map(|t| brief(t)).collect::<Vec<_>>(),
            "added": added.iter().map(|t| brief(t)).collect::<Vec<_>>(),
            "dtype_or_shape": retyped.iter().map(|(ta, tb)| json!({
                "name": ta.name,
                "a": { "dtype": ta.dtype.name(), "shape": ta.shape },
                "b": { "dtype": tb.dtype.name(), "shape": tb.shape },
            })).collect::<Vec<_>>(),
            "values": changed.iter().map(|(t, v)| json!({
                "name": t.name,
                "dtype": t.dtype.name(),
                "elements": t.numel(),
                "differing": v.differing,
                "unit": if values::element_size(t.dtype).is_some() { "elements" } else { "bytes" },
                "max_abs_diff": v.max_abs_diff,
            })).collect::<Vec<_>>(),
            "metadata": metadata_json(global),
            "tensor_metadata": per_tensor.iter().map(|(name, d)| json!({
                "name": name, "changes": metadata_json(d),
            })).collect::<Vec<_>>(),
        });
        out.json(&doc)?;
    } else if identical {
        writeln!(out, "identical: {}, and the same metadata", out::count(ha.len(), "tensor"))?;
    } else {
        writeln!(out, "--- {}", args.a.display())?;
        writeln!(out, "+++ {}", args.b.display())?;
        for t in &removed {
            writeln!(out, "- {}  {} {}", t.name, t.dtype, out::shape(&t.shape))?;
        }
        for t in &added {
            writeln!(out, "+ {}  {} {}", t.name, t.dtype, out::shape(&t.shape))?;
        }
        for (ta, tb) in &retyped {
            let mut what = Vec::new();
            if ta.dtype != tb.dtype {
                what.push(format!("dtype {} -> {}", ta.dtype, tb.dtype));
            }
            if ta.shape != tb.shape {
                what.push(format!("shape {} -> {}", out::shape(&ta.shape), out::shape(&tb.shape)));
            }
            writeln!(out, "~ {}  {}", ta.name, what.join(", "))?;
        }
        for (t, v) in &changed {
            let (unit, total) = match values::element_size(t.dtype) {
                Some(_) => ("elements", t.numel()),
                None => ("bytes", t.byte_len()),
            };
            let max = v.max_abs_diff.map_or(String::new(), |m| format!(", max |a - b| = {}", out::g(m)));
            writeln!(out, "~ {}  values: {} of {total} {unit} differ{max}", t.name, v.differing)?;
        }
        for c in global {
            writeln!(out, "~ metadata  {}", describe_change(c))?;
        }
        for (name, changes) in per_tensor {
            for c in changes {
                writeln!(out, "~ {name}  metadata {}", describe_change(c))?;
            }
        }
    }
    out.finish()?;
    Ok(if identical { ExitCode::Success } else { ExitCode::Failure })
}
