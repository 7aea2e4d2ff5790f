//! Appendable collections of same-shaped rows (docs/FORMAT.md section 13):
//! the manifest that says which rows exist, and the header of the block
//! files that hold them.
//!
//! A collection is a directory. Its manifest, `collection.json`, is the only
//! source of truth: the row count, the row layout and the list of block
//! files. Each block file is an ordinary deathtensors v1 file holding one
//! tensor, `rows`, of `block_rows` rows; only the first `rows` rows the
//! manifest gives it are part of the collection.

use alloc::string::String;
use alloc::vec::Vec;

use crate::de::tree;
use crate::error::{Error, ErrorKind, Result};
use crate::json;
use crate::tree::Tree;
use crate::{Dtype, Flags, Head, Header, Limits, Metadata, TensorSpec};

/// The manifest's file name inside a collection directory.
pub const MANIFEST_NAME: &str = "collection.json";

/// The value of the manifest's `format` field.
pub const COLLECTION_FORMAT: &str = "deathtensors-collection";

/// The writer lock's file name inside a collection directory.
pub const LOCK_NAME: &str = "writer.lock";

/// The name of the one tensor in a block file.
pub const BLOCK_TENSOR: &str = "rows";

/// Where a block file's rows start: a page, so blocks map page-aligned.
pub const BLOCK_ALIGNMENT: u64 = 4096;

/// The default rows per block file (tensorblob's default).
pub const DEFAULT_BLOCK_ROWS: u64 = 8192;

/// Most block files one manifest may list (2^20: a million). With the
/// default block size of 8192 rows that is 8.6 billion rows; a million
/// entries of the longest names encode to about 250 MB, within
/// [`MAX_MANIFEST_LEN`].
pub const MAX_BLOCKS: u64 = 1 << 20;

/// The largest block file, in bytes of rows (1 TiB).
pub const MAX_BLOCK_BYTES: u64 = 1 << 40;

/// Longest manifest accepted (256 MiB).
pub const MAX_MANIFEST_LEN: u64 = 256 << 20;

/// Longest block file name.
pub const MAX_BLOCK_NAME_LEN: usize = 128;

/// What every row of a collection is: a dtype and a shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowLayout {
    /// The element type.
    pub dtype: Dtype,
    /// The shape of one row (`[]` for scalar rows).
    pub shape: Vec<u64>,
    /// Rows per block file.
    pub block_rows: u64,
}

impl RowLayout {
    /// Checks a layout: a rank within limits, at least one element per row,
    /// whole bytes per row, and a block of at most [`MAX_BLOCK_BYTES`].
    ///
    /// # Errors
    /// `InvalidCollection` saying which rule is broken.
    pub fn new(dtype: Dtype, shape: Vec<u64>, block_rows: u64) -> Result<RowLayout> {
        let layout = RowLayout { dtype, shape, block_rows };
        layout.check()?;
        Ok(layout)
    }

    fn check(&self) -> Result<()> {
        if self.shape.len() as u64 > Limits::DEFAULT.max_rank {
            return Err(invalid(alloc::format!(
                "row shape has {} dimensions, at most {} are allowed",
                self.shape.len(),
                Limits::DEFAULT.max_rank
            )));
        }
        let numel = self.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        let Some(numel) = numel else { return Err(invalid("row shape overflows".into())) };
        if numel == 0 {
            return Err(invalid(alloc::format!("row shape {:?} has no elements", self.shape)));
        }
        let row = self.dtype.byte_len(numel).map_err(|e| match e.kind() {
            ErrorKind::Overflow { .. } => {
                invalid(alloc::format!("a row of {numel} {} elements overflows its byte length", self.dtype))
            }
            _ => invalid(alloc::format!("a row of {numel} {} elements is not a whole number of bytes", self.dtype)),
        })?;
        if self.block_rows == 0 {
            return Err(invalid("block_rows must be at least 1".into()));
        }
        match row.checked_mul(self.block_rows) {
            Some(b) if b <= MAX_BLOCK_BYTES => Ok(()),
            _ => Err(invalid(alloc::format!(
                "a block of {} rows of {row} bytes exceeds the {MAX_BLOCK_BYTES}-byte limit",
                self.block_rows
            ))),
        }
    }

    /// Elements in one row.
    pub fn row_numel(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes in one row (checked by [`RowLayout::new`]).
    pub fn row_bytes(&self) -> u64 {
        self.dtype.byte_len(self.row_numel()).unwrap_or(0)
    }

    /// Bytes of rows in one full block.
    pub fn block_bytes(&self) -> u64 {
        self.row_bytes() * self.block_rows
    }

    /// The shape of a block file's tensor: `[block_rows, *shape]`.
    pub fn block_shape(&self) -> Vec<u64> {
        let mut shape = Vec::with_capacity(self.shape.len() + 1);
        shape.push(self.block_rows);
        shape.extend_from_slice(&self.shape);
        shape
    }

    /// The start of a block file up to its rows: the prefix and a header
    /// whose one tensor, [`BLOCK_TENSOR`], spans every row of the block. Rows
    /// start at the returned length (a multiple of [`BLOCK_ALIGNMENT`]); the
    /// file is that long plus [`RowLayout::block_bytes`].
    ///
    /// # Errors
    /// Only for a layout that [`RowLayout::new`] refuses.
    pub fn block_header(&self) -> Result<Vec<u8>> {
        self.check()?;
        let spec = TensorSpec::new(BLOCK_TENSOR, self.dtype, self.block_shape());
        let header =
            Header::new_deathtensors(alloc::vec![spec], Metadata::new(), BLOCK_ALIGNMENT, None, &Limits::DEFAULT)?;
        Head::encode(&header, Flags::EMPTY)
    }

    /// Checks a parsed block file against this layout and returns where its
    /// rows start: one tensor, [`BLOCK_TENSOR`], of this dtype and block
    /// shape, starting at offset 0 of the blob, uncompressed and
    /// unencrypted.
    ///
    /// # Errors
    /// `InvalidCollection` saying what differs.
    pub fn check_block(&self, head: &Head) -> Result<u64> {
        let tensors = head.header.tensors();
        if head.header.format() != crate::Format::Deathtensors {
            return Err(invalid("a block file must be a deathtensors v1 file".into()));
        }
        if head.flags != Flags::EMPTY && head.flags != Flags::CHECKSUM {
            return Err(invalid("a block file must not be compressed, encrypted or signed".into()));
        }
        let [t] = tensors else {
            return Err(invalid(alloc::format!("a block file holds {} tensors, expected 1", tensors.len())));
        };
        if t.name != BLOCK_TENSOR {
            return Err(invalid(alloc::format!("a block file's tensor is {:?}, expected {BLOCK_TENSOR:?}", t.name)));
        }
        if t.dtype != self.dtype {
            return Err(invalid(alloc::format!("a block holds {} rows, the collection {}", t.dtype, self.dtype)));
        }
        if t.shape != self.block_shape() {
            return Err(invalid(alloc::format!(
                "a block has shape {:?}, the collection's blocks {:?}",
                t.shape,
                self.block_shape()
            )));
        }
        if t.data_offsets.0 != 0 {
            return Err(invalid("a block's rows do not start its blob".into()));
        }
        Ok(head.data_start)
    }
}

/// One block file of a collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRef {
    /// The file name inside the collection directory.
    pub file: String,
    /// How many of its rows belong to the collection.
    pub rows: u64,
    /// The SHA-256 of those rows' bytes, when recorded (full blocks).
    pub sha256: Option<[u8; 32]>,
}

/// A collection's manifest: what a committed state is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The rows' layout.
    pub layout: RowLayout,
    /// Counts commits: each commit writes the manifest with one more.
    pub generation: u64,
    /// Free-form string metadata.
    pub metadata: Metadata,
    /// The block files, in row order. Every block but the last holds
    /// `block_rows` rows; the last holds 1 to `block_rows`.
    pub blocks: Vec<BlockRef>,
}

impl Manifest {
    /// An empty collection of this layout.
    pub fn new(layout: RowLayout) -> Manifest {
        Manifest { layout, generation: 0, metadata: Metadata::new(), blocks: Vec::new() }
    }

    /// Rows in the collection.
    pub fn rows(&self) -> u64 {
        match self.blocks.split_last() {
            None => 0,
            Some((last, full)) => full.len() as u64 * self.layout.block_rows + last.rows,
        }
    }

    /// Checks a manifest's length before reading it.
    ///
    /// # Errors
    /// `LimitExceeded` over [`MAX_MANIFEST_LEN`].
    pub fn check_len(len: u64) -> Result<()> {
        if len > MAX_MANIFEST_LEN {
            return Err(Error::limit("manifest length", len, MAX_MANIFEST_LEN));
        }
        Ok(())
    }

    /// Parses and checks a manifest (docs/FORMAT.md section 13.2).
    ///
    /// # Errors
    /// `InvalidJson`, `DuplicateKey`, `UnknownField`, `MissingField` for
    /// malformed JSON; `InvalidCollection` for a manifest that breaks a rule,
    /// saying which.
    pub fn parse(json: &[u8]) -> Result<Manifest> {
        Manifest::check_len(json.len() as u64)?;
        let doc = tree(json, "collection manifest")?;
        let Tree::Object(fields) = &doc else { return Err(invalid("the manifest is not a JSON object".into())) };
        const KNOWN: [&str; 8] =
            ["format", "format_version", "dtype", "row_shape", "block_rows", "rows", "generation", "blocks"];
        let mut metadata = Metadata::new();
        for (key, value) in fields {
            if key == "metadata" {
                metadata = string_map(value)?;
            } else if !KNOWN.contains(&key.as_str()) {
                return Err(Error::new(ErrorKind::UnknownField { field: key.as_str().into() }));
            }
        }
        if str_field(fields, "format")? != COLLECTION_FORMAT {
            return Err(invalid(alloc::format!("format is not {COLLECTION_FORMAT:?}")));
        }
        match uint_field(fields, "format_version")? {
            1 => {}
            v => return Err(Error::new(ErrorKind::UnsupportedFormatVersion(v))),
        }
        let dtype_name = str_field(fields, "dtype")?;
        let dtype =
            Dtype::from_name(dtype_name).ok_or_else(|| Error::new(ErrorKind::UnknownDtype(dtype_name.into())))?;
        let Tree::Array(dims) = need(fields, "row_shape")? else { return Err(wrong("row_shape", "array")) };
        if dims.len() as u64 > Limits::DEFAULT.max_rank {
            return Err(Error::limit("row rank", dims.len() as u64, Limits::DEFAULT.max_rank));
        }
        let shape = dims
            .iter()
            .map(|d| match d {
                Tree::Uint(v) => Ok(*v),
                _ => Err(wrong("row_shape", "array of non-negative integers")),
            })
            .collect::<Result<Vec<u64>>>()?;
        let layout = RowLayout::new(dtype, shape, uint_field(fields, "block_rows")?)?;
        let rows = uint_field(fields, "rows")?;
        let generation = uint_field(fields, "generation")?;
        let Tree::Array(list) = need(fields, "blocks")? else { return Err(wrong("blocks", "array")) };
        if list.len() as u64 > MAX_BLOCKS {
            return Err(Error::limit("block count", list.len() as u64, MAX_BLOCKS));
        }
        let mut blocks = Vec::with_capacity(list.len());
        for (i, entry) in list.iter().enumerate() {
            blocks.push(block_ref(entry, i)?);
        }
        let manifest = Manifest { layout, generation, metadata, blocks };
        manifest.check()?;
        if manifest.rows() != rows {
            return Err(invalid(alloc::format!("rows is {rows} but the blocks hold {}", manifest.rows())));
        }
        Ok(manifest)
    }

    /// Checks the rules that tie the blocks together: full blocks but the
    /// last, which is not empty; unique, plain file names.
    ///
    /// # Errors
    /// `InvalidCollection` naming the block at fault.
    pub fn check(&self) -> Result<()> {
        self.layout.check()?;
        let n = self.blocks.len();
        if n as u64 > MAX_BLOCKS {
            return Err(Error::limit("block count", n as u64, MAX_BLOCKS));
        }
        let mut names: Vec<&str> = Vec::with_capacity(n);
        for (i, b) in self.blocks.iter().enumerate() {
            check_block_name(&b.file).map_err(|e| invalid(alloc::format!("blocks[{i}].file {:?}: {e}", b.file)))?;
            let last = i + 1 == n;
            if !last && b.rows != self.layout.block_rows {
                return Err(invalid(alloc::format!(
                    "blocks[{i}] holds {} rows; every block but the last must hold block_rows = {}",
                    b.rows,
                    self.layout.block_rows
                )));
            }
            if last && (b.rows == 0 || b.rows > self.layout.block_rows) {
                return Err(invalid(alloc::format!(
                    "the last block holds {} rows; it must hold 1 to block_rows = {}",
                    b.rows,
                    self.layout.block_rows
                )));
            }
            names.push(&b.file);
        }
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(alloc::format!("block file {:?} is listed twice", w[0])));
        }
        Ok(())
    }

    /// [`Manifest::encode`], refusing a manifest that readers would refuse:
    /// one that breaks [`Manifest::check`] or encodes to more than
    /// [`MAX_MANIFEST_LEN`] bytes (metadata too large).
    ///
    /// # Errors
    /// As [`Manifest::check`]; `LimitExceeded` for the length.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check()?;
        let bytes = self.encode();
        if bytes.len() as u64 > MAX_MANIFEST_LEN {
            return Err(Error::limit("manifest length", bytes.len() as u64, MAX_MANIFEST_LEN));
        }
        Ok(bytes)
    }

    /// The manifest as JSON: compact, fields in a fixed order, one block a
    /// line, ending in a newline. The same manifest always gives the same
    /// bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + self.blocks.len() * 120);
        out.extend_from_slice(b"{\"format\":\"");
        out.extend_from_slice(COLLECTION_FORMAT.as_bytes());
        out.extend_from_slice(b"\",\"format_version\":1,\"dtype\":\"");
        out.extend_from_slice(self.layout.dtype.name().as_bytes());
        out.extend_from_slice(b"\",\"row_shape\":[");
        for (i, d) in self.layout.shape.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json::uint(&mut out, *d);
        }
        out.extend_from_slice(b"],\"block_rows\":");
        json::uint(&mut out, self.layout.block_rows);
        out.extend_from_slice(b",\"rows\":");
        json::uint(&mut out, self.rows());
        out.extend_from_slice(b",\"generation\":");
        json::uint(&mut out, self.generation);
        if !self.metadata.is_empty() {
            out.extend_from_slice(b",\"metadata\":");
            json::metadata(&mut out, &self.metadata);
        }
        out.extend_from_slice(b",\"blocks\":[");
        for (i, b) in self.blocks.iter().enumerate() {
            out.extend_from_slice(if i == 0 { b"\n{\"file\":" } else { b",\n{\"file\":" });
            json::escape(&mut out, &b.file);
            out.extend_from_slice(b",\"rows\":");
            json::uint(&mut out, b.rows);
            if let Some(d) = &b.sha256 {
                out.extend_from_slice(b",\"sha256\":\"");
                json::hex(&mut out, d);
                out.push(b'"');
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}\n");
        out
    }
}

/// Checks a block file name: 1 to [`MAX_BLOCK_NAME_LEN`] ASCII letters,
/// digits, `-`, `_` and `.`, not starting with `.`, and neither the
/// manifest's nor the lock's name. So a name is never a path, a hidden file or a temp file.
///
/// # Errors
/// A phrase saying what is wrong.
pub fn check_block_name(name: &str) -> core::result::Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_BLOCK_NAME_LEN {
        return Err("a block file name has 1 to 128 characters");
    }
    if name.starts_with('.') {
        return Err("a block file name must not start with '.'");
    }
    if !name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')) {
        return Err("a block file name has only ASCII letters, digits, '-', '_' and '.'");
    }
    if name == MANIFEST_NAME || name == LOCK_NAME {
        return Err("a block file cannot be the manifest or the lock file");
    }
    Ok(())
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidCollection { message: message.into() })
}

fn wrong(what: &'static str, expected: &'static str) -> Error {
    Error::new(ErrorKind::WrongType { what, expected })
}

fn need<'a>(fields: &'a [(String, Tree)], name: &'static str) -> Result<&'a Tree> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v).ok_or(Error::new(ErrorKind::MissingField { field: name }))
}

fn uint_field(fields: &[(String, Tree)], name: &'static str) -> Result<u64> {
    match need(fields, name)? {
        Tree::Uint(v) => Ok(*v),
        _ => Err(wrong(name, "non-negative integer")),
    }
}

fn str_field<'a>(fields: &'a [(String, Tree)], name: &'static str) -> Result<&'a str> {
    match need(fields, name)? {
        Tree::Str(s) => Ok(s),
        _ => Err(wrong(name, "string")),
    }
}

fn string_map(value: &Tree) -> Result<Metadata> {
    let Tree::Object(entries) = value else { return Err(wrong("metadata", "object")) };
    let mut out = Metadata::new();
    for (k, v) in entries {
        let Tree::Str(s) = v else { return Err(Error::new(ErrorKind::MetadataNotString { key: k.as_str().into() })) };
        out.insert(k.clone(), s.clone());
    }
    Ok(out)
}

fn block_ref(entry: &Tree, i: usize) -> Result<BlockRef> {
    let Tree::Object(fields) = entry else { return Err(wrong("blocks[i]", "object")) };
    if let Some((k, _)) = fields.iter().find(|(k, _)| !matches!(k.as_str(), "file" | "rows" | "sha256")) {
        return Err(Error::new(ErrorKind::UnknownField { field: k.as_str().into() }));
    }
    let file = String::from(str_field(fields, "file")?);
    let rows = uint_field(fields, "rows")?;
    let sha256 = match fields.iter().find(|(k, _)| k == "sha256") {
        None => None,
        Some((_, Tree::Str(s))) => Some(
            crate::de::parse_digest(s)
                .ok_or_else(|| invalid(alloc::format!("blocks[{i}].sha256 is not 64 lowercase hex digits")))?,
        ),
        Some(_) => return Err(wrong("sha256", "string")),
    };
    Ok(BlockRef { file, rows, sha256 })
}
