//! A cursor over untrusted bytes.

use crate::{Error, Result};

/// Reads fixed-size fields in order, naming what it reads in its errors.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let rest = self.bytes.get(self.pos..).unwrap_or(&[]);
        match rest.split_at_checked(n) {
            Some((head, _)) => {
                self.pos += n;
                Ok(head)
            }
            None => Err(Error::truncated(what, (self.pos + n) as u64, self.bytes.len() as u64)),
        }
    }

    pub(crate) fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u32_le(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64_le(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u16_le(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    /// How many bytes have been read.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// How many bytes are left.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }
}
