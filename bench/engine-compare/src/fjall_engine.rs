//! fjall, a log-structured merge tree with a journal.
//!
//! Each batch is one `WriteBatch` committed without a persist mode: the
//! journal is written to OS buffers, not synced (fjall's default, like
//! RocksDB's). `close` calls `persist(SyncAll)` and drops the database,
//! which waits for fjall's flush and compaction threads to stop. The engine
//! keeps its defaults (LZ4, leveled compaction, 4 KiB blocks) apart from
//! the shared block cache size and the memtable size: its default 64 MiB
//! memtable, of which it may hold five, does not fit the memory limits the
//! benchmark uses, and the cgroup would kill it.

use std::path::Path;

use anyhow::{Context, Result};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use crate::engine::{Batch, Engine, EngineConfig};

pub const VERSION: &str = "3.1.13";

const DIR_NAME: &str = "fjall";
const KEYSPACE: &str = "records";

pub struct FjallEngine {
    db: Database,
    keyspace: Keyspace,
}

impl FjallEngine {
    pub fn create(dir: &Path, config: &EngineConfig) -> Result<Self> {
        Self::open(dir, config)
    }

    /// fjall creates or recovers from the same call.
    pub fn open(dir: &Path, config: &EngineConfig) -> Result<Self> {
        let db = Database::builder(dir.join(DIR_NAME))
            .cache_size(config.cache_bytes)
            .open()
            .context("fjall open")?;
        let memtable_bytes = config.write_buffer_bytes;
        let keyspace = db.keyspace(KEYSPACE, || {
            KeyspaceCreateOptions::default().max_memtable_size(memtable_bytes)
        })?;
        Ok(Self { db, keyspace })
    }
}

impl Engine for FjallEngine {
    fn insert_batch(&mut self, batch: &Batch) -> Result<()> {
        let mut write = self.db.batch();
        for (key, value) in batch.iter() {
            write.insert(&self.keyspace, key, value);
        }
        write.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.keyspace.get(key)?.map(|value| value.to_vec()))
    }

    fn scan(&mut self, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        for guard in self.keyspace.iter() {
            let (key, value) = guard.into_inner()?;
            visit(&key, &value);
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.persist(PersistMode::SyncAll)?;
        let FjallEngine { db, keyspace } = *self;
        drop(keyspace);
        drop(db);
        Ok(())
    }
}
