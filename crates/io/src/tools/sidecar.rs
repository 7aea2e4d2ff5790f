//! The JSON manifest sidecar of deathtensors 0.3.0 (`write_manifest`,
//! `deathtensors manifest`): a file's header as pretty JSON, for browsing
//! a model without downloading it.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use deathtensors_format::{Dtype, Format, Metadata, TensorInfo};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::file::reader::Reader;

/// torch's name of a dtype, as `torch.<name>` strings.
fn torch_name(dtype: Dtype) -> Option<&'static str> {
    Some(match dtype {
        Dtype::BOOL => "torch.bool",
        Dtype::U8 => "torch.uint8",
        Dtype::I8 => "torch.int8",
        Dtype::U16 => "torch.uint16",
        Dtype::I16 => "torch.int16",
        Dtype::F16 => "torch.float16",
        Dtype::BF16 => "torch.bfloat16",
        Dtype::I32 => "torch.int32",
        Dtype::U32 => "torch.uint32",
        Dtype::F32 => "torch.float32",
        Dtype::I64 => "torch.int64",
        Dtype::U64 => "torch.uint64",
        Dtype::F64 => "torch.float64",
        Dtype::C64 => "torch.complex64",
        Dtype::C128 => "torch.complex128",
        Dtype::F8_E5M2 => "torch.float8_e5m2",
        Dtype::F8_E4M3 => "torch.float8_e4m3fn",
        Dtype::F8_E8M0 => "torch.float8_e8m0fnu",
        Dtype::F8_E4M3FNUZ => "torch.float8_e4m3fnuz",
        Dtype::F8_E5M2FNUZ => "torch.float8_e5m2fnuz",
        Dtype::F4 => "torch.float4_e2m1fn_x2",
        Dtype::F6_E2M3 | Dtype::F6_E3M2 => return None,
    })
}

/// numpy's name of a dtype: the array-protocol string (`<f4`) where numpy
/// has the type, the `ml_dtypes` name where that package has it.
fn numpy_name(dtype: Dtype) -> Option<&'static str> {
    Some(match dtype {
        Dtype::BOOL => "|b1",
        Dtype::U8 => "|u1",
        Dtype::I8 => "|i1",
        Dtype::U16 => "<u2",
        Dtype::I16 => "<i2",
        Dtype::F16 => "<f2",
        Dtype::I32 => "<i4",
        Dtype::U32 => "<u4",
        Dtype::F32 => "<f4",
        Dtype::I64 => "<i8",
        Dtype::U64 => "<u8",
        Dtype::F64 => "<f8",
        Dtype::C64 => "<c8",
        Dtype::C128 => "<c16",
        Dtype::BF16 => "bfloat16",
        Dtype::F8_E5M2 => "float8_e5m2",
        Dtype::F8_E4M3 => "float8_e4m3fn",
        Dtype::F8_E8M0 => "float8_e8m0fnu",
        Dtype::F8_E4M3FNUZ => "float8_e4m3fnuz",
        Dtype::F8_E5M2FNUZ => "float8_e5m2fnuz",
        Dtype::F4 | Dtype::F6_E2M3 | Dtype::F6_E3M2 => return None,
    })
}

/// One tensor: deathtensors 0.3.0's `info()` fields, in its order, and the
/// digest when the file has one.
#[derive(Serialize)]
struct TensorEntry<'a> {
    name: &'a str,
    dtype: &'static str,
    torch_dtype: Option<&'static str>,
    numpy_dtype: Option<&'static str>,
    shape: &'a [u64],
    data_offsets: [u64; 2],
    nbytes: u64,
    metadata: &'a Metadata,
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
}

/// The tensors by name, in file order.
struct Tensors<'a>(&'a [TensorInfo]);

impl Serialize for Tensors<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|t| {
            let entry = TensorEntry {
                name: &t.name,
                dtype: t.dtype.name(),
                torch_dtype: torch_name(t.dtype),
                numpy_dtype: numpy_name(t.dtype),
                shape: &t.shape,
                data_offsets: [t.data_offsets.0, t.data_offsets.1],
                nbytes: t.byte_len(),
                metadata: &t.metadata,
                sha256: t.sha256.as_deref().map(|d| d.iter().map(|b| format!("{b:02x}")).collect()),
            };
            (&t.name, entry)
        }))
    }
}

#[derive(Serialize)]
struct Manifest<'a> {
    deathtensors_version: &'a str,
    format_version: u32,
    magic: Option<&'static str>,
    format: &'static str,
    global_metadata: &'a Metadata,
    tensors: Tensors<'a>,
    written_at: String,
}

/// The manifest of an open file, as JSON indented by two spaces:
/// `deathtensors_version` (`version`), `format_version`, `magic` (`null`
/// but for deathtensors files), `format`, `global_metadata`, `tensors` (by
/// name, in file order: `name`, `dtype`, `torch_dtype`, `numpy_dtype`,
/// `shape`, `data_offsets`, `nbytes`, `metadata`, and `sha256` when the
/// file has digests) and `written_at` (now, ISO 8601 in UTC).
pub fn manifest(reader: &Reader, version: &str) -> String {
    let header = reader.header();
    let (format, magic) = match header.format() {
        // The magic is ASCII (format's one spelling of it).
        Format::Deathtensors => ("deathtensors", core::str::from_utf8(&deathtensors_format::MAGIC).ok()),
        Format::Safetensors => ("safetensors", None),
        Format::Bintensors => ("bintensors", None),
    };
    let empty = Metadata::new();
    let doc = Manifest {
        deathtensors_version: version,
        format_version: deathtensors_format::VERSION,
        magic,
        format,
        global_metadata: header.metadata().unwrap_or(&empty),
        tensors: Tensors(header.tensors()),
        written_at: utc_now(),
    };
    // Strings, numbers and maps with string keys: this cannot fail.
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// Writes the manifest of an open file to `manifest_path` (default: the
/// file's path + `.json`), atomically, as JSON indented by two spaces, and
/// returns where. `version` is the writing library's.
///
/// # Errors
/// `Io` if the manifest cannot be written.
pub fn write_manifest(reader: &Reader, manifest_path: Option<&Path>, version: &str, durable: bool) -> Result<PathBuf> {
    let out = manifest_path.map_or_else(
        || {
            let mut p = reader.path().as_os_str().to_owned();
            p.push(".json");
            PathBuf::from(p)
        },
        Path::to_path_buf,
    );
    let mut text = manifest(reader, version).into_bytes();
    text.push(b'\n');
    crate::fs::atomic::write_file(&out, &text, durable).map_err(|e| Error::io(e, &out, "cannot write"))?;
    Ok(out)
}

/// Now as `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`, as Python's
/// `datetime.now(timezone.utc).isoformat()` writes it.
fn utc_now() -> String {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    iso8601(since.as_secs(), since.subsec_micros())
}

fn iso8601(secs: u64, micros: u32) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{micros:06}+00:00")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_iso_8601_in_utc() {
        assert_eq!(iso8601(0, 0), "1970-01-01T00:00:00.000000+00:00");
        assert_eq!(iso8601(951_782_400, 5), "2000-02-29T00:00:00.000005+00:00");
        assert_eq!(iso8601(1_795_519_845, 123_456), "2026-11-24T11:30:45.123456+00:00");
    }
}
