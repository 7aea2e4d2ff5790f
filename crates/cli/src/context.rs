//! The settings of one run of [`crate::main_with_args`]: its keys, policy
//! input and storage options, built once from the parsed arguments and
//! passed to the command. Nothing of a run outlives it, so a second run in
//! the same process (`deathtensors.main([...])` from Python) sees only its
//! own settings.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use deathtensors_io::{is_legacy_index, ConsolidateOptions, ErrorKind, KeyRing, ReadOptions, Reader, ShardedReader};
use deathtensors_remote::RemoteOptions;

use crate::args::ReadArgs;

/// What a command opens files with.
pub struct RunContext {
    keys: KeyRing,
    policy_input: Option<serde_json::Value>,
    remote: RemoteOptions,
    /// A URL opened by a check before the command opens it (is it a
    /// sharded index?), and what the open gave: the command's own open
    /// takes it, so a URL is opened once (a dead server is waited for
    /// once, not twice). See
    /// <https://github.com/death-legion/deathtensors/issues/30>.
    kept: RefCell<Option<(PathBuf, deathtensors_io::Result<Reader>)>>,
}

impl RunContext {
    /// The context of a run with these arguments: `--storage-option`
    /// entries, `--policy-input`, and the keys of `--key`,
    /// `--passphrase-env` and the environment.
    ///
    /// # Errors
    /// A malformed storage option or policy input, a key file that cannot
    /// be read, a passphrase variable that is not set.
    pub fn new(args: &ReadArgs) -> anyhow::Result<RunContext> {
        let storage_options = crate::remote::parse_storage_options(&args.store.storage_options)?;
        let policy_input = crate::keys::policy_input(args.keys.policy_input.as_deref())?;
        let keys = crate::keys::load(&args.keys.keys, args.keys.passphrase_env.as_deref())?;
        // A cache when DEATHTENSORS_REMOTE_CACHE names a directory.
        let remote = RemoteOptions { storage_options, ..RemoteOptions::from_env() };
        Ok(RunContext { keys, policy_input, remote, kept: RefCell::new(None) })
    }

    /// How files are opened in this run: its keys, and its policy input.
    pub fn read_options(&self) -> ReadOptions {
        ReadOptions { keys: self.keys.clone(), policy_input: self.policy_input.clone(), ..ReadOptions::default() }
    }

    /// [`RunContext::read_options`] with the signature requirements of
    /// `--signer` and `--require-signature`.
    ///
    /// # Errors
    /// As [`crate::signers::Trusted::load`].
    pub fn read_options_requiring(&self, signer: &[PathBuf], require_signature: bool) -> anyhow::Result<ReadOptions> {
        Ok(self.read_options_trusting(&crate::signers::Trusted::load(signer)?, require_signature))
    }

    /// [`RunContext::read_options_requiring`] with keys already loaded: a
    /// command that also names its signers loads their files once.
    pub fn read_options_trusting(&self, trusted: &crate::signers::Trusted, require_signature: bool) -> ReadOptions {
        ReadOptions { trusted_signers: trusted.keys(), require_signature, ..self.read_options() }
    }

    /// Opens a file or URL with the keys (and policy input) of this run; a
    /// URL that a check opened already is not opened again.
    pub fn open(&self, path: &Path) -> deathtensors_io::Result<Reader> {
        self.open_kept_or(path, || self.read_options())
    }

    /// Takes the open of `path` that [`RunContext::keep`] kept (made with
    /// the options the caller would give), or opens it with `options`.
    pub fn open_kept_or(&self, path: &Path, options: impl FnOnce() -> ReadOptions) -> deathtensors_io::Result<Reader> {
        self.take_if(path, |_| true).unwrap_or_else(|| self.open_with(path, options()))
    }

    /// Opens a local file or a URL with `options`. A kept failure to reach
    /// the URL is returned again: it does not depend on `options`.
    pub fn open_with(&self, path: &Path, options: ReadOptions) -> deathtensors_io::Result<Reader> {
        if let Some(failed) = self.take_if(path, |r| r.as_ref().is_err_and(|e| matches!(e.kind(), ErrorKind::Io(_)))) {
            return failed;
        }
        let opened = deathtensors_remote::open_any(path, &self.remote, options.clone());
        match opened {
            // A torch.save pickle or a numpy file (local): read as the
            // safetensors file it converts to, nothing of it run (io's
            // ConvertedSource, docs/PICKLE.md).
            Err(e) if !matches!(e.kind(), ErrorKind::Io(_)) && crate::remote::url(path).is_none() => {
                deathtensors_io::open_converted_file(path, options).unwrap_or(Err(e))
            }
            other => other,
        }
    }

    /// Opens a sharded checkpoint (an index, or a single file) with
    /// `options` for its shards; a deathtensors 0.3.0 index that a check
    /// opened already is not opened again.
    pub fn open_sharded(&self, path: &Path, options: ReadOptions) -> deathtensors_io::Result<ShardedReader> {
        match self.take_if(path, |r| r.as_ref().is_ok_and(is_legacy_index)) {
            Some(Ok(index)) => deathtensors_remote::open_sharded_from(path, &self.remote, options, index),
            _ => deathtensors_remote::open_sharded_any(path, &self.remote, options),
        }
    }

    /// Consolidates the distributed checkpoint at `checkpoint` (a directory
    /// or a URL, reached with this run's storage options) into the local
    /// `out`; returns the paths written.
    pub fn consolidate(
        &self,
        checkpoint: &Path,
        out: &Path,
        options: &ConsolidateOptions,
    ) -> deathtensors_io::Result<Vec<PathBuf>> {
        deathtensors_remote::consolidate_any(checkpoint, out, &self.remote, options)
    }

    /// Keeps what opening the URL `path` gave, for the next open of it; a
    /// local path is not kept (opening it again costs nothing).
    pub fn keep(&self, path: &Path, opened: deathtensors_io::Result<Reader>) {
        if crate::remote::url(path).is_some() {
            *self.kept.borrow_mut() = Some((path.to_path_buf(), opened));
        }
    }

    /// Takes what [`RunContext::keep`] kept for `path`, if `usable` accepts it.
    fn take_if(
        &self,
        path: &Path,
        usable: impl FnOnce(&deathtensors_io::Result<Reader>) -> bool,
    ) -> Option<deathtensors_io::Result<Reader>> {
        let mut kept = self.kept.borrow_mut();
        match kept.take() {
            Some((p, opened)) if p == path && usable(&opened) => Some(opened),
            other => {
                *kept = other;
                None
            }
        }
    }
}
