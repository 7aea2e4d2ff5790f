//! A torch checkpoint read as the safetensors file it converts to
//! (`ConvertedSource`): every byte of the virtual file is the byte
//! `convert_torch_checkpoint` writes, whatever the reads' sizes.

use deathtensors_io::format::Format;
use deathtensors_io::{
    convert_torch_checkpoint, open_torch_checkpoint, ConvertedSource, ReadAt, ReadOptions, TorchCheckpoint,
    WriteOptions,
};

use crate::{scratch, testdata};

#[test]
fn the_virtual_file_is_the_conversion_byte_for_byte() {
    let dir = scratch("torch-source");
    for input in ["views.pt", "legacy.pt"] {
        let path = testdata().join("torch").join(input);
        let out = dir.join(format!("{input}.safetensors"));
        let options = WriteOptions { format: Format::Safetensors, ..WriteOptions::default() };
        convert_torch_checkpoint(&path, &out, &options, false).unwrap();
        let want = std::fs::read(&out).unwrap();
        let source = ConvertedSource::new(TorchCheckpoint::open(&path).unwrap(), &path).unwrap();
        assert_eq!(source.len(), want.len() as u64, "{input}");
        // Reads of every size from 1 to 13 bytes, each crossing the head's
        // end and tensor boundaries somewhere.
        for step in 1..=13 {
            let mut got = vec![0u8; want.len()];
            for (i, chunk) in got.chunks_mut(step).enumerate() {
                source.read_exact_at(chunk, (i * step) as u64).unwrap();
            }
            assert!(got == want, "{input}, reads of {step} bytes");
        }
        // Past the end: an error, not a panic.
        let mut one = [0u8; 1];
        assert!(source.read_exact_at(&mut one, want.len() as u64).is_err());
        assert!(source.read_exact_at(&mut one, u64::MAX).is_err());
        // As a Reader: the same tensors as the conversion's.
        let ours = open_torch_checkpoint(&path, ReadOptions::default()).unwrap();
        let theirs = deathtensors_io::Reader::open(&out).unwrap();
        assert_eq!(ours.header().tensors(), theirs.header().tensors(), "{input}");
        for t in theirs.header().tensors() {
            assert_eq!(ours.read(&t.name).unwrap(), theirs.read(&t.name).unwrap(), "{input} {}", t.name);
        }
    }
}
