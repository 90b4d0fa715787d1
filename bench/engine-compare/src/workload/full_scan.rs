//! A full scan of the random-insert store in key order, reopened after the
//! page cache was dropped. The scan must return every record once, in
//! strictly increasing key order; one value in [`VALUE_CHECK_EVERY`] is
//! compared with the one inserted (checking all would add the cost of
//! regenerating every value to every engine's time).

use anyhow::{bail, Result};

use super::{Spec, Stopwatch, Timing};
use crate::data::{self, KeyOrder, KEY_BYTES, RECORD_BYTES, VALUE_BYTES};

const VALUE_CHECK_EVERY: u64 = 1024;

pub fn run(spec: &Spec) -> Result<Timing> {
    let mut watch = Stopwatch::start();
    let mut engine = spec.engine.open(&spec.store_dir, &spec.config)?;
    let open_ns = watch.lap();

    let mut check = ScanCheck::new(spec.seed);
    engine.scan(&mut |key, value| check.visit(key, value))?;
    let work_ns = watch.lap();

    engine.close()?;
    let close_ns = watch.lap();

    if let Some(problem) = check.problem {
        bail!("scan: {problem}");
    }
    if check.records != spec.records {
        bail!(
            "scan returned {} records, the store holds {}",
            check.records,
            spec.records
        );
    }
    Ok(Timing {
        open_ns,
        work_ns,
        close_ns,
        ops: check.records,
        user_bytes: check.records * RECORD_BYTES,
        peak_rss_bytes: None,
    })
}

struct ScanCheck {
    seed: u64,
    records: u64,
    previous: [u8; KEY_BYTES],
    problem: Option<String>,
}

impl ScanCheck {
    fn new(seed: u64) -> Self {
        Self {
            seed,
            records: 0,
            previous: [0; KEY_BYTES],
            problem: None,
        }
    }

    fn visit(&mut self, key: &[u8], value: &[u8]) {
        if self.problem.is_some() {
            return;
        }
        let n = self.records;
        self.records += 1;
        if key.len() != KEY_BYTES || value.len() != VALUE_BYTES {
            self.problem = Some(format!(
                "record {n} has a {}/{}-byte key/value",
                key.len(),
                value.len()
            ));
            return;
        }
        if n > 0 && key <= &self.previous[..] {
            self.problem = Some(format!("record {n} is out of key order"));
            return;
        }
        self.previous.copy_from_slice(key);
        if n.is_multiple_of(VALUE_CHECK_EVERY) {
            let i = data::index_of(KeyOrder::Random, key).unwrap_or(u64::MAX);
            if value != &data::value(self.seed, i)[..] {
                self.problem = Some(format!("record {n} (index {i}): value differs"));
            }
        }
    }
}
