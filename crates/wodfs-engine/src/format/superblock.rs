//! The superblock: two alternating 4 KiB slots at the start of the device.
//! A checkpoint writes generation g into slot g % 2, so a torn superblock
//! write always leaves the previous one intact.

use super::bytes::{Dec, DecResult, Enc};
use super::{checksum, FORMAT_VERSION};
use crate::config::{Compression, BLOCK_BYTES};

pub(crate) const SUPERBLOCK_MAGIC: &[u8; 8] = b"WODFS-SB";

/// Everything a checkpoint needs to be found again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub version: u32,
    pub generation: u64,
    pub device_bytes: u64,
    pub node_bytes: u32,
    pub partition_bytes: u32,
    pub fanout: u32,
    pub compression: Compression,
    pub log_offset: u64,
    pub log_bytes: u64,
    /// Log position the checkpoint covers (used by the write-ahead log).
    pub log_checkpoint_lsn: u64,
    pub next_msn: u64,
    pub root: u64,
    pub height: u8,
    pub table_offset: u64,
    pub table_len: u64,
    pub table_crc: u32,
    /// Log chain value at `log_checkpoint_lsn` (see `wal::record`).
    pub log_chain: u32,
}

impl Superblock {
    /// The node area starts after both slots and the log.
    pub fn node_area_start(&self) -> u64 {
        self.log_offset + self.log_bytes
    }

    pub fn slot_offset(generation: u64) -> u64 {
        (generation % 2) * BLOCK_BYTES
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::with_capacity(BLOCK_BYTES as usize);
        e.raw(SUPERBLOCK_MAGIC);
        e.u32(self.version);
        e.u64(self.generation);
        e.u64(self.device_bytes);
        e.u32(self.node_bytes);
        e.u32(self.partition_bytes);
        e.u32(self.fanout);
        e.u8(self.compression as u8);
        e.u64(self.log_offset);
        e.u64(self.log_bytes);
        e.u64(self.log_checkpoint_lsn);
        e.u64(self.next_msn);
        e.u64(self.root);
        e.u8(self.height);
        e.u64(self.table_offset);
        e.u64(self.table_len);
        e.u32(self.table_crc);
        e.u32(self.log_chain);
        let crc = checksum(&e.buf);
        e.u32(crc);
        e.buf.resize(BLOCK_BYTES as usize, 0);
        e.buf
    }
}

/// Why a slot did not yield a superblock.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SlotError {
    /// No magic: never written, or not a wodfs image.
    Blank,
    /// Magic present, version unknown.
    Version(u32),
    /// Magic present, contents damaged.
    Corrupt(String),
}

pub(crate) fn decode_superblock(buf: &[u8]) -> Result<Superblock, SlotError> {
    if buf.len() < 8 || &buf[..8] != SUPERBLOCK_MAGIC {
        return Err(SlotError::Blank);
    }
    let r: DecResult<Superblock> = (|| {
        let mut d = Dec::new(&buf[8..]);
        let version = d.u32("version")?;
        if version != FORMAT_VERSION {
            return Ok(Superblock { version, ..blank() });
        }
        let sb = Superblock {
            version,
            generation: d.u64("generation")?,
            device_bytes: d.u64("device bytes")?,
            node_bytes: d.u32("node bytes")?,
            partition_bytes: d.u32("partition bytes")?,
            fanout: d.u32("fanout")?,
            compression: Compression::from_u8(d.u8("compression")?).ok_or("unknown compression")?,
            log_offset: d.u64("log offset")?,
            log_bytes: d.u64("log bytes")?,
            log_checkpoint_lsn: d.u64("log lsn")?,
            next_msn: d.u64("next msn")?,
            root: d.u64("root")?,
            height: d.u8("height")?,
            table_offset: d.u64("table offset")?,
            table_len: d.u64("table length")?,
            table_crc: d.u32("table checksum")?,
            log_chain: d.u32("log chain")?,
        };
        let body_len = 8 + d.pos();
        let crc = d.u32("checksum")?;
        if checksum(&buf[..body_len]) != crc {
            return Err("superblock checksum mismatch".into());
        }
        Ok(sb)
    })();
    match r {
        Ok(sb) if sb.version != FORMAT_VERSION => Err(SlotError::Version(sb.version)),
        Ok(sb) => Ok(sb),
        Err(e) => Err(SlotError::Corrupt(e)),
    }
}

fn blank() -> Superblock {
    Superblock {
        version: 0,
        generation: 0,
        device_bytes: 0,
        node_bytes: 0,
        partition_bytes: 0,
        fanout: 0,
        compression: Compression::None,
        log_offset: 0,
        log_bytes: 0,
        log_checkpoint_lsn: 0,
        next_msn: 0,
        root: 0,
        height: 0,
        table_offset: 0,
        table_len: 0,
        table_crc: 0,
        log_chain: 0,
    }
}
