//! bintensors 0.2 files: `save` and the incremental `Writer` write what
//! bintensors writes (the fixtures, byte for byte), and `Reader` reads them
//! back, owned and mapped. Reading every fixture is in `fixtures`.

use deathtensors_io::format::{Dtype, Format, Metadata, TensorSpec};
use deathtensors_io::{save, Reader, WriteOptions, Writer};

fn bintensors() -> WriteOptions {
    WriteOptions { format: Format::Bintensors, ..WriteOptions::default() }
}

#[test]
fn save_and_writer_reproduce_every_fixture() {
    let dir = crate::scratch("bintensors-fixtures");
    let valid = crate::testdata().join("valid/bintensors-0.2.0");
    let mut checked = 0;
    for entry in std::fs::read_dir(&valid).unwrap() {
        let src = entry.unwrap().path();
        let reader = Reader::open(&src).unwrap();
        assert_eq!(reader.format(), Format::Bintensors);
        let options = WriteOptions { metadata: reader.model_metadata(), ..bintensors() };
        let data: Vec<Vec<u8>> = reader.header().tensors().iter().map(|t| reader.read(&t.name).unwrap()).collect();
        // Given in reverse: the writer sorts as bintensors does.
        let tensors: Vec<(TensorSpec, &[u8])> =
            reader.header().tensors().iter().zip(&data).map(|(t, d)| (t.to_spec(), &d[..])).rev().collect();
        let out = dir.join("saved.bt");
        save(&out, tensors, &options).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&src).unwrap(), "{}", src.display());

        let specs: Vec<TensorSpec> = reader.header().tensors().iter().map(|t| t.to_spec()).collect();
        let out = dir.join("written.bt");
        let mut w = Writer::create(&out, specs, &options).unwrap();
        for (t, d) in reader.header().tensors().iter().zip(&data).rev() {
            w.write_tensor(&t.name, d).unwrap();
        }
        w.finish().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&src).unwrap(), "{}", src.display());
        // SAFETY: the test's own file, not modified while mapped.
        let mapped = unsafe { Reader::open_mmap(&out) }.unwrap();
        for (t, d) in reader.header().tensors().iter().zip(&data) {
            assert_eq!(mapped.bytes(&t.name).unwrap(), &d[..]);
        }
        checked += 1;
    }
    assert!(checked >= 15);
}

#[test]
fn no_metadata_and_empty_metadata_are_two_files() {
    let dir = crate::scratch("bintensors-metadata");
    let w = [0u8; 8];
    let spec = || vec![(TensorSpec::new("w", Dtype::F32, [2]), &w[..])];
    let (none, empty) = (dir.join("none.bt"), dir.join("empty.bt"));
    save(&none, spec(), &bintensors()).unwrap();
    save(&empty, spec(), &WriteOptions { metadata: Some(Metadata::new()), ..bintensors() }).unwrap();
    assert_eq!(Reader::open(&none).unwrap().model_metadata(), None);
    assert_eq!(Reader::open(&empty).unwrap().model_metadata(), Some(Metadata::new()));
    assert_eq!(std::fs::read(&none).unwrap()[8], 0);
    assert_eq!(std::fs::read(&empty).unwrap()[8..10], [1, 0]);
}

#[test]
fn what_bintensors_cannot_hold_is_refused_before_anything_is_written() {
    let dir = crate::scratch("bintensors-refused");
    let out = dir.join("out.bt");
    let c = [0u8; 8];
    let err = save(&out, vec![(TensorSpec::new("z", Dtype::C64, [1]), &c[..])], &bintensors()).unwrap_err();
    assert!(err.to_string().contains("tensor \"z\": bintensors files cannot store dtype C64"), "{err}");
    let err = save(&out, vec![], &WriteOptions { checksum: true, ..bintensors() }).unwrap_err();
    assert!(err.to_string().contains("bintensors files have no checksum"), "{err}");
    assert!(crate::entries(&dir).is_empty());
    // A structural check is all `verify` can do: there is no digest.
    let src = crate::testdata().join("valid/bintensors-0.2.0/np_all_dtypes.bt");
    let reader = Reader::open(&src).unwrap();
    assert!(reader.verify().is_err());
    assert_eq!(reader.head().header.len(), 15);
}
