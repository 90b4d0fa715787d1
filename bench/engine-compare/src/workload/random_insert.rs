//! Random inserts: records in shuffled key order into a new store. With the
//! data several times the memory limit, most inserts land on a part of the
//! tree that is not cached, which is where write-optimised trees differ
//! from B-trees.

use anyhow::Result;

use super::{insert_all, Spec, Timing};
use crate::data::KeyOrder;

pub fn run(spec: &Spec) -> Result<Timing> {
    insert_all(spec, KeyOrder::Random)
}
