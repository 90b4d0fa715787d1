//! Random point reads of existing keys from the random-insert store,
//! reopened after the page cache was dropped. Every value read is checked
//! against the one inserted, and a missing key fails the run.

use anyhow::{bail, Result};

use super::{Spec, Stopwatch, Timing};
use crate::data::{self, KeyOrder, Rng, RECORD_BYTES};

/// Keeps the read sample apart from the seed that made the data.
const SAMPLE_SEED_SALT: u64 = 0x7265_6164_7321_0001;

pub fn run(spec: &Spec) -> Result<Timing> {
    if spec.records == 0 {
        bail!("point reads need a store with records");
    }
    let mut watch = Stopwatch::start();
    let mut engine = spec.engine.open(&spec.store_dir, &spec.config)?;
    let open_ns = watch.lap();

    let mut sample = Rng::new(spec.seed ^ SAMPLE_SEED_SALT);
    for _ in 0..spec.reads {
        let i = sample.below(spec.records);
        let key = data::key(KeyOrder::Random, spec.seed, i);
        match engine.get(&key)? {
            Some(value) if value[..] == data::value(spec.seed, i)[..] => {}
            Some(_) => bail!("record {i}: value differs from the one inserted"),
            None => bail!("record {i}: key not found"),
        }
    }
    let work_ns = watch.lap();

    engine.close()?;
    let close_ns = watch.lap();
    Ok(Timing {
        open_ns,
        work_ns,
        close_ns,
        ops: spec.reads,
        user_bytes: spec.reads * RECORD_BYTES,
        peak_rss_bytes: None,
    })
}
