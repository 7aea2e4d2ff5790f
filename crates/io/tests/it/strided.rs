//! Saves of strided views (`save_views`): the same file, byte for byte, as
//! a save of the same bytes made contiguous, for every kind of file.

use std::sync::Arc;

use deathtensors_format::{Dtype, Format, TensorSpec};
use deathtensors_io::{
    save, save_views, Compress, KeyRing, ReadOptions, Reader, Strided, SymmetricKey, TensorBytes, WriteOptions,
};

/// A 300 x 257 matrix of u16 (rows of 514 bytes, so that runs straddle the
/// hasher's 64-byte blocks), and two column tiles of it.
fn matrix() -> Vec<u8> {
    (0..300 * 257 * 2).map(|i| (i * 7 + i / 514) as u8).collect()
}

fn tile(m: &[u8], c0: usize, c1: usize) -> Vec<u8> {
    m.chunks_exact(514).flat_map(|row| row[c0 * 2..c1 * 2].to_vec()).collect()
}

fn view(m: &[u8], c0: usize, c1: usize) -> TensorBytes<'_> {
    Strided::new(&m[c0 * 2..], (c1 - c0) * 2, 514, 300).unwrap().into()
}

#[test]
fn a_strided_view_saves_the_same_file_as_its_contiguous_copy() {
    let dir = crate::scratch("strided-same-file");
    let m = matrix();
    let (left, right) = (tile(&m, 0, 100), tile(&m, 100, 257));
    let key = Arc::new(SymmetricKey::new("team", &[7u8; 32]).unwrap());
    let kinds = [
        ("plain", WriteOptions::default()),
        ("footer", WriteOptions { checksum: true, ..WriteOptions::default() }),
        ("digests", WriteOptions { checksum: true, footer: false, ..WriteOptions::default() }),
        ("safetensors", WriteOptions { format: Format::Safetensors, ..WriteOptions::default() }),
        ("zstd", WriteOptions { compress: Compress::Chunked { level: 3 }, ..WriteOptions::default() }),
        ("encrypted", crate::encrypted_for(&key)),
    ];
    for (kind, options) in kinds {
        let specs =
            [TensorSpec::new("b.right", Dtype::U16, [300, 157]), TensorSpec::new("a.left", Dtype::U16, [300, 100])];
        let (a, b) = (dir.join(format!("{kind}-views.dt")), dir.join(format!("{kind}-copies.dt")));
        save_views(&a, vec![(specs[0].clone(), view(&m, 100, 257)), (specs[1].clone(), view(&m, 0, 100))], &options)
            .unwrap();
        save(&b, vec![(specs[0].clone(), &right[..]), (specs[1].clone(), &left[..])], &options).unwrap();
        let (fa, fb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        if kind == "encrypted" {
            // Fresh keys and nonces each save: compare what reads back.
            let mut keys = KeyRing::new();
            keys.add_symmetric(key.clone());
            let r = Reader::open_with(&a, ReadOptions { keys, ..ReadOptions::default() }).unwrap();
            assert_eq!(r.read("a.left").unwrap(), left, "{kind}");
            assert_eq!(r.read("b.right").unwrap(), right, "{kind}");
            continue;
        }
        assert!(fa == fb, "{kind}: a strided save differs from the contiguous one");
        let r = Reader::open(&a).unwrap();
        assert_eq!(r.read("a.left").unwrap(), left, "{kind}");
        if options.checksum {
            r.verify().unwrap();
        }
    }
}

#[test]
fn a_view_whose_length_does_not_match_its_spec_is_refused() {
    let dir = crate::scratch("strided-length");
    let m = matrix();
    let spec = TensorSpec::new("t", Dtype::U16, [300, 99]);
    let err = save_views(dir.join("t.dt"), vec![(spec, view(&m, 0, 100))], &WriteOptions::default()).unwrap_err();
    assert!(err.to_string().contains("60000 bytes given"), "{err}");
    assert_eq!(std::fs::read_dir(&*dir).unwrap().count(), 0, "a temp file was left");
}
