//! Sequential inserts: records in key order into a new store, the best
//! case for every engine (appends to the right edge of the tree).

use anyhow::Result;

use super::{insert_all, Spec, Timing};
use crate::data::KeyOrder;

pub fn run(spec: &Spec) -> Result<Timing> {
    insert_all(spec, KeyOrder::Sequential)
}
