//! The checkpoint document (`deathtensors.json`, `docs/DISTRIBUTED.md`):
//! its limits, its parse with every check (the one both `consolidate` and
//! Python's `deathtensors.distributed` run), chunks and their tiles, and
//! the cover check (chunks add up to their tensor without overlapping).
//! The names of its files are format's (`checkpoint_names`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use deathtensors_format::{block_name, is_save_id, parse_rank_file_name, Dtype};
use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The largest metadata document read: a checkpoint of 100,000 tensors
/// sharded on 1,000 ranks needs about 100 MB; the bound keeps a hostile
/// document from taking all memory.
pub const MAX_METADATA_BYTES: u64 = 512 << 20;
/// Tensors of more dimensions are refused (torch allows 64).
pub const MAX_RANK: usize = 64;
/// Chunks of more tiles are refused: a writer makes tiles of megabytes, so
/// a chunk of a million tiles is a terabyte; a hostile `rows` of 1 on a
/// huge chunk is refused before its tiles are listed.
pub const MAX_TILES: u64 = 1 << 20;
/// Tensors of more chunks are not checked for overlaps (the check is
/// quadratic); their chunks must still add up to the tensor.
const MAX_OVERLAP_CHECK: usize = 4096;
/// The version of the document this code reads.
pub const DCP_VERSION: u64 = 1;
/// The document's fields.
const FIELDS: [&str; 9] = [
    "deathtensors_dcp",
    "save_id",
    "format",
    "dcp_version",
    "files",
    "tensors",
    "values",
    "planner_data",
    "storage_meta",
];

/// One saved chunk of a tensor: where its tiles are.
#[derive(Debug)]
pub(super) struct Chunk {
    pub(super) offsets: Vec<u64>,
    pub(super) sizes: Vec<u64>,
    pub(super) file: String,
    /// Rows a tile, along the first dimension.
    pub(super) rows: u64,
    /// Columns a tile, along the second (`None`: all of them).
    pub(super) cols: Option<u64>,
    pub(super) sha256: Option<Vec<String>>,
}

/// A tile of a chunk: rows `r0..r1` and columns (indices of the second
/// dimension) `c0..c1` within it; columns `0..0` for fewer than two
/// dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    /// First row.
    pub r0: u64,
    /// Row after the last.
    pub r1: u64,
    /// First column.
    pub c0: u64,
    /// Column after the last.
    pub c1: u64,
}

impl Chunk {
    /// How many tiles the chunk has, without listing them.
    pub(super) fn tile_count(&self) -> Option<u64> {
        let (Some(&n), false) = (self.sizes.first(), self.sizes.contains(&0)) else { return Some(1) };
        let across = match (self.cols, self.sizes.get(1)) {
            (Some(c), Some(&w)) => w.div_ceil(c),
            _ => 1,
        };
        n.div_ceil(self.rows).checked_mul(across)
    }

    /// The chunk's tiles in row-major order (the order of `sha256`); one
    /// for a scalar or an empty chunk. The count is bounded at parse time.
    pub(super) fn tiles(&self) -> Vec<Tile> {
        chunk_tiles(&self.sizes, self.rows, self.cols)
    }

    /// The shape of a tile's tensor, and its offsets in the chunk.
    pub(super) fn tile_box(&self, t: Tile) -> (Vec<u64>, Vec<u64>) {
        let mut shape = self.sizes.clone();
        let mut at = vec![0; self.sizes.len()];
        if let Some(first) = shape.first_mut() {
            *first = t.r1 - t.r0;
            at[0] = t.r0;
        }
        if shape.len() > 1 {
            shape[1] = t.c1 - t.c0;
            at[1] = t.c0;
        }
        (shape, at)
    }
}

/// A tensor of the checkpoint.
#[derive(Debug)]
pub(super) struct Tensor {
    pub(super) dtype: Dtype,
    pub(super) size: Vec<u64>,
    pub(super) chunks: Vec<Chunk>,
}

impl Tensor {
    /// The full tensor's bytes: checked at parse time to fit in a `u64`.
    pub(super) fn byte_len(&self) -> u64 {
        elements(&self.size).and_then(|n| n.checked_mul(self.dtype.bits() / 8)).unwrap_or(u64::MAX)
    }
}

/// The number of elements of a box of `dims`, if it fits in a `u64`.
pub(super) fn elements(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, d| acc.checked_mul(*d))
}

/// The metadata document, checked.
#[derive(Debug)]
pub(super) struct Document {
    pub(super) files: HashMap<String, (u64, u64)>,
    pub(super) tensors: BTreeMap<String, Tensor>,
    pub(super) values: Map<String, Value>,
}

/// The dtype torch calls `name`, if a checkpoint may hold it: whole-byte
/// elements only (torch's packed `float4_e2m1fn_x2` counts pairs).
fn dtype(name: &str) -> Option<Dtype> {
    Dtype::from_torch_name(name).filter(|d| d.names().byte_width().is_some())
}

/// A JSON value read with every object's keys unique (serde_json keeps the
/// last of two; a hostile document could show one reader one value and
/// another reader the other). serde_json bounds the nesting.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            if out.contains_key(&key) {
                return Err(A::Error::custom(format!("duplicate key {key:?}")));
            }
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// Whether `v` is a JSON object whose keys are `required`, and otherwise
/// only `optional` ones.
fn has_keys(v: &Value, required: &[&str], optional: &[&str]) -> bool {
    v.as_object().is_some_and(|o| {
        required.iter().all(|k| o.contains_key(*k))
            && o.keys().all(|k| required.contains(&k.as_str()) || optional.contains(&k.as_str()))
    })
}

/// Parses and checks a metadata document: every field, against everything
/// the writer (`deathtensors.distributed`'s `StorageWriter`) would not have
/// written. The error says what is wrong (callers add where).
pub(super) fn parse(data: &[u8]) -> std::result::Result<Document, String> {
    if data.len() as u64 > MAX_METADATA_BYTES {
        return Err(format!("{} bytes, more than the {MAX_METADATA_BYTES} allowed", data.len()));
    }
    if data.len() >= 2 && data[0] == 0x80 && (2..=5).contains(&data[1]) {
        return Err(
            "this is a pickle, not JSON (a FileSystemWriter checkpoint?); deathtensors never unpickles metadata".into(),
        );
    }
    let Strict(doc) = serde_json::from_slice(data).map_err(|e| format!("not a JSON document ({e})"))?;
    let doc = doc.as_object().ok_or("not a JSON object")?;
    let unknown: Vec<&String> = doc.keys().filter(|k| !FIELDS.contains(&k.as_str())).collect();
    if !unknown.is_empty() {
        return Err(format!("unknown fields {unknown:?}"));
    }
    if doc.get("deathtensors_dcp").and_then(Value::as_u64) != Some(DCP_VERSION) {
        let version = doc.get("deathtensors_dcp").unwrap_or(&Value::Null);
        return Err(format!("version {version}, this reader knows {DCP_VERSION}"));
    }
    // The save's id: checked, though the files need not carry it (see
    // below).
    if !doc.get("save_id").and_then(Value::as_str).is_some_and(is_save_id) {
        return Err("save_id must be 16 lowercase hex digits".into());
    }
    let ext = match doc.get("format").and_then(Value::as_str) {
        Some("deathtensors") => "dt",
        Some("safetensors") => "safetensors",
        _ => return Err(format!("format {}", doc.get("format").unwrap_or(&Value::Null))),
    };
    if !doc.get("dcp_version").is_none_or(|v| v.is_null() || v.is_string()) {
        return Err("dcp_version must be a string".into());
    }
    let mut files = HashMap::new();
    for (name, f) in doc.get("files").and_then(Value::as_object).ok_or("files must be an object")? {
        // A file's own id is normally the save's; a rank that torch's plan
        // cache handed an earlier save's plan names its file with an id of
        // its own (docs/DISTRIBUTED.md): the document names exactly the
        // files of the save either way.
        let rank = parse_rank_file_name(name)
            .filter(|_| name.ends_with(&format!(".{ext}")))
            .map(|(rank, _)| rank)
            .ok_or_else(|| {
                format!("file {name:?} is not a rank file of this checkpoint (rank-NNNNN-<16 hex>.{ext})")
            })?;
        let (r, size) = (f.get("rank").and_then(nat), f.get("size").and_then(nat));
        let (Some(r), Some(size), true) = (r, size, has_keys(f, &["rank", "size"], &[])) else {
            return Err(format!("file {name:?}: needs rank and size, non-negative integers"));
        };
        if r != rank {
            return Err(format!("file {name:?}: rank {r} differs from its name"));
        }
        files.insert(name.clone(), (rank, size));
    }
    let mut tensors = BTreeMap::new();
    for (fqn, t) in doc.get("tensors").and_then(Value::as_object).ok_or("tensors must be an object")? {
        let what = format!("tensor {fqn:?}");
        if !has_keys(t, &["dtype", "size", "chunks"], &[]) {
            return Err(format!("{what}: needs dtype, size and chunks"));
        }
        let dt = dtype(t["dtype"].as_str().unwrap_or_default())
            .ok_or_else(|| format!("{what}: {} is not a torch dtype", t["dtype"]))?;
        let size =
            dims(&t["size"]).ok_or_else(|| format!("{what}: size must be at most {MAX_RANK} non-negative integers"))?;
        let chunk_list = t["chunks"].as_array().ok_or_else(|| format!("{what}: chunks must be a list"))?;
        let mut chunks = Vec::new();
        for c in chunk_list {
            if !has_keys(c, &["offsets", "sizes", "file", "rows"], &["cols", "sha256"]) {
                return Err(format!(
                    "{what}: a chunk needs offsets, sizes, file and rows (and may have cols and sha256)"
                ));
            }
            let (Some(offsets), Some(sizes)) = (dims(&c["offsets"]), dims(&c["sizes"])) else {
                return Err(format!(
                    "{what}: a chunk's offsets and sizes must have the tensor's {} dimensions",
                    size.len()
                ));
            };
            if offsets.len() != size.len() || sizes.len() != size.len() {
                return Err(format!(
                    "{what}: a chunk's offsets and sizes must have the tensor's {} dimensions",
                    size.len()
                ));
            }
            if offsets.iter().zip(&sizes).zip(&size).any(|((o, s), d)| o.checked_add(*s).is_none_or(|e| e > *d)) {
                return Err(format!(
                    "{what}: chunk at {offsets:?} of sizes {sizes:?} lies outside the tensor's size {size:?}"
                ));
            }
            let file = c["file"].as_str().filter(|f| files.contains_key(*f)).ok_or_else(|| {
                format!("{what}: chunk at {offsets:?} names file {}, which files does not list", c["file"])
            })?;
            let rows = nat(&c["rows"])
                .filter(|r| *r > 0)
                .ok_or_else(|| format!("{what}: chunk at {offsets:?}: rows must be a positive integer"))?;
            let cols = match c.get("cols") {
                None | Some(Value::Null) => None,
                Some(v) => Some(nat(v).filter(|c| *c > 0 && sizes.len() >= 2).ok_or_else(|| {
                    format!(
                        "{what}: chunk at {offsets:?}: cols must be a positive integer, on a chunk of 2 or more dimensions"
                    )
                })?),
            };
            let mut chunk = Chunk { offsets, sizes, file: file.to_string(), rows, cols, sha256: None };
            let offsets = &chunk.offsets;
            let tiles = chunk.tile_count().filter(|n| *n <= MAX_TILES).ok_or_else(|| {
                let n = chunk.tile_count().map_or("too many".to_string(), |n| n.to_string());
                format!("{what}: chunk at {offsets:?}: {n} tiles, more than the {MAX_TILES} tiles allowed")
            })?;
            chunk.sha256 = match (ext, c.get("sha256")) {
                ("safetensors", Some(Value::Array(list)))
                    if list.len() as u64 == tiles && list.iter().all(|h| h.as_str().is_some_and(is_hex_digest)) =>
                {
                    Some(list.iter().map(|h| h.as_str().unwrap_or_default().to_string()).collect())
                }
                ("safetensors", _) => {
                    return Err(format!(
                        "{what}: chunk at {offsets:?}: sha256 must list one digest for each of its {tiles} tiles"
                    ))
                }
                (_, None | Some(Value::Null)) => None,
                _ => {
                    return Err(format!("{what}: chunk at {offsets:?}: sha256 only belongs to safetensors rank files"))
                }
            };
            chunks.push(chunk);
        }
        let tensor = Tensor { dtype: dt, size, chunks };
        check_cover(&tensor).map_err(|why| format!("{what}: {why}"))?;
        tensors.insert(fqn.clone(), tensor);
    }
    let values = doc.get("values").and_then(Value::as_object).cloned().ok_or("values must be an object")?;
    if let Some(fqn) = values.keys().find(|k| tensors.contains_key(*k)) {
        return Err(format!("{fqn:?} is both a tensor and a value"));
    }
    match doc.get("storage_meta") {
        None | Some(Value::Null) => {}
        Some(meta) if has_keys(meta, &["checkpoint_id", "save_id", "modules"], &[]) => {
            if !meta["modules"].as_array().is_some_and(|m| m.iter().all(Value::is_string)) {
                return Err("storage_meta.modules must be strings".into());
            }
        }
        Some(_) => return Err("storage_meta needs checkpoint_id, save_id and modules".into()),
    }
    Ok(Document { files, tensors, values })
}

/// Whether `h` is a SHA-256 as the writer spells it: 64 lowercase hex
/// digits.
fn is_hex_digest(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn nat(v: &Value) -> Option<u64> {
    v.as_u64()
}

fn dims(v: &Value) -> Option<Vec<u64>> {
    let list = v.as_array().filter(|l| l.len() <= MAX_RANK)?;
    list.iter().map(nat).collect()
}

/// Chunks must add up to the tensor without overlapping.
fn check_cover(t: &Tensor) -> std::result::Result<(), String> {
    let chunks: Vec<(&[u64], &[u64])> = t.chunks.iter().map(|c| (&c.offsets[..], &c.sizes[..])).collect();
    check_chunk_cover(&t.size, t.dtype.bits() / 8, &chunks)
}

/// The chunks (offsets, sizes) of a tensor of `size` and elements of
/// `elem` bytes must add up to it without overlapping (DCP saves each
/// element once; a reader would otherwise leave elements unset or read two
/// versions of one). Overlaps are looked for among at most 4,096 chunks.
///
/// # Errors
/// Why the chunks do not cover the tensor.
pub fn check_chunk_cover(size: &[u64], elem: u64, chunks: &[(&[u64], &[u64])]) -> std::result::Result<(), String> {
    let total = elements(size)
        .filter(|n| n.checked_mul(elem).is_some())
        .ok_or_else(|| format!("its size {size:?} is too large"))?;
    let sum = chunks.iter().try_fold(0u64, |acc, (_, s)| acc.checked_add(elements(s)?));
    if sum != Some(total) {
        return Err(format!("its chunks do not add up to its {total} elements"));
    }
    if chunks.len() > MAX_OVERLAP_CHECK {
        return Ok(());
    }
    for (i, (ao, asz)) in chunks.iter().enumerate() {
        for (bo, bsz) in &chunks[..i] {
            let empty = asz.contains(&0) || bsz.contains(&0);
            let overlap = ao.len() == bo.len()
                && (0..ao.len()).all(|d| ao[d] < bo[d].saturating_add(bsz[d]) && bo[d] < ao[d].saturating_add(asz[d]));
            if !empty && overlap {
                return Err(format!("chunks at {ao:?} and {bo:?} overlap"));
            }
        }
    }
    Ok(())
}

/// The tensor name of tile `t` of `c`: the tensor's name and the tile's
/// global offsets.
pub(super) fn tile_block_name(fqn: &str, c: &Chunk, t: Tile) -> String {
    let (_, at) = c.tile_box(t);
    let offsets: Vec<u64> = c.offsets.iter().zip(&at).map(|(o, a)| o + a).collect();
    block_name(fqn, &offsets)
}

/// Checks the metadata document of rank `rank`'s checkpoint saved without
/// collectives ([`rank_metadata_name`](crate::rank_metadata_name)) as [`check_checkpoint_metadata`]
/// does, and that every file it names is that rank's: a rank never loads
/// another's data.
///
/// # Errors
/// As [`check_checkpoint_metadata`], or a file of another rank, named.
pub fn check_rank_checkpoint_metadata(data: &[u8], rank: u64) -> std::result::Result<(), String> {
    let doc = parse(data)?;
    let mut names: Vec<&String> = doc.files.iter().filter(|(_, (r, _))| *r != rank).map(|(n, _)| n).collect();
    names.sort();
    match names.first() {
        Some(name) => Err(format!("file {name:?} is another rank's (this is rank {rank}'s metadata)")),
        None => Ok(()),
    }
}

/// The tiles of a chunk of `sizes` stored `rows` rows a tile along its
/// first dimension and, with `cols`, `cols` indices along its second, in
/// row-major order (the order of its digests): one for a scalar or an
/// empty chunk. `rows` and `cols` of 0 count as 1. The caller bounds the
/// count ([`MAX_TILES`]).
pub fn chunk_tiles(sizes: &[u64], rows: u64, cols: Option<u64>) -> Vec<Tile> {
    let rows = rows.max(1);
    let width = sizes.get(1).copied().unwrap_or(0);
    let Some(&n) = sizes.first().filter(|_| !sizes.contains(&0)) else {
        return vec![Tile { r0: 0, r1: sizes.first().copied().unwrap_or(0), c0: 0, c1: width }];
    };
    let step = cols.map(|c| c.max(1)).filter(|_| width > 0).unwrap_or(width.max(1));
    let mut out = Vec::new();
    for r0 in (0..n).step_by(usize::try_from(rows).unwrap_or(usize::MAX)) {
        let r1 = r0.saturating_add(rows).min(n);
        if width == 0 {
            out.push(Tile { r0, r1, c0: 0, c1: 0 });
        }
        for c0 in (0..width).step_by(usize::try_from(step).unwrap_or(usize::MAX)) {
            out.push(Tile { r0, r1, c0, c1: c0.saturating_add(step).min(width) });
        }
    }
    out
}

/// Checks a metadata document as [`consolidate`](crate::consolidate) does
/// before it reads anything else (`deathtensors.distributed` runs it on
/// every document it loads): `Err` says what is wrong.
///
/// # Errors
/// The reason the document is refused: too large, a pickle, not JSON, a
/// duplicate key, an unknown field, or any field the writer would not
/// have written (limits [`MAX_RANK`], [`MAX_TILES`], chunks that do not
/// cover their tensor, ...).
pub fn check_checkpoint_metadata(data: &[u8]) -> std::result::Result<(), String> {
    parse(data).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef";

    /// A valid document of one 4x2 float32 tensor in one chunk, edited.
    fn doc(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
        let mut v = serde_json::json!({
            "deathtensors_dcp": 1, "save_id": ID, "format": "deathtensors", "dcp_version": "1.0.0",
            "files": {format!("rank-00000-{ID}.dt"): {"rank": 0, "size": 100}},
            "tensors": {"w": {"dtype": "float32", "size": [4, 2], "chunks": [
                {"offsets": [0, 0], "sizes": [4, 2], "file": format!("rank-00000-{ID}.dt"), "rows": 4}]}},
            "values": {"step": 1},
            "planner_data": null,
            "storage_meta": {"checkpoint_id": null, "save_id": ID, "modules": []},
        });
        edit(&mut v);
        serde_json::to_vec(&v).unwrap()
    }

    #[track_caller]
    fn refused(data: &[u8], message: &str) {
        let why = check_checkpoint_metadata(data).unwrap_err();
        assert!(why.contains(message), "{message}: {why}");
    }

    #[test]
    fn a_valid_document_parses() {
        let d = parse(&doc(|_| {})).unwrap();
        assert_eq!(d.tensors["w"].dtype, Dtype::F32);
        assert_eq!(d.files[&format!("rank-00000-{ID}.dt")], (0, 100));
        // storage_meta and dcp_version may be absent or null.
        check_checkpoint_metadata(&doc(|v| {
            v["storage_meta"] = Value::Null;
            v.as_object_mut().unwrap().remove("dcp_version");
        }))
        .unwrap();
    }

    #[test]
    fn files_may_carry_ids_of_their_own_but_not_another_format_or_rank() {
        // A rank whose plan torch's plan cache kept from an earlier save
        // names its file with an id of its own.
        let own = "fedcba9876543210";
        let renamed = |v: &mut Value| {
            let f = v["files"].as_object_mut().unwrap().remove(&format!("rank-00000-{ID}.dt")).unwrap();
            v["files"][format!("rank-00000-{own}.dt")] = f;
            v["tensors"]["w"]["chunks"][0]["file"] = format!("rank-00000-{own}.dt").into();
        };
        check_checkpoint_metadata(&doc(renamed)).unwrap();
        refused(
            &doc(|v| {
                renamed(v);
                v["format"] = "safetensors".into();
            }),
            "is not a rank file of this checkpoint (rank-NNNNN-<16 hex>.safetensors)",
        );
        // A rank's own document names only its files.
        check_rank_checkpoint_metadata(&doc(|_| {}), 0).unwrap();
        let why = check_rank_checkpoint_metadata(&doc(|_| {}), 1).unwrap_err();
        assert!(why.contains("is another rank's (this is rank 1's metadata)"), "{why}");
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let text = String::from_utf8(doc(|_| {})).unwrap();
        refused(text.replacen("{", r#"{"save_id":"0000000000000000","#, 1).as_bytes(), "duplicate key");
        refused(text.replacen(r#""rows":4"#, r#""rows":4,"rows":1"#, 1).as_bytes(), "duplicate key \"rows\"");
    }

    #[test]
    fn unknown_fields_are_refused() {
        refused(&doc(|v| v["extra"] = Value::Null), "unknown fields [\"extra\"]");
        refused(&doc(|v| v["tensors"]["w"]["note"] = 1.into()), "needs dtype, size and chunks");
        refused(&doc(|v| v["tensors"]["w"]["chunks"][0]["x"] = 1.into()), "a chunk needs offsets");
        refused(&doc(|v| v["files"][format!("rank-00000-{ID}.dt")]["x"] = 1.into()), "needs rank and size");
    }

    #[test]
    fn storage_meta_dcp_version_and_values_are_checked() {
        refused(&doc(|v| v["storage_meta"] = serde_json::json!({"save_id": ID})), "storage_meta needs");
        refused(
            &doc(|v| v["storage_meta"]["modules"] = serde_json::json!([1])),
            "storage_meta.modules must be strings",
        );
        refused(&doc(|v| v["dcp_version"] = 1.into()), "dcp_version must be a string");
        refused(&doc(|v| v["values"]["w"] = 1.into()), "\"w\" is both a tensor and a value");
        refused(&doc(|v| v["values"] = Value::Null), "values must be an object");
    }

    #[test]
    fn limits_names_and_dtypes() {
        let mut big = vec![b' '; MAX_METADATA_BYTES as usize + 1];
        big[0] = b'{';
        refused(&big, "more than the 536870912 allowed");
        refused(&doc(|v| v["tensors"]["w"]["size"] = serde_json::json!(vec![1; MAX_RANK + 1])), "at most 64");
        refused(&doc(|v| v["tensors"]["w"]["dtype"] = "os.system".into()), "is not a torch dtype");
        // torch's packed float4 counts pairs: not a checkpoint's dtype.
        refused(&doc(|v| v["tensors"]["w"]["dtype"] = "float4_e2m1fn_x2".into()), "is not a torch dtype");
        check_checkpoint_metadata(&doc(|v| v["tensors"]["w"]["dtype"] = "float8_e8m0fnu".into())).unwrap();
        refused(&doc(|v| v["files"][format!("rank-00000-{ID}.dt")]["rank"] = 1.into()), "differs from its name");
        refused(&doc(|v| v["tensors"]["w"]["chunks"][0]["rows"] = 0.into()), "rows must be a positive integer");
        let t = |r0, r1, c0, c1| Tile { r0, r1, c0, c1 };
        assert_eq!(chunk_tiles(&[3, 5], 2, Some(3)), [t(0, 2, 0, 3), t(0, 2, 3, 5), t(2, 3, 0, 3), t(2, 3, 3, 5)]);
        assert_eq!(chunk_tiles(&[3], 2, None), [t(0, 2, 0, 0), t(2, 3, 0, 0)]);
        assert_eq!(chunk_tiles(&[], 1, None), [t(0, 0, 0, 0)]);
        assert_eq!(chunk_tiles(&[0, 4], 1, None), [t(0, 0, 0, 4)]);
    }

    #[test]
    fn safetensors_digests_are_lowercase_one_a_tile() {
        let st = |edit: fn(&mut Value)| {
            doc(|v| {
                v["format"] = "safetensors".into();
                let name = format!("rank-00000-{ID}.safetensors");
                v["files"] = serde_json::json!({name.clone(): {"rank": 0, "size": 100}});
                v["tensors"]["w"]["chunks"][0]["file"] = name.into();
                edit(v);
            })
        };
        check_checkpoint_metadata(&st(|v| {
            v["tensors"]["w"]["chunks"][0]["sha256"] = serde_json::json!(["ab".repeat(32)])
        }))
        .unwrap();
        refused(&st(|_| {}), "sha256 must list one digest for each of its 1 tiles");
        refused(
            &st(|v| v["tensors"]["w"]["chunks"][0]["sha256"] = serde_json::json!(["AB".repeat(32)])),
            "sha256 must",
        );
        refused(
            &doc(|v| v["tensors"]["w"]["chunks"][0]["sha256"] = serde_json::json!([])),
            "only belongs to safetensors",
        );
    }
}
