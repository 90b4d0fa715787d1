//! redb, a copy-on-write B-tree in one file.
//!
//! Each batch is one write transaction committed with `Durability::None`
//! (no fsync); `close` commits an empty transaction with
//! `Durability::Immediate`, which makes every earlier commit durable.
//! Reads share one read transaction, opened on first use, so a point read
//! costs a lookup and not a transaction setup.

use std::path::Path;

use anyhow::{Context, Result};
use redb::{Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable, TableDefinition};

use crate::engine::{Batch, Engine, EngineConfig};

pub const VERSION: &str = "4.5.0";

const FILE_NAME: &str = "redb.db";
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("records");

pub struct RedbEngine {
    db: Database,
    reader: Option<ReadOnlyTable<&'static [u8], &'static [u8]>>,
}

impl RedbEngine {
    pub fn create(dir: &Path, config: &EngineConfig) -> Result<Self> {
        let db = Database::builder()
            .set_cache_size(usize::try_from(config.cache_bytes)?)
            .create(dir.join(FILE_NAME))
            .context("redb create")?;
        // Create the table up front so a store with no batch still opens.
        let txn = db.begin_write()?;
        txn.open_table(TABLE)?;
        txn.commit()?;
        Ok(Self { db, reader: None })
    }

    pub fn open(dir: &Path, config: &EngineConfig) -> Result<Self> {
        let db = Database::builder()
            .set_cache_size(usize::try_from(config.cache_bytes)?)
            .open(dir.join(FILE_NAME))
            .context("redb open")?;
        Ok(Self { db, reader: None })
    }

    fn reader(&mut self) -> Result<&ReadOnlyTable<&'static [u8], &'static [u8]>> {
        if self.reader.is_none() {
            self.reader = Some(self.db.begin_read()?.open_table(TABLE)?);
        }
        Ok(self.reader.as_ref().expect("set above"))
    }
}

impl Engine for RedbEngine {
    fn insert_batch(&mut self, batch: &Batch) -> Result<()> {
        self.reader = None;
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::None)?;
        {
            let mut table = txn.open_table(TABLE)?;
            for (key, value) in batch.iter() {
                table.insert(key, value)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.reader()?.get(key)?.map(|guard| guard.value().to_vec()))
    }

    fn scan(&mut self, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        for item in self.reader()?.iter()? {
            let (key, value) = item?;
            visit(key.value(), value.value());
        }
        Ok(())
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        self.reader = None;
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.commit()?;
        drop(self.db);
        Ok(())
    }
}
