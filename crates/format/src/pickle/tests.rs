//! The machine on hand-made pickles: every protocol, the allow list, the
//! refusals and the limits (docs/PICKLE.md). Python-made corpora (torch's
//! own checkpoints, live payloads) are tested from the Python suite.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use alloc::{format, vec};

use super::*;
use crate::{Dtype, ErrorKind};

/// `{'a': 1, 'b': [1.5, None, True], 'c': OrderedDict(x=(1, 2)), 'd': "it's é",
/// 'e': b'\x00\xff', 'f': {3}, 'g': 2**40}` as Python pickles it.
const PROTOCOLS: [&[u8]; 4] = [
    b"(dp0\nVa\np1\nI1\nsVb\np2\n(lp3\nF1.5\naNaI01\nasVc\np4\nccollections\nOrderedDict\np5\n(tRp6\nVx\np7\n(I1\nI2\ntp8\nssVd\np9\nVit's \xe9\np10\nsVe\np11\nc_codecs\nencode\np12\n(V\\u0000\xff\np13\nVlatin1\np14\ntp15\nRp16\nsVf\np17\nc__builtin__\nset\np18\n((lp19\nI3\natp20\nRp21\nsVg\np22\nL1099511627776L\ns.",
    b"}q\x00(X\x01\x00\x00\x00aq\x01K\x01X\x01\x00\x00\x00bq\x02]q\x03(G?\xf8\x00\x00\x00\x00\x00\x00NI01\neX\x01\x00\x00\x00cq\x04ccollections\nOrderedDict\nq\x05)Rq\x06X\x01\x00\x00\x00xq\x07(K\x01K\x02tq\x08sX\x01\x00\x00\x00dq\tX\x07\x00\x00\x00it's \xc3\xa9q\nX\x01\x00\x00\x00eq\x0bc_codecs\nencode\nq\x0c(X\x03\x00\x00\x00\x00\xc3\xbfq\rX\x06\x00\x00\x00latin1q\x0etq\x0fRq\x10X\x01\x00\x00\x00fq\x11c__builtin__\nset\nq\x12(]q\x13K\x03atq\x14Rq\x15X\x01\x00\x00\x00gq\x16L1099511627776L\nu.",
    b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01K\x01X\x01\x00\x00\x00bq\x02]q\x03(G?\xf8\x00\x00\x00\x00\x00\x00N\x88eX\x01\x00\x00\x00cq\x04ccollections\nOrderedDict\nq\x05)Rq\x06X\x01\x00\x00\x00xq\x07K\x01K\x02\x86q\x08sX\x01\x00\x00\x00dq\tX\x07\x00\x00\x00it's \xc3\xa9q\nX\x01\x00\x00\x00eq\x0bc_codecs\nencode\nq\x0cX\x03\x00\x00\x00\x00\xc3\xbfq\rX\x06\x00\x00\x00latin1q\x0e\x86q\x0fRq\x10X\x01\x00\x00\x00fq\x11c__builtin__\nset\nq\x12]q\x13K\x03a\x85q\x14Rq\x15X\x01\x00\x00\x00gq\x16\x8a\x06\x00\x00\x00\x00\x00\x01u.",
    b"\x80\x04\x95{\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94]\x94(G?\xf8\x00\x00\x00\x00\x00\x00N\x88e\x8c\x01c\x94\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94\x8c\x01x\x94K\x01K\x02\x86\x94s\x8c\x01d\x94\x8c\x07it's \xc3\xa9\x94\x8c\x01e\x94C\x02\x00\xff\x94\x8c\x01f\x94\x8f\x94(K\x03\x90\x8c\x01g\x94\x8a\x06\x00\x00\x00\x00\x00\x01u.",
];

fn message(e: &crate::Error) -> String {
    e.to_string()
}

#[test]
fn every_protocol_gives_the_same_tree() {
    for (p, data) in PROTOCOLS.iter().enumerate() {
        let c = Checkpoint::read(data).unwrap_or_else(|e| panic!("protocol {p}: {e}"));
        let meta: Vec<(&str, &str)> = c.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            meta,
            [
                ("a", "1"),
                ("b.0", "1.5"),
                ("b.1", "None"),
                ("b.2", "True"),
                ("c.x.0", "1"),
                ("c.x.1", "2"),
                ("d", "it's é"),
                ("g", "1099511627776")
            ],
            "protocol {p}"
        );
        let others: Vec<(&str, &str)> = c.others.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(others, [("\"e\"", "bytes"), ("\"f\"", "a set")], "protocol {p}");
        assert!(c.tensors.is_empty());
    }
}

/// A torch-shaped pickle: `{"w": _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())}`.
fn tensor_pickle(numel: u64, offset: u8, size: &[u64], stride: &[u64]) -> Vec<u8> {
    let mut p = b"\x80\x02}q\x00X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n(".to_vec();
    p.extend_from_slice(
        b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu\x8a\x08",
    );
    p.extend_from_slice(&numel.to_le_bytes());
    p.extend_from_slice(b"tQK");
    p.push(offset);
    for dims in [size, stride] {
        p.push(b'(');
        for d in dims {
            p.push(0x8a);
            p.push(8);
            p.extend_from_slice(&d.to_le_bytes());
        }
        p.push(b't');
    }
    p.extend_from_slice(b"\x89ccollections\nOrderedDict\n)RtRs.");
    p
}

#[test]
fn a_tensor_is_a_view_of_its_storage_checked_against_it() {
    let c = Checkpoint::read(&tensor_pickle(6, 1, &[2, 2], &[2, 1])).unwrap();
    let (name, t) = &c.tensors[0];
    assert_eq!((name.as_str(), t.dtype, t.offset), ("w", Dtype::F32, 1));
    assert_eq!((t.shape.as_slice(), t.stride.as_slice()), ([2u64, 2].as_slice(), [2u64, 1].as_slice()));
    assert_eq!(c.storages[0].1.numel, 6);
    // Offset 1 + (2-1)*2 + (2-1)*1 = 4 < 6 elements; a stride of 3 reaches 5, still inside.
    Checkpoint::read(&tensor_pickle(6, 1, &[2, 2], &[3, 1])).unwrap();
    for (numel, offset, size, stride, says) in [
        (6u64, 2u8, &[2u64, 2][..], &[3u64, 1][..], "addresses bytes up to 28 of storage \"0\", which holds 24"),
        (6, 0, &[2, 2], &[1 << 62, 1], "its extent overflows"),
        (6, 0, &[5, 2], &[1 << 62, 1], "its strides overflow"),
        (6, 0, &[1 << 31, 1 << 31], &[0, 0], "its byte length overflows"),
        (6, 0, &[1 << 40, 1 << 40], &[0, 0], "its element count overflows"),
        (1 << 62, 0, &[2], &[1], "byte length overflows"),
        (6, 0, &[2, 2], &[1], "its size has 2 dimensions and its stride 1"),
    ] {
        let e = Checkpoint::read(&tensor_pickle(numel, offset, size, stride)).unwrap_err();
        assert!(message(&e).contains(says), "{says}: {e}");
    }
    // A stride-0 view of one element claiming 4 TiB is read as a view: its
    // materialisation is bounded by io, not by the pickle.
    let c = Checkpoint::read(&tensor_pickle(1, 0, &[1 << 20, 1 << 20], &[0, 0])).unwrap();
    assert_eq!(c.tensors[0].1.shape, [1 << 20, 1 << 20]);
    // Empty tensors need no bytes.
    Checkpoint::read(&tensor_pickle(0, 0, &[0, 5], &[5, 1])).unwrap();
}

#[test]
fn names_outside_the_allow_list_are_refused_naming_them_and_their_offset() {
    for (pickle, name, offset) in [
        (&b"cos\nsystem\n(S'echo'\ntR."[..], "os.system", 0u64),
        (b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00echo\x85R.", "posix.system", 2),
        (b"\x80\x02cbuiltins\neval\nX\x01\x00\x00\x001\x85R.", "builtins.eval", 2),
        // Through an allowed module: exact names only.
        (b"\x80\x02ctorch._utils\n_rebuild_tensor_v9\n)R.", "torch._utils._rebuild_tensor_v9", 2),
        (b"\x80\x02ctorch.storage\n_load_from_bytes\n)R.", "torch.storage._load_from_bytes", 2),
        (b"\x80\x02ctorch\nload\n)R.", "torch.load", 2),
        // STACK_GLOBAL with the names fetched through the memo.
        (b"\x80\x04\x8c\x05posix\x94\x8c\x06system\x94h\x00h\x01\x93)R.", "posix.system", 23),
        // INST.
        (b"(S'id'\nios\nsystem\n.", "os.system", 7),
    ] {
        let e = Checkpoint::read(pickle).unwrap_err();
        let m = message(&e);
        assert!(matches!(e.kind(), ErrorKind::InvalidPickle { .. }), "{m}");
        assert!(m.contains(&format!("refers to {name}, which is not on the allow list")), "{m}");
        assert_eq!(e.offset(), Some(offset), "{m}");
        // The scan lists it and does not stop.
        let s = scan(pickle).unwrap();
        assert!(s.names.iter().any(|n| n.name == name && !n.allowed), "{name}");
        assert!(s.verdict.is_err());
    }
    let s = scan(b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00echo\x85R.").unwrap();
    assert_eq!(s.calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["posix.system"]);
}

#[test]
fn allowed_names_are_applied_only_as_the_spec_says() {
    for (pickle, says) in [
        // A storage class called.
        (&b"\x80\x02ctorch\nFloatStorage\n)R."[..], "is allowed only inside a storage's persistent id"),
        // OrderedDict with a payload as its argument.
        (b"\x80\x02ccollections\nOrderedDict\nK\x01\x85R.", "its argument is not a list of pairs"),
        // _codecs.encode with another codec.
        (b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00rot13\x86R.", "encode(str, 'latin1')"),
        // BUILD on anything but a dictionary.
        (b"\x80\x02]}b.", "BUILD on a list"),
        // REDUCE of something that is not a callable.
        (b"\x80\x02K\x01)R.", "REDUCE calls an int"),
        (b"\x80\x02\x82\x01.", "EXT1/EXT2/EXT4"),
        (b"\x80\x05\x97.", "NEXT_BUFFER"),
        (b"\x80\x02Q.", "pops an empty stack"),
        (b"\x80\x02X\x01\x00\x00\x00xQ.", "not torch's 5-tuple"),
        (b"\x80\x06.", "protocol 6"),
        (b"\x80\x02\xff", "unknown opcode 0xff"),
        (b"\x80\x02h\x05.", "memo entry 5, which was never put"),
        (b"\x80\x02]q\x00h\x00a.", "contains itself"),
    ] {
        let e = Checkpoint::read(pickle).unwrap_err();
        assert!(message(&e).contains(says), "{says}: {e}");
    }
}

#[test]
fn lengths_and_counts_are_bounded_before_anything_is_allocated() {
    // A 4 GB string claimed in a 12-byte pickle, and others.
    let e = unpickle(b"\x80\x02X\xff\xff\xff\xff", true).unwrap_err();
    assert!(message(&e).contains("BINUNICODE claims 4294967295 bytes, more than the 0 left"), "{e}");
    let e = unpickle(b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff", true).unwrap_err();
    assert!(message(&e).contains("claims 18446744073709551615 bytes"), "{e}");
    let e = unpickle(b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\x00\x00N.", true).unwrap_err();
    assert!(message(&e).contains("FRAME claims 281474976710655 bytes, more than the 2 left"), "{e}");
    // A memo index of 2**31 costs one entry.
    let u = unpickle(b"\x80\x02Nr\x00\x00\x00\x80j\x00\x00\x00\x80\x86.", true).unwrap();
    assert!(u.arena.len() < 4);
    // A million and one marks.
    let mut marks = vec![b'('; MAX_PICKLE_STACK + 1];
    marks.push(b'.');
    let e = unpickle(&marks, true).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::LimitExceeded { .. }), "{e}");
    // Nesting past the walk's depth.
    let mut deep = b"\x80\x02".to_vec();
    deep.extend(core::iter::repeat_n(b']', MAX_PICKLE_DEPTH + 2));
    deep.extend(core::iter::repeat_n(b'a', MAX_PICKLE_DEPTH + 1));
    deep.push(b'.');
    let e = Checkpoint::read(&deep).unwrap_err();
    assert!(message(&e).contains("nesting depth"), "{e}");
    // Integers past 64 bits.
    let e = unpickle(b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", true).unwrap_err();
    assert!(message(&e).contains("beyond 64 bits"), "{e}");
    assert_eq!(
        unpickle(b"\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\xff.", true).unwrap().arena.int(Id(0)),
        Some(-1)
    );
}

#[test]
fn truncated_input_is_an_error_at_every_cut() {
    let data = tensor_pickle(6, 1, &[2, 2], &[2, 1]);
    for cut in 0..data.len() {
        assert!(Checkpoint::read(&data[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn a_dictionary_key_set_twice_keeps_its_place_and_last_value() {
    let c =
        Checkpoint::read(b"\x80\x02}(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00bK\x02X\x01\x00\x00\x00aK\x03u.").unwrap();
    let meta: Vec<(String, String)> = c.metadata;
    assert_eq!(meta, [("a".to_string(), "3".to_string()), ("b".to_string(), "2".to_string())]);
}

#[test]
fn arbitrary_bytes_never_panic() {
    use proptest::prelude::*;
    proptest!(ProptestConfig::with_cases(2000), |(data in proptest::collection::vec(any::<u8>(), 0..200))| {
        let _ = unpickle(&data, true);
        let _ = scan(&data);
        let mut framed = b"\x80\x02".to_vec();
        framed.extend_from_slice(&data);
        let _ = Checkpoint::read(&framed);
    });
}
