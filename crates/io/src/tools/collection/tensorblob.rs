//! tensorblob directories, read-only: `.conf` (dtype, row shape, block
//! size), `.stat` (row count, block file names) and headerless block files
//! of `block_size` rows each (docs/FORMAT.md section 13.5).

use std::path::Path;

use deathtensors_format::{check_block_name, Dtype, Manifest, Metadata, RowLayout};
use serde_json::Value;

use super::state::{Collection, CollectionKind, Slot};
use crate::error::{Error, Result};

/// The longest `.conf` or `.stat` read (the names of 16 million blocks).
const MAX_JSON_LEN: u64 = 1 << 30;

/// Whether `dir` looks like a tensorblob directory.
pub(crate) fn is_tensorblob(dir: &Path) -> bool {
    dir.join(".conf").is_file() && dir.join(".stat").is_file()
}

/// The dtype of a torch dtype name, as tensorblob stores it.
pub(crate) fn dtype_of_torch_name(name: &str) -> Option<Dtype> {
    Some(match name {
        "bool" => Dtype::BOOL,
        "uint8" => Dtype::U8,
        "int8" => Dtype::I8,
        "int16" | "short" => Dtype::I16,
        "uint16" => Dtype::U16,
        "int32" | "int" => Dtype::I32,
        "uint32" => Dtype::U32,
        "int64" | "long" => Dtype::I64,
        "uint64" => Dtype::U64,
        "float16" | "half" => Dtype::F16,
        "bfloat16" => Dtype::BF16,
        "float32" | "float" => Dtype::F32,
        "float64" | "double" => Dtype::F64,
        "complex64" | "cfloat" => Dtype::C64,
        "complex128" | "cdouble" => Dtype::C128,
        "float8_e4m3fn" => Dtype::F8_E4M3,
        "float8_e5m2" => Dtype::F8_E5M2,
        "float8_e4m3fnuz" => Dtype::F8_E4M3FNUZ,
        "float8_e5m2fnuz" => Dtype::F8_E5M2FNUZ,
        "float8_e8m0fnu" => Dtype::F8_E8M0,
        _ => return None,
    })
}

fn read_json(path: &Path) -> Result<Value> {
    use std::io::Read;
    let doing = "cannot open tensorblob";
    let file = std::fs::File::open(path).map_err(|e| Error::io(e, path, doing))?;
    let mut bytes = Vec::new();
    file.take(MAX_JSON_LEN + 1).read_to_end(&mut bytes).map_err(|e| Error::io(e, path, doing))?;
    if bytes.len() as u64 > MAX_JSON_LEN {
        return Err(Error::input(format!("longer than {MAX_JSON_LEN} bytes"), path, doing));
    }
    serde_json::from_slice(&bytes).map_err(|e| Error::input(format!("not valid JSON: {e}"), path, doing))
}

pub(crate) fn open(dir: &Path) -> Result<Collection> {
    let doing = "cannot open tensorblob";
    let conf_path = dir.join(".conf");
    let conf = read_json(&conf_path)?;
    let bad = |what: &str| Error::input(format!("bad .conf: {what}"), &conf_path, doing);
    let dtype_name = conf.get("dtype").and_then(Value::as_str).ok_or_else(|| bad("no string \"dtype\""))?;
    let dtype = dtype_of_torch_name(dtype_name).ok_or_else(|| bad(&format!("unknown dtype {dtype_name:?}")))?;
    let shape = conf
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"shape\" array"))?
        .iter()
        .map(|d| d.as_u64().ok_or_else(|| bad("\"shape\" holds something other than non-negative integers")))
        .collect::<Result<Vec<u64>>>()?;
    let block_rows = conf.get("block_size").and_then(Value::as_u64).ok_or_else(|| bad("no integer \"block_size\""))?;
    let layout = RowLayout::new(dtype, shape, block_rows).map_err(|e| bad(&e.to_string()))?;

    let stat_path = dir.join(".stat");
    let stat = read_json(&stat_path)?;
    let bad = |what: String| Error::input(format!("bad .stat: {what}"), &stat_path, doing);
    let rows = match stat.get("len") {
        None => 0,
        Some(v) => v.as_u64().ok_or_else(|| bad("\"len\" is not a non-negative integer".into()))?,
    };
    let names: Vec<String> = match stat.get("bds") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| bad("\"bds\" holds a non-string".into())))
            .collect::<Result<_>>()?,
        Some(_) => return Err(bad("\"bds\" is not an array".into())),
    };
    let needed = rows.div_ceil(block_rows);
    if names.len() as u64 != needed {
        return Err(bad(format!(
            "{rows} rows in blocks of {block_rows} need {needed} block files, \"bds\" lists {}",
            names.len()
        )));
    }
    for name in &names {
        check_block_name(name).map_err(|e| bad(format!("block name {name:?}: {e}")))?;
    }
    let mut manifest = Manifest::new(layout);
    manifest.blocks = names
        .iter()
        .enumerate()
        .map(|(i, file)| deathtensors_format::BlockRef {
            file: file.clone(),
            rows: if (i as u64 + 1) < needed { block_rows } else { rows - i as u64 * block_rows },
            sha256: None,
        })
        .collect();
    manifest.check().map_err(|e| bad(e.to_string()))?;
    let slots = manifest.blocks.iter().map(Slot::from_ref).collect::<Vec<_>>();
    Ok(Collection {
        dir: dir.to_path_buf(),
        kind: CollectionKind::Tensorblob,
        layout: manifest.layout,
        metadata: Metadata::new(),
        generation: 0,
        slots,
        writer: None,
    })
}
