//! File contents in memory, in chunks so a 4 GiB file never needs one
//! 4 GiB reallocation and a 200-byte file costs 200 bytes.
//!
//! Invariant: byte `o` of the file is `chunks[o / CHUNK][o % CHUNK]` when
//! that exists and zero otherwise (a hole); no chunk is longer than
//! `CHUNK_BYTES`, and no chunk holds bytes at or past the file size.

const CHUNK_BYTES: usize = 1 << 20;

#[derive(Debug, Default)]
pub struct FileData {
    chunks: Vec<Vec<u8>>,
}

impl FileData {
    /// Bytes held in memory (for statfs).
    pub fn stored_bytes(&self) -> u64 {
        self.chunks.iter().map(|chunk| chunk.len() as u64).sum()
    }

    /// Reads up to `len` bytes at `offset` of a file of `size` bytes.
    pub fn read(&self, offset: u64, len: usize, size: u64) -> Vec<u8> {
        if offset >= size {
            return Vec::new();
        }
        let end = size.min(offset.saturating_add(len as u64));
        let mut out = vec![0u8; (end - offset) as usize];
        let mut pos = offset;
        while pos < end {
            let index = (pos / CHUNK_BYTES as u64) as usize;
            let within = (pos % CHUNK_BYTES as u64) as usize;
            let take = ((end - pos) as usize).min(CHUNK_BYTES - within);
            if let Some(chunk) = self.chunks.get(index) {
                if within < chunk.len() {
                    let have = take.min(chunk.len() - within);
                    let at = (pos - offset) as usize;
                    out[at..at + have].copy_from_slice(&chunk[within..within + have]);
                }
            }
            pos += take as u64;
        }
        out
    }

    /// Writes `bytes` at `offset`; the caller grows the size.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) {
        let mut pos = offset;
        let mut rest = bytes;
        while !rest.is_empty() {
            let index = (pos / CHUNK_BYTES as u64) as usize;
            let within = (pos % CHUNK_BYTES as u64) as usize;
            let take = rest.len().min(CHUNK_BYTES - within);
            if self.chunks.len() <= index {
                self.chunks.resize_with(index + 1, Vec::new);
            }
            let chunk = &mut self.chunks[index];
            if chunk.len() < within {
                chunk.resize(within, 0);
            }
            // Overwrite what exists, append the rest: appending copies
            // once, where resize-then-copy would also zero-fill.
            let overlap = (chunk.len() - within).min(take);
            chunk[within..within + overlap].copy_from_slice(&rest[..overlap]);
            chunk.extend_from_slice(&rest[overlap..take]);
            pos += take as u64;
            rest = &rest[take..];
        }
    }

    /// Drops every byte at or past `size` (shrinking truncate); growing
    /// needs nothing, the new range reads as a hole.
    pub fn truncate(&mut self, size: u64) {
        let full = (size / CHUNK_BYTES as u64) as usize;
        let within = (size % CHUNK_BYTES as u64) as usize;
        if within == 0 {
            self.chunks.truncate(full);
        } else {
            self.chunks.truncate(full + 1);
            if let Some(last) = self.chunks.get_mut(full) {
                last.truncate(within);
            }
        }
        self.chunks.shrink_to_fit();
    }

    /// Zeroes `[offset, offset + len)` (punch hole / zero range).
    pub fn zero(&mut self, offset: u64, len: u64, size: u64) {
        let end = size.min(offset.saturating_add(len));
        let mut pos = offset;
        while pos < end {
            let index = (pos / CHUNK_BYTES as u64) as usize;
            let within = (pos % CHUNK_BYTES as u64) as usize;
            let take = ((end - pos) as usize).min(CHUNK_BYTES - within);
            if let Some(chunk) = self.chunks.get_mut(index) {
                if within == 0 && take == CHUNK_BYTES {
                    *chunk = Vec::new();
                } else if within < chunk.len() {
                    let stop = chunk.len().min(within + take);
                    chunk[within..stop].fill(0);
                }
            }
            pos += take as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_writes_across_chunks_and_holes() {
        let mut data = FileData::default();
        let at = CHUNK_BYTES as u64 - 3;
        data.write(at, b"abcdef");
        let size = at + 6;
        assert_eq!(data.read(at - 2, 10, size), b"\0\0abcdef");
        assert_eq!(data.read(0, 4, size), vec![0; 4]);
        data.truncate(at + 4);
        assert_eq!(data.read(at, 10, at + 4), b"abcd");
        data.truncate(at + 1);
        data.write(at + 2, b"z");
        assert_eq!(data.read(at, 10, at + 3), b"a\0z");
    }

    #[test]
    fn overwrite_inside_and_past_the_end_of_a_chunk() {
        let mut data = FileData::default();
        data.write(0, b"abcdef");
        data.write(4, b"XYZW");
        assert_eq!(data.read(0, 16, 8), b"abcdXYZW");
        data.write(10, b"q");
        assert_eq!(data.read(0, 16, 11), b"abcdXYZW\0\0q");
    }

    #[test]
    fn zero_clears_only_the_range() {
        let mut data = FileData::default();
        data.write(0, &[7u8; 10]);
        data.zero(2, 3, 10);
        assert_eq!(data.read(0, 10, 10), [7, 7, 0, 0, 0, 7, 7, 7, 7, 7]);
    }
}
