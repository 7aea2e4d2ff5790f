//! The properties the fuzz targets check, one function per target. Each
//! takes any bytes and panics if the property does not hold.
//!
//! Shared by the targets (through the fuzz crate's `lib.rs`) and by
//! `crates/format/tests/it/fuzz_regressions.rs`, so that `cargo test`
//! replays `testdata/fuzz/` through the very same checks without depending
//! on the fuzz crate.

use deathtensors_format::{
    check_block_name, chunk_count, chunk_nonce, chunk_range, encode_signatures, parse_signatures, signature_block_len,
    signed_message, ChunkAad, ErrorKind, Flags, Head, Header, Limits, Manifest, Prefix, Result, SignatureRecord,
    TableLayout, FOOTER_LEN, HEADER_MAC_LEN, MAGIC, MAX_EXPANSION, MAX_SIGNATURES, SIGNATURE_RECORD_LEN,
    SIGNATURE_TRAILER_LEN, TAG_LEN,
};

/// A property: panics if it does not hold for the input.
pub type Property = fn(&[u8]);

/// Every target, by name: a file in `testdata/fuzz/` is named
/// `<target>-<hash>` and replayed through the target's property.
pub const TARGETS: &[(&str, Property)] = &[
    ("deathtensors_header", deathtensors_header),
    ("safetensors_header", safetensors_header),
    ("file", file),
    ("signatures", signatures),
    ("manifest", manifest),
    ("bintensors", bintensors),
    ("pickle", pickle),
];

/// Length of the safetensors header-length field that precedes its JSON.
const SAFETENSORS_LEN_FIELD: usize = 8;

/// The header target lays a header out as a whole file (zero blob) and
/// parses that too, when the file is at most this long: the blob's length
/// comes from the input's offsets, not from its size.
const MAX_LAID_OUT_FILE: u64 = 4 << 20;

/// A deathtensors JSON header that parses encodes to a head whose JSON parses
/// to an equal header, and encoding that again gives the same bytes. With an
/// `encryption` section it encodes with flag bit 2, and the head ends where
/// the tag table starts. Laid out as a whole file (FORMAT.md 1 and 10.1,
/// with or without footer and signature block), it parses to the same
/// header, at the offsets the encoder chose.
pub fn deathtensors_header(data: &[u8]) {
    if let Ok(header) = Header::parse_deathtensors(data, &Limits::DEFAULT) {
        let mut flags = if header.encryption().is_some() { Flags::ENCRYPTED } else { Flags::EMPTY };
        if header.compression().is_some() {
            flags = flags | Flags::COMPRESSED;
            chunks_tile(&header);
        }
        roundtrip(&header, flags, Prefix::LEN, Header::parse_deathtensors);
        laid_out(&header, flags);
        // A signed file must give every tensor a digest.
        if header.has_tensor_digests() {
            laid_out(&header, flags | Flags::CHECKSUM | Flags::SIGNED);
        }
    }
}

/// In a header of compressed tensors, each chunk table tiles its tensor:
/// raw chunks back to back over the tensor's raw bytes, stored chunks back to
/// back over its stored range, none stored longer than raw, and only
/// non-empty tensors listed.
fn chunks_tile(header: &Header) {
    assert!(header.encryption().is_none(), "compression with encryption");
    for (i, t) in header.tensors().iter().enumerate() {
        let Some(table) = header.chunk_table(i) else { continue };
        assert!(t.byte_len() > 0 && !table.is_empty(), "a table for an empty tensor: {}", t.name);
        let (mut raw, mut stored) = (0u64, 0u64);
        for c in table.chunks() {
            assert_eq!((c.raw.0, c.stored.0), (raw, stored), "chunks of {} do not tile", t.name);
            assert!(c.raw.1 > c.raw.0 && c.stored.1 > c.stored.0, "an empty chunk in {}", t.name);
            assert!(c.stored.1 - c.stored.0 <= c.raw.1 - c.raw.0, "a chunk of {} stored longer than raw", t.name);
            assert!(
                (c.stored.1 - c.stored.0) * MAX_EXPANSION >= c.raw.1 - c.raw.0,
                "a chunk of {} expands more than a zstd frame can",
                t.name
            );
            (raw, stored) = (c.raw.1, c.stored.1);
        }
        assert_eq!((raw, stored), (t.byte_len(), t.stored_len()), "chunks of {} do not cover it", t.name);
    }
}

/// A bintensors header (the bytes after the 8-byte length) that parses is
/// canonical: encoding it gives back exactly its bytes after the length
/// (bintensors' writer writes one head for one header). Laid out as a
/// whole file, it parses to the same header.
pub fn bintensors(data: &[u8]) {
    if let Ok(header) = Header::parse_bintensors(data, &Limits::DEFAULT) {
        let head = Head::encode(&header, Flags::EMPTY)
            .unwrap_or_else(|e| panic!("a bintensors header that parsed does not encode: {e}\n{header:#?}"));
        assert_eq!(&head[..SAFETENSORS_LEN_FIELD], &(data.len() as u64).to_le_bytes(), "header length field");
        assert!(head[SAFETENSORS_LEN_FIELD..] == *data, "an accepted bintensors header is not the one we write for it");
        laid_out(&header, Flags::EMPTY);
    }
}

/// As [`deathtensors_header`], for a safetensors JSON header.
pub fn safetensors_header(data: &[u8]) {
    if let Ok(header) = Header::parse_safetensors(data, &Limits::DEFAULT) {
        assert!(header.encryption().is_none(), "a safetensors header with an encryption section");
        roundtrip(&header, Flags::EMPTY, SAFETENSORS_LEN_FIELD, Header::parse_safetensors);
    }
}

fn roundtrip(header: &Header, flags: Flags, json_start: usize, parse: fn(&[u8], &Limits) -> Result<Header>) {
    let head = Head::encode(header, flags)
        .unwrap_or_else(|e| panic!("a header that parsed does not encode: {e}\n{header:#?}"));
    let json = &head[json_start..];
    let again = parse(json, &Limits::DEFAULT)
        .unwrap_or_else(|e| panic!("the encoded header does not parse: {e}\n{}", String::from_utf8_lossy(json)));
    assert!(again == *header, "parse(encode(header)) != header\nbefore: {header:#?}\nafter: {again:#?}");
    let head_again = Head::encode(&again, flags).unwrap_or_else(|e| panic!("a re-parsed header does not encode: {e}"));
    assert!(
        head_again == head,
        "encoding is not deterministic:\n{}\n{}",
        String::from_utf8_lossy(&head),
        String::from_utf8_lossy(&head_again)
    );
    let tables = Head::tables_for(header, head.len() as u64)
        .unwrap_or_else(|e| panic!("no table layout for an encoded head of {} bytes: {e}", head.len()));
    assert_eq!(tables.is_some(), header.encryption().is_some(), "a table layout without encryption, or the reverse");
    if let (Some(tables), Some(enc)) = (tables, header.encryption()) {
        check_tables(header, &tables, head.len() as u64);
        assert_eq!(tables.tags.1 - tables.tags.0, enc.tag_table_len, "tag table length");
    }
}

/// Lays `header` out as a whole file with `flags` (zero tag table, MAC,
/// blob and footer; one made-up signature) and checks that it parses back.
fn laid_out(header: &Header, flags: Flags) {
    let mut head = Head::encode(header, flags).unwrap_or_else(|e| panic!("{header:#?} does not encode: {e}"));
    let tables = Head::tables_for(header, head.len() as u64).unwrap_or_else(|e| panic!("no table layout: {e}"));
    let data_start = tables.map_or(head.len() as u64, |t| t.data_start);
    let footer = if flags.contains(Flags::CHECKSUM) { FOOTER_LEN } else { 0 };
    let body_len = data_start.saturating_add(header.data_len()).saturating_add(footer);
    if body_len > MAX_LAID_OUT_FILE {
        return;
    }
    let header_end = head.len() as u64;
    head.resize(body_len as usize, 0);
    let signatures = flags.contains(Flags::SIGNED).then(|| vec![record(1)]);
    if let Some(records) = &signatures {
        head.extend_from_slice(&encode_signatures(records).expect("one record encodes"));
    }
    let file = head;
    let (body, parsed_signatures) = split_signatures(&file).expect("the signature block we wrote parses");
    assert_eq!(parsed_signatures, signatures, "signature records");
    let parsed = Head::parse(body, body.len() as u64, &Limits::DEFAULT).unwrap_or_else(|e| {
        panic!("a laid-out file does not parse: {e}\n{}", String::from_utf8_lossy(&file[..header_end as usize]))
    });
    assert!(
        parsed.header == *header,
        "parse(lay out(header)) != header\nbefore: {header:#?}\nafter: {:#?}",
        parsed.header
    );
    assert_eq!(parsed.flags, flags, "flags");
    assert_eq!(parsed.tables, tables, "table layout");
    assert_eq!(parsed.header_end, header_end, "header end");
    assert_eq!((parsed.data_start, parsed.data_end), (data_start, data_start + header.data_len()), "blob");
}

/// A made-up signature record whose public key starts with `n`.
fn record(n: u8) -> SignatureRecord {
    let mut public_key = [0x5a; 32];
    public_key[0] = n;
    SignatureRecord { public_key, signature: [n; 64] }
}

/// A file split as a reader splits it: a deathtensors file with flag bit 3
/// into its body and its signature records (`None` if its block does not
/// parse); any other file is all body. A trailer that `signature_block_len`
/// accepts gives a block that `parse_signatures` accepts, unless two of its
/// records have the same public key.
fn split_signatures(data: &[u8]) -> Option<(&[u8], Option<Vec<SignatureRecord>>)> {
    let flags = data.get(12..16).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let signed = data.starts_with(&MAGIC) && flags.is_some_and(|f| f & Flags::SIGNED.bits() != 0);
    if !signed {
        return Some((data, None));
    }
    let trailer = &data[data.len().saturating_sub(SIGNATURE_TRAILER_LEN as usize)..];
    let block_len = signature_block_len(trailer, data.len() as u64).ok()?;
    let (body, block) = data.split_at(data.len() - block_len as usize);
    match parse_signatures(block) {
        Ok(records) => Some((body, Some(records))),
        Err(e) => {
            assert_eq!(
                e.kind(),
                &ErrorKind::InvalidSignatureBlock { what: "duplicate signer" },
                "signature_block_len accepted a block of {block_len} bytes that parse_signatures refuses"
            );
            None
        }
    }
}

/// `Head::parse` never panics on a whole file; a head that parses is
/// consistent, and re-encoding it (with a zeroed blob and footer, and for an
/// encrypted file a zeroed tag table and MAC) gives a file that parses to
/// the same header and flags. A signed file is parsed without its signature
/// block, which re-encodes to the same bytes.
pub fn file(data: &[u8]) {
    let Some((body, signatures)) = split_signatures(data) else {
        return;
    };
    let Ok(head) = Head::parse(body, body.len() as u64, &Limits::DEFAULT) else {
        return;
    };
    let header = &head.header;
    let footer_len = head.footer().map_or(0, |_| FOOTER_LEN);
    assert!(
        head.data_start <= head.data_end && head.data_end + footer_len == body.len() as u64,
        "inconsistent head: {head:#?}"
    );
    assert!(head.header_end <= head.data_start, "the header ends after the blob starts: {head:#?}");
    if !head.is_compressed() {
        assert_eq!(head.data_end - head.data_start, header.data_len(), "blob length");
    }
    assert_eq!(head.flags.contains(Flags::SIGNED), signatures.is_some(), "flag bit 3");
    let encrypted = head.flags.contains(Flags::ENCRYPTED);
    assert_eq!(encrypted, header.encryption().is_some(), "flag bit 2 without an encryption section, or the reverse");
    assert_eq!(encrypted, head.tables.is_some(), "flag bit 2 without a table layout, or the reverse");
    if let Some(tables) = &head.tables {
        // The table starts where the NUL padding after the JSON ends.
        let table_start = head.header_end.div_ceil(8) * 8;
        check_tables(header, tables, table_start);
        assert_eq!(tables.data_start, head.data_start, "data start");
        // Head::parse leaves the padding after the MAC to the reader.
        let padding = &body[tables.mac.1 as usize..tables.data_start as usize];
        let _ = tables.check_padding(padding);
    }
    if signatures.is_some() {
        let footer = head.footer().map(|(start, end)| {
            <[u8; 32]>::try_from(&body[start as usize..end as usize]).expect("the footer is 32 bytes")
        });
        let message = signed_message(&body[..head.header_end as usize], footer.as_ref());
        assert!(message.ends_with(footer.as_ref().map_or(&[][..], |f| &f[..])), "signed message");
    }

    let mut file = Head::encode(header, head.flags)
        .unwrap_or_else(|e| panic!("a header that parsed does not encode: {e}\n{header:#?}"));
    let header_end = file.len() as u64;
    let tables = Head::tables_for(header, header_end).unwrap_or_else(|e| panic!("no table layout: {e}"));
    let data_start = tables.map_or(header_end, |t| t.data_start);
    // An uncompressed blob is exactly `data_len` bytes long, so no longer
    // than the input: this allocation is bounded, and so is the tag table,
    // which the input held too. A compressed blob's length is not checked
    // when parsing the head, so an empty one will do.
    let blob_len = if head.is_compressed() { 0 } else { header.data_len() };
    file.resize((data_start + blob_len + footer_len) as usize, 0);
    if let Some(records) = &signatures {
        let block = encode_signatures(records).unwrap_or_else(|e| panic!("parsed signatures do not encode: {e}"));
        assert!(data.ends_with(&block), "parse then encode changed the signature block");
        file.extend_from_slice(&block);
    }
    let (again_body, again_signatures) = split_signatures(&file).expect("the re-encoded signature block parses");
    assert_eq!(again_signatures, signatures, "signature records");
    let again = Head::parse(again_body, again_body.len() as u64, &Limits::DEFAULT).unwrap_or_else(|e| {
        panic!("the re-encoded file does not parse: {e}\n{}", String::from_utf8_lossy(&file[..header_end as usize]))
    });
    assert!(
        again.header == *header,
        "parse(encode(header)) != header\nbefore: {header:#?}\nafter: {:#?}",
        again.header
    );
    assert_eq!(again.flags, head.flags, "flags");
    assert_eq!(again.header_end, header_end, "header end");
    assert_eq!(again.tables, tables, "table layout");
    assert_eq!(again.data_start, data_start, "data start");
    assert_eq!(again.data_end, data_start + blob_len, "data end");
}

/// The table layout of an encrypted header whose tag table starts at
/// `table_start` follows FORMAT.md 10.1 and 10.4: 16 bytes per chunk, the
/// MAC right after, the blob at the next multiple of max(64, alignment);
/// and the chunks, nonces and associated data of each tensor are as 10.4
/// and 10.5 say.
fn check_tables(header: &Header, tables: &TableLayout, table_start: u64) {
    let enc = header.encryption().expect("an encrypted header");
    let cs = enc.chunk_size;
    let mut total = 0u64;
    for (i, t) in header.tensors().iter().enumerate() {
        assert_eq!(header.chunk_base(i), Some(total), "first chunk of tensor {i}");
        let len = t.byte_len();
        let count = chunk_count(len, cs);
        // The first two chunks and the last two: a tag table of 100 MiB
        // has millions, too many to visit on every input.
        let last = count - 1;
        for j in [0, 1, last.saturating_sub(1), last].into_iter().filter(|&j| j <= last) {
            let (s, e) = chunk_range(len, cs, j);
            let full = j < last;
            assert!(
                s == j * cs && s <= e && e <= len && (e - s == cs || !full) && (e == len) != full,
                "chunk {j} of {count}, of a tensor of {len} bytes in chunks of {cs}: [{s}, {e})"
            );
        }
        assert_eq!(chunk_range(len, cs, count), (len, len), "a chunk past the last");
        let index = u32::try_from(i).expect("tensor count within u32");
        let nonce = chunk_nonce(&enc.nonce_salt, index, last);
        let mut position = [0u8; 12];
        position[..4].copy_from_slice(&index.to_le_bytes());
        position[4..].copy_from_slice(&last.to_le_bytes());
        for k in 0..12 {
            assert_eq!(nonce[k] ^ enc.nonce_salt[k], position[k], "nonce of chunk {last} of tensor {i}");
        }
        let mut aad = ChunkAad::new(&enc.file_id, index, t);
        let dtype = t.dtype.name().len();
        let aad_len = 21 + 16 + 4 + 8 + t.name.len() + 1 + dtype + 8 * (1 + t.shape.len()) + 8 + 1;
        let bytes = aad.for_chunk(last, true);
        assert_eq!(bytes.len(), aad_len, "associated data length of tensor {i}");
        assert_eq!(&bytes[aad_len - 9..aad_len - 1], &last.to_le_bytes(), "chunk index in the associated data");
        assert_eq!(bytes[aad_len - 1], 1, "last-chunk flag");
        assert_eq!(aad.for_chunk(0, false)[aad_len - 1], 0, "last-chunk flag");
        total += count;
    }
    assert_eq!(header.chunk_base(header.len()), None, "a first chunk past the last tensor");
    let align = header.alignment().max(64);
    assert_eq!(enc.tag_table_len, total * TAG_LEN as u64, "tag table length");
    assert_eq!(tables.tags, (table_start, table_start + enc.tag_table_len), "tag table");
    assert_eq!(tables.mac, (tables.tags.1, tables.tags.1 + HEADER_MAC_LEN as u64), "header MAC");
    assert!(
        tables.data_start >= tables.mac.1
            && tables.data_start - tables.mac.1 < align
            && tables.data_start.is_multiple_of(align),
        "data start: {tables:?}"
    );
}

/// The signature block: `parse_signatures` never panics, a block it
/// accepts re-encodes to the same bytes, and `signature_block_len` agrees
/// with it on the length of the block, both for the input as a block and
/// for the input as a signed file ending in one. Records cut from the input
/// encode to a block that parses back to them.
pub fn signatures(data: &[u8]) {
    let len = data.len() as u64;
    let trailer = &data[data.len().saturating_sub(SIGNATURE_TRAILER_LEN as usize)..];
    let block_len = signature_block_len(trailer, len);
    match parse_signatures(data) {
        Ok(records) => {
            assert_eq!(block_len, Ok(len), "parse_signatures accepts a block that signature_block_len does not");
            check_block(data, &records);
        }
        Err(e) => {
            assert!(block_len != Ok(len) || is_duplicate(e.kind()), "a block of the length its trailer says: {e}")
        }
    }
    if let Ok(n) = block_len {
        let count = u64::from(u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]));
        assert!((1..=u64::from(MAX_SIGNATURES)).contains(&count), "signature count {count}");
        assert_eq!(n, count * SIGNATURE_RECORD_LEN + SIGNATURE_TRAILER_LEN, "block length");
        assert!(n <= len, "a block longer than the file");
        let block = &data[(len - n) as usize..];
        match parse_signatures(block) {
            Ok(records) => check_block(block, &records),
            Err(e) => assert!(is_duplicate(e.kind()), "signature_block_len accepts a block parse refuses: {e}"),
        }
        if n < len {
            // One byte more than the trailer says is never a block.
            let longer = &data[(len - n - 1) as usize..];
            assert!(parse_signatures(longer).is_err(), "a block one byte longer than its trailer says parses");
        }
    }

    let records: Vec<SignatureRecord> = data
        .chunks_exact(SIGNATURE_RECORD_LEN as usize)
        .take(MAX_SIGNATURES as usize + 2)
        .map(|r| SignatureRecord {
            public_key: r[..32].try_into().expect("32 bytes"),
            signature: r[32..].try_into().expect("64 bytes"),
        })
        .collect();
    let distinct = records.iter().enumerate().all(|(i, r)| records[..i].iter().all(|p| p.public_key != r.public_key));
    let valid = (1..=MAX_SIGNATURES as usize).contains(&records.len()) && distinct;
    match encode_signatures(&records) {
        Ok(block) => {
            assert!(valid, "encode_signatures accepts {} records (distinct keys: {distinct})", records.len());
            let parsed = parse_signatures(&block).unwrap_or_else(|e| panic!("an encoded block does not parse: {e}"));
            assert!(parsed == records, "parse(encode(records)) != records");
            let trailer = &block[block.len() - SIGNATURE_TRAILER_LEN as usize..];
            assert_eq!(signature_block_len(trailer, block.len() as u64), Ok(block.len() as u64), "block length");
        }
        Err(e) => assert!(!valid, "encode_signatures refuses {} distinct records: {e}", records.len()),
    }
}

fn is_duplicate(kind: &ErrorKind) -> bool {
    *kind == ErrorKind::InvalidSignatureBlock { what: "duplicate signer" }
}

/// A block that parsed to `records` is their encoding, record for record.
fn check_block(block: &[u8], records: &[SignatureRecord]) {
    let encoded = encode_signatures(records).unwrap_or_else(|e| panic!("parsed signatures do not encode: {e}"));
    assert!(encoded == block, "encode(parse(block)) != block");
    assert_eq!(block.len() as u64, records.len() as u64 * SIGNATURE_RECORD_LEN + SIGNATURE_TRAILER_LEN, "block length");
}

/// A collection manifest (FORMAT.md 13.2) that parses passes `check`, has
/// only plain block names, encodes within the length limit, and encodes to
/// bytes that parse to an equal manifest and encode identically; its block
/// header (13.3) parses back to the layout it was made from.
pub fn manifest(data: &[u8]) {
    let Ok(m) = Manifest::parse(data) else { return };
    m.check().expect("a parsed manifest passes check");
    for b in &m.blocks {
        check_block_name(&b.file).expect("a parsed manifest names plain files");
    }
    let bytes = m.to_bytes().expect("a parsed manifest encodes within the limit");
    let again = Manifest::parse(&bytes).expect("an encoded manifest parses");
    assert_eq!(again, m, "manifest roundtrip");
    assert_eq!(again.encode(), bytes, "manifest encoding is canonical");
    if m.layout.block_bytes() <= MAX_LAID_OUT_FILE {
        let mut file = m.layout.block_header().expect("a valid layout has a block header");
        let start = file.len() as u64;
        file.resize(file.len() + m.layout.block_bytes() as usize, 0);
        let head = Head::parse(&file, file.len() as u64, &Limits::DEFAULT).expect("a block file parses");
        assert_eq!(m.layout.check_block(&head), Ok(start), "a block file fits its layout");
    }
}

/// Reading a pickle (a torch checkpoint's `data.pkl`, docs/PICKLE.md):
/// never a panic, and the two modes agree: what the strict reader accepts,
/// the scan reads too, calls nothing outside the allow list and judges a
/// plain tensor checkpoint with the same tensors. The same bytes as a zip
/// container: every member it accepts lies inside the input.
pub fn pickle(data: &[u8]) {
    use deathtensors_format::pickle::{scan, Checkpoint};
    use deathtensors_format::zip::Zip;
    let strict = Checkpoint::read(data);
    let scanned = scan(data);
    if let Ok(c) = &strict {
        let s = scanned.unwrap_or_else(|e| panic!("the strict reader accepts what the scan cannot read: {e}"));
        assert!(s.calls.is_empty() && s.names.iter().all(|n| n.allowed), "a plain checkpoint names something refused");
        assert_eq!(s.verdict.as_ref().ok(), Some(&c.tensors.len()), "the scan's verdict differs from the strict read");
        for (_, t) in &c.tensors {
            assert!(c.storages.iter().any(|(id, _)| *id == t.storage), "a tensor without its storage");
        }
    }
    for zip in [Zip::parse(data), Zip::parse_allowing_deflate(data)].into_iter().flatten() {
        for m in &zip.members {
            if let Ok(r) = Zip::data(data, m) {
                assert!(r.start <= r.end && r.end <= data.len() as u64, "member {:?} outside the input", m.name);
                assert!(r.end <= m.limit, "member {:?} runs into the next", m.name);
                assert!(m.deflated || r.end - r.start == m.size, "a stored member {:?} of another size", m.name);
            }
        }
    }
    // numpy's .npy header, read as literals: whatever it accepts is an
    // array whose data length is its shape's.
    if let Ok(npy) = deathtensors_format::npy::Npy::parse(data) {
        let numel = npy.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).expect("a shape that overflows");
        assert_eq!(Some(npy.data_len), numel.checked_mul(npy.dtype.bits() / 8), "data length and shape disagree");
        assert!(npy.data_start <= data.len() as u64, "data starts past the header read");
    }
}
