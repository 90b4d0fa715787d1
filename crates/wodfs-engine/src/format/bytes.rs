//! A growable encoder and a bounds-checked decoder for little-endian
//! integers, LEB128 varints and length-prefixed byte strings.

/// Appends encoded values to a byte vector.
#[derive(Debug, Default)]
pub(crate) struct Enc {
    pub buf: Vec<u8>,
}

impl Enc {
    pub fn with_capacity(n: usize) -> Self {
        Enc {
            buf: Vec::with_capacity(n),
        }
    }
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
}

/// Bytes [`Enc::varint`] writes for `v`.
pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Reads values back; every read is bounds-checked and reports what it
/// expected when the input is short or malformed.
#[derive(Debug)]
pub(crate) struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

pub(crate) type DecResult<T> = std::result::Result<T, String>;

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    // The readers below run once per field of every partition parsed (a
    // message buffer is thousands of messages): their fast paths are
    // inlined into the parse loops, their error messages built out of line.
    #[inline]
    fn take(&mut self, n: usize, what: &str) -> DecResult<&'a [u8]> {
        if self.remaining() < n {
            return Err(truncated(what, n, self.pos, self.remaining()));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// The next `n` bytes as they are.
    pub fn raw(&mut self, n: usize, what: &str) -> DecResult<&'a [u8]> {
        self.take(n, what)
    }
    #[inline]
    pub fn u8(&mut self, what: &str) -> DecResult<u8> {
        match self.buf.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(truncated(what, 1, self.pos, 0)),
        }
    }
    pub fn u16(&mut self, what: &str) -> DecResult<u16> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self, what: &str) -> DecResult<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    #[inline]
    pub fn u64(&mut self, what: &str) -> DecResult<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    #[inline]
    pub fn varint(&mut self, what: &str) -> DecResult<u64> {
        // One byte: every length and count below 128.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varint_long(what)
    }
    fn varint_long(&mut self, what: &str) -> DecResult<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.u8(what)?;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("varint too long in {what}"))
    }
    /// A count of items that each take at least one byte: bounded by the
    /// remaining input so a corrupt count cannot make us allocate wildly.
    #[inline]
    pub fn count(&mut self, what: &str) -> DecResult<usize> {
        let n = self.varint(what)?;
        if n > self.remaining() as u64 {
            return Err(too_many(what, n, self.remaining()));
        }
        Ok(n as usize)
    }
    #[inline]
    pub fn bytes(&mut self, what: &str, max: usize) -> DecResult<&'a [u8]> {
        let n = self.varint(what)?;
        if n > max as u64 {
            return Err(too_long(what, n, max));
        }
        self.take(n as usize, what)
    }
    pub fn finish(&self, what: &str) -> DecResult<()> {
        if self.remaining() != 0 {
            return Err(format!("{} trailing bytes after {what}", self.remaining()));
        }
        Ok(())
    }
}

#[cold]
#[inline(never)]
fn truncated(what: &str, n: usize, pos: usize, left: usize) -> String {
    format!("truncated {what}: need {n} bytes at offset {pos}, {left} left")
}

#[cold]
#[inline(never)]
fn too_many(what: &str, n: u64, left: usize) -> String {
    format!("{what} count {n} exceeds the {left} bytes left")
}

#[cold]
#[inline(never)]
fn too_long(what: &str, n: u64, max: usize) -> String {
    format!("{what} length {n} exceeds the maximum {max}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut e = Enc::default();
            e.varint(v);
            assert_eq!(e.len(), varint_len(v));
            assert_eq!(Dec::new(&e.buf).varint("v").unwrap(), v);
        }
        assert!(Dec::new(&[0xff; 11]).varint("v").is_err());
        assert!(Dec::new(&[0x80]).varint("v").is_err());
    }

    #[test]
    fn short_input_is_an_error() {
        assert!(Dec::new(&[1, 2]).u32("x").is_err());
        assert!(Dec::new(&[5, 1]).bytes("x", 100).is_err());
        assert!(Dec::new(&[200, 1]).bytes("x", 100).is_err());
    }
}
