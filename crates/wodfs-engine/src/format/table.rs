//! Encoding of the block table a checkpoint records.

use super::bytes::{Dec, DecResult, Enc};
use super::checksum;
use crate::table::{BlockEntry, BlockNum, Extent};

const TABLE_MAGIC: u32 = u32::from_le_bytes(*b"WODT");

/// Bytes of an encoded table of `count` blocks (magic, count, one
/// fixed-size entry per block, crc).
pub(crate) fn table_bytes(count: usize) -> u64 {
    (4 + 8 + count * ENTRY_BYTES + 4) as u64
}

const ENTRY_BYTES: usize = 8 + 8 + 8 + 4 + 4 + 4 + 1;

pub(crate) fn encode_table<'a>(
    entries: impl Iterator<Item = (BlockNum, &'a BlockEntry)>,
    count: usize,
) -> Vec<u8> {
    let mut e = Enc::with_capacity(16 + count * 40);
    e.u32(TABLE_MAGIC);
    e.u64(count as u64);
    for (b, x) in entries {
        let loc = x.loc.expect("a checkpointed block has been written");
        e.u64(b);
        e.u64(loc.offset);
        e.u64(loc.len);
        e.u32(loc.header_len);
        e.u32(loc.header_crc);
        e.u32(x.refcount);
        e.u8(x.height);
    }
    let crc = checksum(&e.buf);
    e.u32(crc);
    debug_assert_eq!(e.buf.len() as u64, table_bytes(count));
    e.buf
}

pub(crate) fn decode_table(buf: &[u8]) -> DecResult<Vec<(BlockNum, BlockEntry)>> {
    if buf.len() < 16 {
        return Err("block table too short".into());
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    if checksum(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err("block table checksum mismatch".into());
    }
    let mut d = Dec::new(body);
    if d.u32("magic")? != TABLE_MAGIC {
        return Err("bad block table magic".into());
    }
    let n = d.u64("entry count")?;
    if n > (d.remaining() / 37) as u64 {
        return Err(format!("block table entry count {n} exceeds its bytes"));
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let b = d.u64("block")?;
        let loc = Extent {
            offset: d.u64("offset")?,
            len: d.u64("length")?,
            header_len: d.u32("header length")?,
            header_crc: d.u32("header checksum")?,
        };
        let refcount = d.u32("refcount")?;
        let height = d.u8("height")?;
        if refcount == 0 || u64::from(loc.header_len) > loc.len || loc.len == 0 {
            return Err(format!("block {b}: impossible entry"));
        }
        out.push((
            b,
            BlockEntry {
                loc: Some(loc),
                refcount,
                height,
            },
        ));
    }
    d.finish("block table")?;
    Ok(out)
}
