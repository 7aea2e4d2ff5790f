//! The command line, as plain data: what clap parses.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const ABOUT: &str = "Inspect, check, convert, encrypt and sign deathtensors, safetensors and bintensors files";

const LONG_ABOUT: &str = "\
Inspect, check, convert, encrypt and sign deathtensors, safetensors and
bintensors files.

Files are recognised by their content, not by their extension. Reading a
file's table of tensors reads only its header, whatever the file's size.
Wherever a file is read, a URL may stand for it (s3://, gs://, az://,
http(s)://): only the header and the tensors asked for are fetched, with
ranged requests.

Output: human-readable text goes to stdout; with --json, stdout is exactly
one JSON document. Progress bars and warnings go to stderr (progress bars
only when stderr is a terminal and the work is long).";

/// `--compress`'s level when none is given: io's `Compress::DEFAULT_LEVEL`
/// (a test holds them equal; clap wants the text).
pub const DEFAULT_LEVEL: &str = "3";

const EXIT_CODES: &str = "\
Exit codes:
  0  success (for diff: the files are the same)
  1  a file is invalid, or a check failed (for diff: the files differ)
  2  usage or any other error (a missing file, a missing tensor, ...)

A closed pipe (`deathtensors ls model.dt | head`) ends the command quietly.";

/// The `deathtensors` command line.
#[derive(Debug, Parser)]
#[command(name = "deathtensors", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXIT_CODES)]
#[command(arg_required_else_help = true, propagate_version = true)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The options of every command that reads files: keys, the policy
/// input, and the object store's settings for URLs. Only those commands
/// show them (`keygen`, `key` and `sign` do not).
#[derive(Clone, Debug, Default, Args)]
pub struct ReadArgs {
    /// Keys and policy input.
    #[command(flatten)]
    pub keys: KeyOptions,
    /// Object store settings.
    #[command(flatten)]
    pub store: StoreOptions,
}

/// Keys to decrypt with, and a policy's input.
#[derive(Clone, Debug, Default, Args)]
#[command(next_help_heading = "Keys")]
pub struct KeyOptions {
    /// A JWK key file to decrypt encrypted files with (repeatable; also read:
    /// the DEATHTENSORS_KEYS and CRYPTOTENSOR_KEYS environment variables,
    /// each JWK JSON or a key file's path).
    #[arg(long = "key", value_name = "FILE", global = true)]
    pub keys: Vec<PathBuf>,
    /// An environment variable holding a passphrase to decrypt with.
    #[arg(long, value_name = "VAR", global = true)]
    pub passphrase_env: Option<String>,
    /// The input an encrypted file's Rego policy (`__policy__`) is
    /// evaluated against before its key is used: JSON text, or @FILE
    /// (a policy binds honest readers only: docs/SECURITY.md).
    #[arg(long, value_name = "JSON", global = true)]
    pub policy_input: Option<String>,
}

/// The object store's settings, for URLs.
#[derive(Clone, Debug, Default, Args)]
#[command(next_help_heading = "URLs")]
pub struct StoreOptions {
    /// A setting of the object store for s3://, gs://, az:// and http(s)://
    /// URLs, as object_store names it (repeatable; e.g. aws_endpoint=URL,
    /// aws_region=REGION; the environment, AWS_* and friends, is read too),
    /// or timeout=30s, connect_timeout=5s, max_retries=3, retry_timeout=50s
    /// (the defaults: a dead server fails within 50 s).
    #[arg(long = "storage-option", value_name = "KEY=VALUE", global = true)]
    pub storage_options: Vec<String>,
}

/// One subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show a file's format, flags, metadata and table of tensors (reads only the header).
    #[command(after_help = "\
Examples:
  deathtensors inspect model.safetensors
  deathtensors inspect --json model.dt | jq '.tensors[].name'")]
    #[command(visible_alias = "info")]
    Inspect(InspectArgs),

    /// List tensor names, one a line, in the order of the header.
    #[command(after_help = "\
Examples:
  deathtensors ls model.dt
  deathtensors ls model.safetensors | grep attn")]
    #[command(visible_alias = "list")]
    Ls(LsArgs),

    /// Write the header as a JSON manifest beside the file (deathtensors 0.3.0's sidecar).
    #[command(after_help = "\
The manifest holds the file's global metadata and, for every tensor, its dtype (with
torch's and numpy's names), shape, byte offsets, size, metadata and digest, so that
a model can be browsed without its data. OUT defaults to FILE.json.

Examples:
  deathtensors manifest model.dt
  deathtensors manifest model.safetensors model.json")]
    Manifest(ManifestArgs),

    /// Check the SHA-256 footer and every per-tensor digest, on all cores.
    #[command(after_help = "\
Each failure names the tensor, or the byte range of the file, that does not match.
A file that carries no checksum fails, unless --allow-missing is given.

Examples:
  deathtensors verify model.dt
  deathtensors verify --json model.dt")]
    Verify(VerifyArgs),

    /// Convert between safetensors and deathtensors, streaming and atomically.
    #[command(after_help = "\
The output format is --format, or else OUT's extension: .safetensors for safetensors,
.dt or .deathtensors for deathtensors. Global metadata is carried over both ways;
per-tensor metadata and digests do not exist in safetensors and are dropped with a
warning. Memory stays bounded whatever the file size, and OUT appears only when
complete (converting a file onto itself is safe).

Examples:
  deathtensors convert model.safetensors model.dt --checksum
  deathtensors convert model.dt model.safetensors
  deathtensors convert old.dt new.dt --alignment 4096")]
    Convert(ConvertArgs),

    /// Compare two files: tensors added, removed, changed, and metadata.
    #[command(after_help = "\
Tensors are matched by name, across the two formats. Values are compared exactly
(byte for byte) unless --atol or --rtol is given; then two values are equal when
|a - b| <= atol + rtol * |b|, as numpy.isclose (NaNs at the same place are equal).
Like diff(1), exits with 0 when the files are the same and 1 when they differ.

Examples:
  deathtensors diff model.safetensors model.dt
  deathtensors diff --rtol 1e-3 before.dt after.dt")]
    Diff(DiffArgs),

    /// Per-tensor statistics: count, min, max, mean, std, zeros, NaNs, Infs.
    #[command(after_help = "\
Computed streaming, on all cores. min, max, mean and std are over the finite values
(NaN and Inf are counted apart); std is the population standard deviation. Complex
tensors count their real and imaginary parts as separate values.

Examples:
  deathtensors stats model.dt
  deathtensors stats --json model.dt embed.weight lm_head.weight")]
    Stats(StatsArgs),

    /// Print a tensor's values (summarised like numpy for big tensors) or its raw bytes.
    #[command(after_help = "\
Tensors of more than 1000 elements are summarised as numpy does: the first and last
3 entries of each axis, with `...` in between. With --json, the values are nested
arrays and a summarised gap is the string \"...\"; NaN and infinities are the
strings \"nan\", \"inf\" and \"-inf\".

Examples:
  deathtensors cat model.dt bias
  deathtensors cat --raw model.dt weight > weight.bin")]
    Cat(CatArgs),

    /// Print global metadata, or change it (--set, --delete), rewriting the file atomically.
    #[command(after_help = "\
Without --set or --delete, prints the metadata as KEY=VALUE lines. Changing it
rewrites the file atomically, keeping its format, alignment, checksum and every
tensor byte for byte.

Examples:
  deathtensors meta model.safetensors
  deathtensors meta model.dt --set license=MIT --set author=\"Death Legion\" --delete draft")]
    Meta(MetaArgs),

    /// Make a key: symmetric (AES-256-GCM / ChaCha20-Poly1305), x25519 (encrypt to a key pair) or ed25519 (sign).
    #[command(after_help = "\
Keys are JSON Web Keys (JWK). The secret key is written to --out with owner-only
permissions; --public-out writes the public half to share (x25519, ed25519).

Examples:
  deathtensors keygen --type symmetric --kid team --out team.jwk
  deathtensors keygen --type x25519 --kid alice --out alice.jwk --public-out alice.pub.jwk
  deathtensors keygen --type ed25519 --out publisher.jwk --public-out publisher.pub.jwk")]
    Keygen(KeygenArgs),

    /// Show a JWK key file: each key's kind, key id, fingerprint and public half (never the secret).
    #[command(after_help = "\
The fingerprint (16 hex digits of SHA-256 of the public key) is how `inspect`,
`verify` and errors name a signer. `inspect KEY.jwk` shows the same.

Examples:
  deathtensors key publisher.jwk
  deathtensors key --json alice.pub.jwk")]
    Key(KeyArgs),

    /// Encrypt a file for recipients (and optionally sign it), atomically.
    #[command(after_help = "\
Recipients: symmetric JWK files and X25519 public JWK files (--recipient, repeatable),
and a passphrase (--recipient-passphrase-env VAR). Encrypted files keep their header
(names, shapes, metadata) in the clear and open only with a recipient's key.
deathtensors 0.3.0 refuses them (they fail closed).

Examples:
  deathtensors encrypt model.safetensors model.dt --recipient team.jwk
  deathtensors encrypt model.dt secret.dt --recipient alice.pub.jwk --sign publisher.jwk --checksum")]
    Encrypt(EncryptArgs),

    /// Decrypt a file for a key holder (--key), streaming and atomically.
    #[command(mut_arg("input", |a| a.help("The encrypted file to decrypt (a URL too)")))]
    #[command(mut_arg("output", |a| a.help("The plaintext file to write (replaced atomically if it exists)")))]
    #[command(after_help = "\
Examples:
  deathtensors decrypt secret.dt plain.dt --key team.jwk
  deathtensors decrypt secret.dt model.safetensors --key alice.jwk")]
    Decrypt(ConvertArgs),

    /// Add an Ed25519 signature to a file, keeping its other signatures.
    #[command(after_help = "\
A plaintext file must carry per-tensor digests (convert it with --checksum first).
The file is replaced atomically; its data is copied, not re-encoded.

Examples:
  deathtensors sign model.dt --with publisher.jwk")]
    Sign(SignArgs),

    /// Sign a model directory as OpenSSF model signing does (model.sig), with an ECDSA PEM key.
    #[command(after_help = "\
Writes a Sigstore bundle that `model_signing verify key|certificate` accepts: every file of
DIR (outside .git, .gitattributes, .github, .gitignore and --ignore) is listed with its
SHA-256, and the list is signed. Keys: ECDSA P-256 or P-384 in PEM (PKCS#8 \"PRIVATE KEY\" or
SEC1 \"EC PRIVATE KEY\"). Ed25519 JWKs are the in-file signature keys of `sign`, not these.

Examples:
  deathtensors sign-model ./my-model --private-key signing-key.pem
  deathtensors sign-model ./my-model --private-key key.pem --signing-cert cert.pem --cert-chain ca.pem")]
    SignModel(crate::cmd::model_sign::SignModelArgs),

    /// Verify a model directory against its OpenSSF model-signing bundle (model.sig).
    #[command(after_help = "\
Checks the bundle's ECDSA signature with --public-key (a PEM public key, P-256 or P-384) or its
certificate chain against --cert-chain roots, then that every file matches: none changed,
missing or added outside the paths the signature ignores. Exit code 1 names what differs.

Examples:
  deathtensors verify-model ./my-model --public-key public-key.pem
  deathtensors verify-model ./my-model --cert-chain ca.pem -s release.sig")]
    VerifyModel(crate::cmd::model_sign::VerifyModelArgs),

    /// Appendable collections of rows (directories): create, append, truncate, export, convert.
    #[command(after_help = "\
A collection is a directory of same-shaped rows (embeddings, dataset features) that
grows by appending; Python's deathtensors.TensorBlob reads and writes it like a file.
Every command commits atomically: a crash leaves the collection as it was before.
`inspect`, `verify` and `convert` take collection directories too, and tensorblob's
directories read-only.

Examples:
  deathtensors blob create emb --dtype F32 --shape 768
  deathtensors blob create emb --from embeddings.safetensors --tensor emb
  deathtensors blob append emb more.dt
  deathtensors blob truncate emb 1000
  deathtensors blob export emb first.safetensors --rows 0:1000
  deathtensors blob convert old_tensorblob_dir emb")]
    Blob(BlobArgs),

    /// Write a distributed checkpoint (deathtensors.distributed) as one file or a Hugging Face checkpoint.
    #[command(after_help = "\
Reads the checkpoint's deathtensors.json and its rank files (every block checked
against its digest), without a process group. CKPT a directory, or a prefix on an
object store (s3://, gs://, az://, http(s)://; --storage-option as for any URL);
OUT is local. OUT a directory (existing, or ending
in /): model-0000k-of-0000n.safetensors and model.safetensors.index.json, which
transformers loads. Otherwise one file, with the non-tensor values as JSON in its
metadata (dcp.values). Memory: one output shard (the whole model for one file) plus
one block.

Examples:
  deathtensors consolidate ckpt/step-1000 model.safetensors
  deathtensors consolidate ckpt/step-1000 hf-model/ --max-shard-bytes 2000000000
  deathtensors consolidate s3://bucket/ckpt/step-1000 model.dt --storage-option aws_region=us-east-1")]
    Consolidate(ConsolidateArgs),

    /// Say what a pickle checkpoint would do, without loading or running anything.
    #[command(after_help = "\
Reads each FILE's pickle (the data.pkl of a torch.save zip, or the file itself)
with deathtensors' own pickle machine, which never imports or calls anything
(docs/PICKLE.md), and lists every name it refers to, allowed or not, and the
calls it would make. A plain tensor checkpoint (only the allow list of torch's
tensor constructors) exits 0; any other file exits 1 and says why.

Examples:
  deathtensors scan pytorch_model.bin
  deathtensors scan --json *.pt")]
    Scan(ScanArgs),
}

/// Options of `blob`.
#[derive(Debug, Args)]
pub struct BlobArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: BlobCommand,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// A `blob` subcommand.
#[derive(Debug, Subcommand)]
pub enum BlobCommand {
    /// Create a collection: from --dtype and --shape, or from a tensor of a file (its rows).
    Create {
        /// The directory to create.
        dir: PathBuf,
        /// The rows' dtype (F32, BF16, F8_E4M3, ... or torch's names: float32, bfloat16).
        #[arg(long)]
        dtype: Option<String>,
        /// The shape of one row: 768, or 3,224,224.
        #[arg(long)]
        shape: Option<String>,
        /// Rows per block file.
        #[arg(long, default_value_t = deathtensors_io::format::DEFAULT_BLOCK_ROWS)]
        block_rows: u64,
        /// Take dtype, row shape and the rows from a tensor of this file ([rows, ...row]).
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
        /// The tensor of --from [default: its only tensor].
        #[arg(long)]
        tensor: Option<String>,
    },
    /// Append the rows of a file's tensors ([n, ...row] or one row) to a collection.
    Append {
        /// The collection.
        dir: PathBuf,
        /// A deathtensors or safetensors file.
        file: PathBuf,
        /// Only this tensor [default: every tensor, in header order].
        #[arg(long)]
        tensor: Option<String>,
    },
    /// Cut a collection to its first ROWS rows.
    Truncate {
        /// The collection.
        dir: PathBuf,
        /// The rows to keep.
        rows: u64,
    },
    /// Write rows of a collection as one tensor of a deathtensors or safetensors file.
    Export {
        /// The collection (ours or tensorblob's).
        dir: PathBuf,
        /// The file to write (replaced atomically).
        output: PathBuf,
        /// Which rows: A:B, A:, :B or N (the first N) [default: all].
        #[arg(long)]
        rows: Option<String>,
        /// The tensor's name.
        #[arg(long, default_value = "rows")]
        name: String,
        /// The output format [default: safetensors for a .safetensors OUT, else deathtensors]
        /// (--to, its old spelling, still works).
        #[arg(long = "format", alias = "to", value_enum)]
        format: Option<FormatArg>,
        /// Record a SHA-256 digest and footer (deathtensors).
        #[arg(long)]
        checksum: bool,
    },
    /// Copy a collection (or a tensorblob directory) into a new collection.
    Convert {
        /// The collection to read.
        input: PathBuf,
        /// The new collection's directory.
        output: PathBuf,
        /// Rows per block file [default: the input's].
        #[arg(long)]
        block_rows: Option<u64>,
    },
}

/// Options of `keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The kind of key.
    #[arg(long = "type", value_enum)]
    pub kind: KeyKind,
    /// The key id (symmetric and x25519 keys, and keys in cryptotensors'
    /// format, need one) [default: key].
    #[arg(long)]
    pub kid: Option<String>,
    /// Where to write the secret key, readable by its owner only; an
    /// existing file is never replaced [default: stdout].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where to write the public half (x25519, ed25519); an existing file is
    /// never replaced, and if this fails the secret key is not kept either.
    #[arg(long)]
    pub public_out: Option<PathBuf>,
    /// The JWK dialect: ours (RFC 7517/8037, base64url), or cryptotensors'
    /// (what its register_direct_key_provider takes: lowercase kty, alg,
    /// standard base64); both read here.
    #[arg(long, value_enum, default_value = "jwk")]
    pub format: KeyFormat,
}

/// Options of `key`.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The JWK file (one key, a JWK set or an array).
    pub file: PathBuf,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// How a key file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KeyFormat {
    /// A standard JWK.
    Jwk,
    /// cryptotensors' JWK dialect (symmetric and Ed25519 keys).
    Cryptotensors,
}

/// A kind of key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KeyKind {
    /// 32 random bytes for AES-256-GCM or ChaCha20-Poly1305.
    Symmetric,
    /// An X25519 key pair: writers encrypt to the public half.
    X25519,
    /// An Ed25519 key pair: signs files.
    Ed25519,
}

impl Command {
    /// The reading options of the command, if it reads files.
    pub fn read_args(&self) -> ReadArgs {
        match self {
            Command::Inspect(a) => a.read.clone(),
            Command::Ls(a) => a.read.clone(),
            Command::Manifest(a) => a.read.clone(),
            Command::Verify(a) => a.read.clone(),
            Command::Convert(a) | Command::Decrypt(a) => a.read.clone(),
            Command::Diff(a) => a.read.clone(),
            Command::Stats(a) => a.read.clone(),
            Command::Cat(a) => a.read.clone(),
            Command::Meta(a) => a.read.clone(),
            Command::Encrypt(a) => a.read.clone(),
            Command::Blob(a) => a.read.clone(),
            Command::Consolidate(a) => ReadArgs { store: a.store.clone(), ..ReadArgs::default() },
            Command::Keygen(_)
            | Command::Scan(_)
            | Command::Key(_)
            | Command::Sign(_)
            | Command::SignModel(_)
            | Command::VerifyModel(_) => ReadArgs::default(),
        }
    }
}

/// A cipher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CipherArg {
    /// AES-256-GCM (the default; fastest with AES instructions).
    #[value(name = "aes-256-gcm")]
    Aes256Gcm,
    /// ChaCha20-Poly1305.
    #[value(name = "chacha20-poly1305")]
    ChaCha20Poly1305,
}

/// Options of `encrypt`.
#[derive(Debug, Args)]
pub struct EncryptArgs {
    /// The file to encrypt.
    pub input: PathBuf,
    /// The encrypted deathtensors file to write.
    pub output: PathBuf,
    /// A recipient: a symmetric JWK file or an X25519 (public) JWK file (repeatable; --to, its
    /// old spelling, still works).
    #[arg(long = "recipient", alias = "to", value_name = "FILE")]
    pub recipients: Vec<PathBuf>,
    /// A passphrase recipient, read from this environment variable (--to-passphrase-env, its old
    /// spelling, still works).
    #[arg(long = "recipient-passphrase-env", alias = "to-passphrase-env", value_name = "VAR")]
    pub recipient_passphrase_env: Option<String>,
    /// The cipher [default: aes-256-gcm; for --format cryptotensors, the master key's `alg`, else
    /// aes-256-gcm].
    #[arg(long, value_enum)]
    pub cipher: Option<CipherArg>,
    /// Plaintext bytes per chunk [default: 1 MiB; 2 MiB for cryptotensors]
    /// (deathtensors: a power of two, 4096 to 67108864).
    #[arg(long)]
    pub chunk_size: Option<u64>,
    /// The output format: deathtensors, or a cryptotensors 0.2.3 file (for
    /// readers that use cryptotensors; one --recipient symmetric key, one --sign key).
    #[arg(long, value_enum, default_value = "deathtensors")]
    pub format: EncryptFormat,
    /// The cryptotensors layout version (2: chunked, 1: whole tensors).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub ct_version: u8,
    /// Sign with this Ed25519 JWK file (repeatable).
    #[arg(long, value_name = "FILE")]
    pub sign: Vec<PathBuf>,
    /// Record per-tensor SHA-256 digests (of the ciphertext) and a footer.
    #[arg(long)]
    pub checksum: bool,
    /// Encrypt the header too: tensor names, shapes and metadata are hidden
    /// from whoever has no key (deathtensors format only).
    #[arg(long)]
    pub seal_header: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// What `encrypt` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EncryptFormat {
    /// deathtensors v1 with encryption (flag bit 2).
    Deathtensors,
    /// A cryptotensors 0.2.3 file (safetensors with its crypto fields).
    Cryptotensors,
}

/// Options of `sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The file to sign.
    pub file: PathBuf,
    /// The Ed25519 JWK file (with its secret "d").
    #[arg(long = "with", value_name = "KEY")]
    pub with: PathBuf,
}

/// Options of `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The file (a sharded index, a collection or a URL too; a JWK key file shows the key, as `key`).
    pub file: PathBuf,
    /// An Ed25519 public key (JWK file) you trust: a signature by it is shown as verified, and named by
    /// its key id (repeatable).
    #[arg(long, value_name = "KEY")]
    pub signer: Vec<PathBuf>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// Options of `ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// The file.
    pub file: PathBuf,
    /// Print a JSON array of names on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// Options of `verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The file.
    pub file: PathBuf,
    /// Succeed (with a note) when the file carries no checksum at all.
    #[arg(long)]
    pub allow_missing: bool,
    /// Require a valid signature by the Ed25519 key of this JWK file (repeatable: any of them).
    #[arg(long, value_name = "FILE")]
    pub signer: Vec<PathBuf>,
    /// Require a valid signature (by anyone, unless --signer).
    #[arg(long)]
    pub require_signature: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// deathtensors v1.
    Deathtensors,
    /// safetensors.
    Safetensors,
    /// bintensors 0.2 (written byte for byte as bintensors writes it).
    Bintensors,
}

/// Options of `convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The file to convert (a sharded index or a URL too).
    #[arg(value_name = "IN")]
    pub input: PathBuf,
    /// The file to write (replaced atomically if it exists).
    #[arg(value_name = "OUT")]
    pub output: PathBuf,
    /// The output format [default: from OUT's extension] (--to, its old spelling, still works).
    #[arg(long = "format", alias = "to", value_enum)]
    pub format: Option<FormatArg>,
    /// Record per-tensor SHA-256 digests and a SHA-256 footer (deathtensors only)
    /// [default: on when converting a deathtensors file that has a checksum].
    #[arg(long, conflicts_with = "no_checksum")]
    pub checksum: bool,
    /// Write no checksum, even if the input has one.
    #[arg(long)]
    pub no_checksum: bool,
    /// Start each tensor at a multiple of this power of two (deathtensors only) [default: 64].
    #[arg(long)]
    pub alignment: Option<u64>,
    /// Compress each tensor in zstd chunks at LEVEL (1 to 22) [default level: 3]; tensors still
    /// load one by one (deathtensors only; deathtensors 0.3.0 cannot read the file).
    #[arg(long, value_name = "LEVEL", num_args = 0..=1, require_equals = true, default_missing_value = DEFAULT_LEVEL)]
    pub compress: Option<i32>,
    /// With --compress: write deathtensors 0.3.0's whole-file zstd frame instead, which 0.3.0 reads
    /// (loading one tensor then decompresses the whole file).
    #[arg(long, requires = "compress")]
    pub blob: bool,
    /// Require a valid signature by the Ed25519 key of this JWK file (repeatable: any of them);
    /// nothing is written otherwise.
    #[arg(long, value_name = "FILE")]
    pub signer: Vec<PathBuf>,
    /// Require a valid signature (by anyone, unless --signer).
    #[arg(long)]
    pub require_signature: bool,
    /// For a torch pickle checkpoint: leave out values that are neither tensors nor plain
    /// numbers and strings (bytes, sets), which are refused otherwise.
    #[arg(long)]
    pub skip_other_values: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// Options of `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first file.
    pub a: PathBuf,
    /// The second file.
    pub b: PathBuf,
    /// Absolute tolerance for values [default: exact comparison].
    #[arg(long)]
    pub atol: Option<f64>,
    /// Relative tolerance for values [default: exact comparison].
    #[arg(long)]
    pub rtol: Option<f64>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// Options of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The file.
    pub file: PathBuf,
    /// The tensors [default: all].
    pub names: Vec<String>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// Options of `manifest`.
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// The file.
    pub file: PathBuf,
    /// Where to write the manifest [default: FILE.json].
    pub out: Option<PathBuf>,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// Options of `cat`.
#[derive(Debug, Args)]
pub struct CatArgs {
    /// The file.
    pub file: PathBuf,
    /// The tensor.
    pub name: String,
    /// Write the tensor's raw little-endian bytes to stdout.
    #[arg(long, conflicts_with_all = ["json", "full"])]
    pub raw: bool,
    /// Print every value, however many.
    #[arg(long)]
    pub full: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

/// Options of `meta`.
#[derive(Debug, Args)]
pub struct MetaArgs {
    /// The file.
    pub file: PathBuf,
    /// Set a key (repeatable).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub set: Vec<(String, String)>,
    /// Delete a key (repeatable).
    #[arg(long, value_name = "KEY")]
    pub delete: Vec<String>,
    /// Print the (resulting) metadata as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keys, policy input, object store settings.
    #[command(flatten)]
    pub read: ReadArgs,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// Options of `scan`.
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// The pickle checkpoints (.bin, .pt, .pth, .ckpt, or a bare pickle).
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Print one JSON object per file instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Options of `consolidate`.
#[derive(Debug, Args)]
pub struct ConsolidateArgs {
    /// Object store settings (for a checkpoint on an object store).
    #[command(flatten)]
    pub store: StoreOptions,
    /// The checkpoint: a directory, or an `s3://`, `gs://`, `az://` or `http(s)://` prefix (with `deathtensors.json`).
    pub checkpoint: PathBuf,
    /// One local file, or a local directory (existing, or ending in `/`) for a Hugging Face sharded checkpoint.
    pub out: PathBuf,
    /// For a directory: the largest shard in bytes (a larger tensor gets a shard of its own).
    #[arg(long, default_value_t = deathtensors_io::DEFAULT_MAX_SHARD_BYTES)]
    pub max_shard_bytes: u64,
    /// For one file: its format [default: safetensors for a .safetensors name, else deathtensors]
    /// (--to, its old spelling, still works).
    #[arg(long = "format", alias = "to", value_enum)]
    pub format: Option<FormatArg>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn compress_defaults_to_io_s_level() {
        assert_eq!(super::DEFAULT_LEVEL.parse::<i32>(), Ok(deathtensors_io::Compress::DEFAULT_LEVEL));
    }
}
