//! The native module `deathtensors._native`: a thin layer over
//! `deathtensors-io`. The Python API lives in `py_src/deathtensors`.

use pyo3::prelude::*;

mod arena;
mod buffer;
mod cli;
mod collection;
mod dcp;
mod errors;
mod info;
mod keys;
mod model_sign;
mod names;
mod options;
mod parity;
mod reader;
mod safetensors;
mod sharded;
mod tensors;
mod torch_checkpoint;
mod upload;
mod writer;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::add_classes(m)?;
    // The key variables, named once in io for the command line and Python.
    m.add("KEY_ENV_VARS", deathtensors_io::KEY_ENV_VARS.to_vec())?;
    m.add_class::<options::PyReadOptions>()?;
    m.add_class::<options::PyWriteOptions>()?;
    m.add_class::<reader::PyReader>()?;
    m.add_class::<reader::PyRegion>()?;
    m.add_class::<info::PyTensorInfo>()?;
    m.add_class::<info::PyCompression>()?;
    m.add_class::<info::PyTensorCompression>()?;
    m.add_class::<info::PyEncryption>()?;
    m.add_class::<names::PyTensorNames>()?;
    m.add_class::<arena::PyArena>()?;
    m.add_class::<torch_checkpoint::PyTorchCheckpoint>()?;
    m.add_class::<collection::PyCollection>()?;
    m.add_function(wrap_pyfunction!(collection::dtype_from_name, m)?)?;
    m.add_function(wrap_pyfunction!(writer::save, m)?)?;
    m.add_class::<tensors::Tensors>()?;
    m.add_function(wrap_pyfunction!(tensors::collect, m)?)?;
    m.add_class::<keys::PyKeyRing>()?;
    m.add_function(wrap_pyfunction!(keys::generate_key, m)?)?;
    m.add_function(wrap_pyfunction!(keys::public_jwk, m)?)?;
    m.add_function(wrap_pyfunction!(keys::cryptotensors_jwk, m)?)?;
    m.add_function(wrap_pyfunction!(keys::fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(keys::sign_file, m)?)?;
    m.add_function(wrap_pyfunction!(keys::save_cryptotensors, m)?)?;
    m.add_function(wrap_pyfunction!(model_sign::sign_model, m)?)?;
    m.add_function(wrap_pyfunction!(model_sign::verify_model, m)?)?;
    m.add_function(wrap_pyfunction!(model_sign::open_signed_model, m)?)?;
    m.add_class::<model_sign::PySignedModel>()?;
    m.add_function(wrap_pyfunction!(safetensors::encode_safetensors, m)?)?;
    m.add_class::<safetensors::PyHead>()?;
    m.add_function(wrap_pyfunction!(safetensors::parse_head, m)?)?;
    m.add_class::<sharded::PyShardedIndex>()?;
    m.add_function(wrap_pyfunction!(sharded::save_sharded, m)?)?;
    m.add_function(wrap_pyfunction!(parity::supported_dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(parity::append, m)?)?;
    m.add_class::<parity::PyDiff>()?;
    m.add_function(wrap_pyfunction!(parity::diff, m)?)?;
    m.add_function(wrap_pyfunction!(parity::manifest, m)?)?;
    m.add_function(wrap_pyfunction!(parity::write_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(parity::save_sharded_legacy, m)?)?;
    m.add_function(wrap_pyfunction!(parity::convert, m)?)?;
    m.add_function(wrap_pyfunction!(cli::cli_main, m)?)?;
    for f in [
        wrap_pyfunction!(upload::is_url, m)?,
        wrap_pyfunction!(upload::remote_put, m)?,
        wrap_pyfunction!(upload::write_file_atomic, m)?,
        wrap_pyfunction!(upload::remote_upload, m)?,
        wrap_pyfunction!(upload::remote_size, m)?,
        wrap_pyfunction!(upload::remote_get, m)?,
        wrap_pyfunction!(upload::remote_list, m)?,
        wrap_pyfunction!(upload::remote_delete, m)?,
        wrap_pyfunction!(dcp::consolidate, m)?,
        wrap_pyfunction!(dcp::sha256_tensors, m)?,
        wrap_pyfunction!(dcp::check_checkpoint_metadata, m)?,
        wrap_pyfunction!(dcp::parse_rank_file_name, m)?,
        wrap_pyfunction!(dcp::dtype_table, m)?,
        wrap_pyfunction!(dcp::check_chunk_cover, m)?,
        wrap_pyfunction!(dcp::check_rank_file, m)?,
        wrap_pyfunction!(dcp::block_name, m)?,
        wrap_pyfunction!(dcp::rank_file_name, m)?,
        wrap_pyfunction!(dcp::rank_metadata_name, m)?,
        wrap_pyfunction!(dcp::parse_rank_metadata_name, m)?,
        wrap_pyfunction!(dcp::chunk_tiles, m)?,
        wrap_pyfunction!(dcp::save_marker_name, m)?,
        wrap_pyfunction!(dcp::parse_save_marker_name, m)?,
        wrap_pyfunction!(dcp::metadata_documents, m)?,
        wrap_pyfunction!(dcp::save_marker, m)?,
        wrap_pyfunction!(dcp::uncommitted_files, m)?,
        wrap_pyfunction!(dcp::after_commit_files, m)?,
        wrap_pyfunction!(torch_checkpoint::is_torch_checkpoint, m)?,
        wrap_pyfunction!(torch_checkpoint::describe_file, m)?,
        wrap_pyfunction!(tensors::struct_dtype_name, m)?,
        wrap_pyfunction!(torch_checkpoint::scan_pickle, m)?,
    ] {
        m.add_function(f)?;
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("CREATED_BY", deathtensors_io::format::CREATED_BY)?;
    // The format's magic, defined once in the format crate.
    m.add("MAGIC", pyo3::types::PyBytes::new(m.py(), &deathtensors_io::format::MAGIC))?;
    m.add("FORMAT_VERSION", deathtensors_io::format::VERSION)?;
    m.add("DCP_METADATA_LIMIT", deathtensors_io::MAX_METADATA_BYTES)?;
    m.add("DCP_METADATA", deathtensors_io::DCP_METADATA)?;
    m.add("DCP_VERSION", deathtensors_io::DCP_VERSION)?;
    m.add("CT_DEFAULT_CHUNK_SIZE", deathtensors_io::format::CT_DEFAULT_CHUNK_SIZE)?;
    m.add("DCP_STALE_AFTER", deathtensors_io::DEFAULT_STALE_AFTER)?;
    m.add("URL_SCHEMES", deathtensors_remote::SCHEMES.to_vec())?;
    // Loads of at least this many bytes map the file (one constant, for
    // Python's loads and the collections' reads alike).
    m.add("MAP_MIN", collection::MAP_MIN)?;
    // The zstd level of `compress=True` when none is given (io's).
    m.add("COMPRESS_LEVEL", deathtensors_io::Compress::DEFAULT_LEVEL)?;
    Ok(())
}
