//! The zip container of `torch.save` files, read from its central
//! directory (docs/PICKLE.md, "The zip container"): sans-IO, the whole
//! file's bytes in, its members (names, CRCs, where their bytes lie) out.
//! Only stored (uncompressed) members are accepted for torch, which writes
//! no other; numpy's `savez_compressed` writes deflated ones, which
//! [`Zip::parse_allowing_deflate`] accepts (inflated by the caller, bounded
//! by what the arrays need: docs/PICKLE.md, "numpy files").

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use crate::{Error, ErrorKind, Result};

const EOCD: u32 = 0x0605_4b50;
const ZIP64_LOCATOR: u32 = 0x0706_4b50;
const ZIP64_EOCD: u32 = 0x0606_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

/// One member of a zip file, as the central directory describes it: its
/// bytes are found through its local header ([`Zip::data`]), read only
/// when the member is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZipMember {
    /// Its name (a relative path with `/`).
    pub name: String,
    /// The CRC-32 of its bytes, as the directory records it.
    pub crc32: u32,
    /// Its length in bytes, uncompressed.
    pub size: u64,
    /// Its length as it lies in the file (`size` when stored).
    pub stored: u64,
    /// Whether it is deflated (method 8), not stored.
    pub deflated: bool,
    /// Where its local header starts.
    pub local_header: u64,
    /// Where the next member's local header (or the central directory)
    /// starts: its bytes must end before.
    pub limit: u64,
}

/// The members of a zip file, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zip {
    /// The members, in the central directory's order.
    pub members: Vec<ZipMember>,
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::InvalidZip { message: message.into_boxed_str() })
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Whether `file` starts as a zip file does (a local header).
pub fn is_zip(file: &[u8]) -> bool {
    u32_at(file, 0) == Some(LOCAL)
}

impl Zip {
    /// Reads the central directory of `file` (the whole file) and checks
    /// every member: unique names that are relative paths without `..`,
    /// not encrypted, stored, the local header's name the directory's,
    /// and data inside the file, overlapping no other member's.
    ///
    /// # Errors
    /// `InvalidZip` naming the member and the rule.
    pub fn parse(file: &[u8]) -> Result<Zip> {
        Zip::parse_with(file, false)
    }

    /// [`Zip::parse`], accepting deflated members too (numpy's `.npz`).
    ///
    /// # Errors
    /// As [`Zip::parse`], but for a deflated member.
    pub fn parse_allowing_deflate(file: &[u8]) -> Result<Zip> {
        Zip::parse_with(file, true)
    }

    fn parse_with(file: &[u8], deflate: bool) -> Result<Zip> {
        let len = file.len();
        // The end of central directory record: 22 bytes and a comment of
        // at most 65535, at the very end.
        let lowest = len.saturating_sub(22 + 0xffff);
        let eocd = (lowest..=len.saturating_sub(22))
            .rev()
            .find(|&p| {
                u32_at(file, p) == Some(EOCD) && u16_at(file, p + 20).is_some_and(|c| p + 22 + usize::from(c) == len)
            })
            .ok_or_else(|| bad("no end of central directory record (not a zip file, or truncated)".into()))?;
        let short = |at: usize| u16_at(file, eocd + at).map(u64::from).unwrap_or(0);
        let long = |at: usize| u32_at(file, eocd + at).map(u64::from).unwrap_or(0);
        let (mut count, mut cd_size, mut cd_offset) = (short(10), long(12), long(16));
        if count == 0xffff || cd_size == 0xffff_ffff || cd_offset == 0xffff_ffff {
            let loc = eocd.checked_sub(20).filter(|&p| u32_at(file, p) == Some(ZIP64_LOCATOR));
            let loc = loc.ok_or_else(|| bad("a zip64 file without its zip64 locator".into()))?;
            let rec = u64_at(file, loc + 8)
                .and_then(|r| usize::try_from(r).ok())
                .filter(|&r| u32_at(file, r) == Some(ZIP64_EOCD));
            let rec = rec.ok_or_else(|| bad("the zip64 end of central directory record is missing".into()))?;
            count = u64_at(file, rec + 32).unwrap_or(0);
            cd_size = u64_at(file, rec + 40).unwrap_or(0);
            cd_offset = u64_at(file, rec + 48).unwrap_or(0);
        }
        let cd_end = cd_offset
            .checked_add(cd_size)
            .filter(|&e| e <= eocd as u64)
            .ok_or_else(|| bad("the central directory lies outside the file".into()))?;
        if count > cd_size / 46 {
            return Err(bad(format!("{count} members claimed in a {cd_size}-byte central directory")));
        }
        let cd = file
            .get(cd_offset as usize..cd_end as usize)
            .ok_or_else(|| bad("the central directory lies outside the file".into()))?;
        let mut members = Vec::with_capacity(count as usize);
        let mut p = 0usize;
        for _ in 0..count {
            let field = |at: usize| {
                u16_at(cd, p + at).map(usize::from).ok_or_else(|| bad("a central directory entry is truncated".into()))
            };
            if u32_at(cd, p) != Some(CENTRAL) {
                return Err(bad("a central directory entry has the wrong signature".into()));
            }
            let (flags, method) = (field(8)?, field(10)?);
            let crc32 = u32_at(cd, p + 16).unwrap_or(0);
            let (mut csize, mut size) =
                (u64::from(u32_at(cd, p + 20).unwrap_or(0)), u64::from(u32_at(cd, p + 24).unwrap_or(0)));
            let (name_len, extra_len, comment_len) = (field(28)?, field(30)?, field(32)?);
            let mut offset = u64::from(u32_at(cd, p + 42).unwrap_or(0));
            let name_bytes =
                cd.get(p + 46..p + 46 + name_len).ok_or_else(|| bad("a member's name is truncated".into()))?;
            let name = core::str::from_utf8(name_bytes).map_err(|_| bad("a member's name is not UTF-8".into()))?;
            let extra = cd
                .get(p + 46 + name_len..p + 46 + name_len + extra_len)
                .ok_or_else(|| bad(format!("member {name:?}: its extra field is truncated")))?;
            // zip64: the fields saturated at 0xffffffff follow in order.
            let mut e = 0;
            while e + 4 <= extra.len() {
                let (id, n) = (u16_at(extra, e).unwrap_or(0), usize::from(u16_at(extra, e + 2).unwrap_or(0)));
                if id == 1 {
                    let mut q = e + 4;
                    for v in [&mut size, &mut csize, &mut offset] {
                        if *v == 0xffff_ffff {
                            *v = u64_at(extra, q)
                                .ok_or_else(|| bad(format!("member {name:?}: its zip64 field is truncated")))?;
                            q += 8;
                        }
                    }
                }
                e += 4 + n;
            }
            p += 46 + name_len + extra_len + comment_len;
            check_name(name)?;
            if flags & 1 != 0 {
                return Err(bad(format!("member {name:?} is encrypted")));
            }
            let deflated = deflate && method == 8;
            if method != 0 && !deflated {
                return Err(bad(format!("member {name:?} is compressed (method {method}); torch.save writes stored members only, and compressed ones are refused")));
            }
            if !deflated && csize != size {
                return Err(bad(format!("member {name:?} is stored but its sizes differ ({csize} and {size})")));
            }
            if members.iter().any(|m: &ZipMember| m.name == name) {
                return Err(bad(format!("member {name:?} is named twice (readers disagree on which one counts)")));
            }
            if offset >= cd_offset {
                return Err(bad(format!("member {name:?}: its local header lies outside the file")));
            }
            members.push(ZipMember {
                name: name.into(),
                crc32,
                size,
                stored: csize,
                deflated,
                local_header: offset,
                limit: cd_offset,
            });
        }
        // Each member ends before the next one's local header: members
        // cannot overlap (checked when a member's bytes are found).
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| members[i].local_header);
        for w in order.windows(2) {
            let (a, b) = (w[0], w[1]);
            if members[a].local_header == members[b].local_header {
                return Err(bad(format!("members {:?} and {:?} overlap", members[a].name, members[b].name)));
            }
            members[a].limit = members[b].local_header;
        }
        Ok(Zip { members })
    }

    /// The member named `name`.
    pub fn get(&self, name: &str) -> Option<&ZipMember> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Where member `m`'s bytes lie in `file` (the whole file), read from
    /// its local header: whose name must be the directory's, and whose
    /// bytes must end before the next member's local header.
    ///
    /// # Errors
    /// `InvalidZip` naming the member.
    pub fn data(file: &[u8], m: &ZipMember) -> Result<Range<u64>> {
        let name = &m.name;
        let lh = usize::try_from(m.local_header)
            .ok()
            .filter(|&o| u32_at(file, o) == Some(LOCAL))
            .ok_or_else(|| bad(format!("member {name:?}: no local header at {}", m.local_header)))?;
        let (ln, le) =
            (usize::from(u16_at(file, lh + 26).unwrap_or(0)), usize::from(u16_at(file, lh + 28).unwrap_or(0)));
        if file.get(lh + 30..lh + 30 + ln) != Some(name.as_bytes()) {
            return Err(bad(format!("member {name:?}: its local header names another member")));
        }
        let start = (lh + 30 + ln + le) as u64;
        let end = start.checked_add(m.stored).filter(|&e| e <= m.limit).ok_or_else(|| {
            bad(format!("member {name:?}: its {} bytes run past the next member or outside the file", m.stored))
        })?;
        Ok(start..end)
    }
}

/// A member's name must be a relative path of plain parts.
fn check_name(name: &str) -> Result<()> {
    let bad_part = name.split('/').any(|p| p == ".." || p == ".");
    let absolute = name.starts_with('/') || name.as_bytes().get(1) == Some(&b':');
    if name.is_empty() || bad_part || absolute || name.contains('\\') || name.chars().any(char::is_control) {
        return Err(bad(format!("member name {name:?} is not a plain relative path")));
    }
    Ok(())
}
