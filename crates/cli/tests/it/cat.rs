//! `cat`: values printed as numpy prints them, summaries of big tensors,
//! JSON values, and raw bytes.

use deathtensors_io::format::Dtype;
use deathtensors_io::{Reader, WriteOptions};
use serde_json::json;

use crate::{assert_one_error_line, check, f32s, json, valid, write, Scratch};

#[track_caller]
fn cat(path: &std::path::Path, name: &str, expected: &str) {
    let r = check(["cat".as_ref(), path.as_os_str(), name.as_ref()], 0);
    assert_eq!(r.stdout, expected, "{name}");
}

#[test]
fn small_tensors_print_whole() {
    let path = valid("safetensors-0.8.0/all_dtypes.safetensors");
    cat(
        &path,
        "f32",
        "\
[[ 0.39096507   1.2983452   -0.44599044  -1.5889472  ]
 [-0.19287914   0.40805104   0.7944606   -1.455569   ]
 [-1.1597971    1.3550045   -1.0816667    1.0047538  ]
 [-0.2483279   -0.077271536  0.07982534  -0.9029777  ]]
",
    );
    cat(&path, "bf16", "[[-1.12  -0.404]\n [ 0.228 -1.24 ]\n [-1.82  -0.128]]\n");
    cat(&path, "f16", "[[-1.231   0.1864  0.819 ]\n [ 0.2134 -0.3796 -1.318 ]]\n");
    cat(&path, "bool", "[False False  True False]\n");
    cat(&path, "i8", "[-49 -44 112 105  22]\n");
    cat(&path, "u64", "[2734343916559909139  793275208392209269]\n");
    cat(&path, "c64", "[-0.9172155-0.06293499j  1.3169005-0.873875j  ]\n");
    cat(&path, "f8_e4m3", "[-0.4375 -0.6875  1.25    0.375   1.75   -0.5625]\n");
    cat(&path, "scalar", "1.25\n");
    cat(&path, "empty_dim", "[]\n");
}

#[test]
fn big_tensors_are_summarised_like_numpy() {
    let dir = Scratch::new("cat-big");
    let path = dir.path("big.dt");
    let ints: Vec<u8> = (0..4 * 5 * 100i32).flat_map(|v| v.to_le_bytes()).collect();
    let floats = f32s(&(0..2000 * 3).map(|i| i as f32 * 0.5).collect::<Vec<_>>());
    let small = f32s(&(0..1500).map(|i| (i as f64 * 1e-5) as f32).collect::<Vec<_>>());
    write(
        &path,
        &[
            ("ints", Dtype::I32, &[4, 5, 100], ints),
            ("floats", Dtype::F32, &[2000, 3], floats),
            ("small", Dtype::F32, &[1500], small),
        ],
        &WriteOptions::default(),
    );
    let ints = check(["cat".as_ref(), path.as_os_str(), "ints".as_ref()], 0).stdout;
    let lines: Vec<&str> = ints.lines().collect();
    assert_eq!(lines.len(), 23, "{ints}");
    assert_eq!(lines[0], "[[[   0    1    2 ...   97   98   99]");
    assert_eq!(lines[1], "  [ 100  101  102 ...  197  198  199]");
    assert_eq!(lines[5], "");
    assert_eq!(lines[22], "  [1900 1901 1902 ... 1997 1998 1999]]]");
    cat(
        &path,
        "floats",
        "\
[[0.0000e+00 5.0000e-01 1.0000e+00]
 [1.5000e+00 2.0000e+00 2.5000e+00]
 [3.0000e+00 3.5000e+00 4.0000e+00]
 ...
 [2.9955e+03 2.9960e+03 2.9965e+03]
 [2.9970e+03 2.9975e+03 2.9980e+03]
 [2.9985e+03 2.9990e+03 2.9995e+03]]
",
    );
    cat(&path, "small", "[0.000e+00 1.000e-05 2.000e-05 ... 1.497e-02 1.498e-02 1.499e-02]\n");

    // --full prints every value, wrapping rows at 75 columns.
    let full = check(["cat".as_ref(), "--full".as_ref(), path.as_os_str(), "ints".as_ref()], 0).stdout;
    assert!(
        full.starts_with("[[[   0    1    2    3    4    5    6    7    8    9   10   11   12   13\n     14"),
        "{full}"
    );
    assert!(full.lines().all(|l| l.len() <= 75));
    assert_eq!(full.split_whitespace().filter(|w| w.trim_matches(['[', ']']).parse::<i32>().is_ok()).count(), 2000);

    let doc = json(["cat".as_ref(), path.as_os_str(), "floats".as_ref()], 0);
    assert_eq!(doc["summarised"], true);
    assert_eq!(doc["shape"], json!([2000, 3]));
    let rows = doc["values"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    assert_eq!(rows[0], json!([0.0, 0.5, 1.0]));
    assert_eq!(rows[3], "...");
    assert_eq!(rows[6], json!([2998.5, 2999.0, 2999.5]));
}

#[test]
fn json_values_are_exact() {
    let dir = Scratch::new("cat-json");
    let path = dir.path("v.dt");
    write(
        &path,
        &[
            ("f", Dtype::F32, &[2, 2], f32s(&[0.5, f32::NAN, f32::INFINITY, f32::NEG_INFINITY])),
            ("u", Dtype::U64, &[1], u64::MAX.to_le_bytes().to_vec()),
            ("b", Dtype::BOOL, &[2], vec![1, 0]),
            ("c", Dtype::C64, &[], f32s(&[1.0, -2.0])),
        ],
        &WriteOptions::default(),
    );
    let get = |name: &str| json(["cat".as_ref(), path.as_os_str(), name.as_ref()], 0);
    assert_eq!(
        get("f"),
        json!({ "name": "f", "dtype": "F32", "shape": [2, 2], "summarised": false, "values": [[0.5, "nan"], ["inf", "-inf"]] })
    );
    assert_eq!(get("u")["values"], json!([u64::MAX]));
    assert_eq!(get("b")["values"], json!([true, false]));
    assert_eq!(get("c")["values"], json!([1.0, -2.0]));
    cat(&path, "f", "[[ 0.5  nan]\n [ inf -inf]]\n");
    cat(&path, "u", "[18446744073709551615]\n");
    cat(&path, "c", "1.-2.j\n");
}

#[test]
fn raw_writes_the_bytes() {
    let path = valid("deathtensors-0.3.0/all_dtypes.deathtensors");
    let reader = Reader::open(&path).unwrap();
    for t in reader.header().tensors() {
        let r = check(["cat".as_ref(), "--raw".as_ref(), path.as_os_str(), t.name.as_str().as_ref()], 0);
        assert_eq!(r.bytes, reader.read(&t.name).unwrap(), "{}", t.name);
    }
}

#[test]
fn packed_dtypes_and_missing_tensors_are_errors() {
    let dir = Scratch::new("cat-errors");
    let path = dir.path("p.dt");
    write(&path, &[("p", Dtype::F4, &[4], vec![0x12, 0x34])], &WriteOptions::default());
    let r = check(["cat".as_ref(), path.as_os_str(), "p".as_ref()], 2);
    assert_one_error_line(&r, &["tensor \"p\"", "packed sub-byte dtype", "--raw"]);
    let r = check(["cat".as_ref(), "--raw".as_ref(), path.as_os_str(), "p".as_ref()], 0);
    assert_eq!(r.bytes, [0x12, 0x34]);
    let r = check(["cat".as_ref(), path.as_os_str(), "q".as_ref()], 2);
    assert_one_error_line(&r, &["p.dt", "no tensor named \"q\""]);
    assert_eq!(r.stdout, "");
}
