//! `deathtensors stats`: per-tensor statistics, streaming and on all cores.

use std::io::Write;

use deathtensors_io::format::TensorInfo;
use deathtensors_io::{tensor_stats, values, Reader, Stats};
use serde_json::{json, Value};

use crate::args::StatsArgs;
use crate::context::RunContext;
use crate::exit::ExitCode;
use crate::out::{self, Out};
use crate::progress;

const COMPLEX_NOTE: &str = "complex: statistics over real and imaginary parts";

pub fn run(args: StatsArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let input = crate::sharded::Input::open(ctx, &args.file)?;
    let wanted: Vec<&str> =
        if args.names.is_empty() { input.names() } else { args.names.iter().map(String::as_str).collect() };
    // Each tensor with its reader (a shard's, for a sharded checkpoint),
    // in runs of one reader: every run is checked and summed as one file.
    let mut runs: Vec<(&Reader, Vec<&TensorInfo>)> = Vec::new();
    for name in wanted {
        let reader = input.reader_of(name)?;
        let info = reader.tensor(name)?.info;
        match runs.last_mut() {
            Some((r, tensors)) if std::ptr::eq(*r, reader) => tensors.push(info),
            _ => runs.push((reader, vec![info])),
        }
    }
    let tensors: Vec<&TensorInfo> = runs.iter().flat_map(|(_, t)| t.iter().copied()).collect();
    let total = tensors.iter().filter(|t| values::element_size(t.dtype).is_some()).map(|t| t.byte_len()).sum();
    for (reader, tensors) in &runs {
        let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        crate::integrity::check(reader, &names)?;
    }
    let bar = progress::bar(total, "computing");
    // `None` for the sub-byte dtypes, whose values are not decoded.
    let mut outcomes = Vec::with_capacity(tensors.len());
    for (reader, tensors) in &runs {
        outcomes.extend(tensor_stats(reader, tensors, |n| bar.inc(n))?);
    }
    bar.finish_and_clear();

    let mut out = Out::new();
    if args.json {
        let rows: Vec<Value> = tensors.iter().zip(&outcomes).map(|(t, o)| to_json(t, o)).collect();
        out.json(&json!({ "path": args.file.to_string_lossy(), "tensors": rows }))?;
    } else {
        let mut rows = vec![["name", "dtype", "count", "min", "max", "mean", "std", "zeros", "nan", "inf"]
            .map(String::from)
            .to_vec()];
        let mut complex = false;
        for (t, outcome) in tensors.iter().zip(&outcomes) {
            let mut row = vec![t.name.to_string(), t.dtype.name().to_string()];
            match outcome {
                None => {
                    row.extend(["-"; 8].map(String::from));
                    row.push(values::SUB_BYTE.to_string());
                }
                Some(acc) => {
                    complex |= values::components(t.dtype) == 2;
                    row.push(acc.count.to_string());
                    match acc.summary() {
                        Some(s) => row.extend(s.iter().map(|&x| out::g(x))),
                        None => row.extend(["-"; 4].map(String::from)),
                    }
                    row.extend([acc.zeros, acc.nan, acc.inf].map(|n| n.to_string()));
                }
            }
            rows.push(row);
        }
        write!(out, "{}", out::table(&rows))?;
        if complex {
            writeln!(out, "({COMPLEX_NOTE})")?;
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

fn to_json(t: &TensorInfo, outcome: &Option<Stats>) -> Value {
    let mut row = json!({ "name": t.name, "dtype": t.dtype.name() });
    match outcome {
        None => row["error"] = values::SUB_BYTE.into(),
        Some(acc) => {
            let [min, max, mean, std] =
                acc.summary().map_or([Value::Null, Value::Null, Value::Null, Value::Null], |s| {
                    s.map(|x| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number))
                });
            let fields = json!({
                "count": acc.count, "min": min, "max": max, "mean": mean, "std": std,
                "zeros": acc.zeros, "nan": acc.nan, "inf": acc.inf,
            });
            if let (Value::Object(row), Value::Object(fields)) = (&mut row, fields) {
                row.extend(fields);
            }
            if values::components(t.dtype) == 2 {
                row["note"] = COMPLEX_NOTE.into();
            }
        }
    }
    row
}
