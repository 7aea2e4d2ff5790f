//! Files of other kinds, read without running them and seen as the
//! safetensors file they convert to (docs/PICKLE.md): `torch.save`
//! checkpoints and numpy's `.npy`/`.npz`.
//!
//! Bottom to top: `converted` (a container seen as a virtual safetensors
//! file), `numpy_file`, `torch_checkpoint` (uses `tools::sharded` for
//! its index), `open` (either, by sniffing).

pub(crate) mod converted;
pub(crate) mod numpy_file;
pub(crate) mod open;
pub(crate) mod torch_checkpoint;
