//! A message buffer: the pending messages an internal node holds for one
//! child. Keys are relative to the node's frame prefix (see lifting).
//!
//! Invariants (checked by `verify`): range deletes are disjoint; every
//! point message of a key is newer than the range delete covering it; per
//! key, point messages are in increasing MSN order and at most the first is
//! a total operation (insert or delete), because a total operation makes
//! everything before it dead and a partial one (patch, truncate) that
//! follows a total one is folded into it at once.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::msg::{apply_all, Msn, PointMsg, PointOp};
use crate::range_index::RangeIndex;

/// Per-key accounting overhead besides the key bytes.
const KEY_OVERHEAD_BYTES: usize = 4;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MsgBuffer {
    pub points: BTreeMap<Vec<u8>, Vec<PointMsg>>,
    pub ranges: RangeIndex,
    bytes: usize,
    /// Point messages held (kept current so accounting is O(1)).
    point_msgs: usize,
}

impl MsgBuffer {
    pub fn is_empty(&self) -> bool {
        self.points.is_empty() && self.ranges.is_empty()
    }

    /// Accounting size (close to the encoded size).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn message_count(&self) -> usize {
        self.point_msgs + self.ranges.len()
    }

    /// Heap bytes this buffer costs in memory: per key a key `Vec`, a
    /// message `Vec` and B-tree slot overhead; per message its enum.
    pub fn mem_bytes(&self) -> usize {
        self.bytes + self.points.len() * 64 + self.message_count() * 48
    }

    pub fn max_msn(&self) -> Msn {
        let p = self
            .points
            .values()
            .filter_map(|v| v.last().map(|m| m.msn))
            .max()
            .unwrap_or(0);
        p.max(self.ranges.max_msn())
    }

    /// Adds a point message newer than everything in the buffer for `key`.
    pub fn put_point(&mut self, key: Vec<u8>, msg: PointMsg) {
        let covered = self.ranges.covering(&key).is_some();
        match self.points.get_mut(&key) {
            Some(list) => {
                let old: usize = list.iter().map(PointMsg::encoded_bytes).sum();
                let old_len = list.len();
                fold_into(list, msg, false);
                let new: usize = list.iter().map(PointMsg::encoded_bytes).sum();
                self.bytes = self.bytes + new - old;
                self.point_msgs = self.point_msgs + list.len() - old_len;
            }
            None => {
                let mut list = Vec::with_capacity(1);
                fold_into(&mut list, msg, covered);
                self.point_msgs += list.len();
                self.bytes += key.len()
                    + KEY_OVERHEAD_BYTES
                    + list.iter().map(PointMsg::encoded_bytes).sum::<usize>();
                self.points.insert(key, list);
            }
        }
    }

    /// Adds a range delete `[lo, hi)` newer than everything in the buffer:
    /// older point messages inside it are discarded ("Pac-Man") and older
    /// ranges are cut.
    pub fn put_range_delete(&mut self, lo: Vec<u8>, hi: Vec<u8>, msn: Msn) {
        let dead: Vec<Vec<u8>> = self
            .points
            .range::<[u8], _>((Included(lo.as_slice()), Excluded(hi.as_slice())))
            .map(|(k, _)| k.clone())
            .collect();
        for k in dead {
            let list = self.points.remove(&k).expect("key just listed");
            self.point_msgs -= list.len();
            self.bytes -= k.len()
                + KEY_OVERHEAD_BYTES
                + list.iter().map(PointMsg::encoded_bytes).sum::<usize>();
        }
        let delta = self.ranges.insert(lo, hi, msn);
        self.bytes = (self.bytes as isize - delta) as usize;
    }

    /// What this buffer does to `key`: whether a range delete wipes the
    /// older value first, and the point messages to apply after it.
    pub fn lookup(&self, key: &[u8]) -> (bool, &[PointMsg]) {
        let covered = self.ranges.covering(key).is_some();
        let msgs = self.points.get(key).map(Vec::as_slice).unwrap_or(&[]);
        (covered, msgs)
    }

    /// Applies this buffer's messages for `key` to an older value.
    pub fn apply_to(&self, key: &[u8], value: Option<Vec<u8>>) -> Option<Vec<u8>> {
        let (covered, msgs) = self.lookup(key);
        let base = if covered { None } else { value };
        apply_all(base, msgs)
    }

    /// Splits off the messages for keys `>= at` (ranges clipped at `at`).
    pub fn split_off(&mut self, at: &[u8]) -> MsgBuffer {
        let mut right = MsgBuffer {
            points: self.points.split_off(at),
            ..Default::default()
        };
        let ranges = std::mem::take(&mut self.ranges);
        for (lo, r) in ranges.into_iter_owned() {
            if r.hi.as_slice() <= at {
                self.ranges.insert(lo, r.hi, r.msn);
            } else if lo.as_slice() >= at {
                right.ranges.insert(lo, r.hi, r.msn);
            } else {
                self.ranges.insert(lo, at.to_vec(), r.msn);
                right.ranges.insert(at.to_vec(), r.hi, r.msn);
            }
        }
        self.recount();
        right.recount();
        right
    }

    /// Appends a buffer whose keys all sort after ours (a neighbour's).
    pub fn append(&mut self, mut other: MsgBuffer) {
        self.points.append(&mut other.points);
        for (lo, r) in other.ranges.into_iter_owned() {
            self.ranges.insert(lo, r.hi, r.msn);
        }
        self.recount();
    }

    /// Rewrites every key with `f` (a change of frame prefix).
    pub fn map_keys(&mut self, mut f: impl FnMut(&[u8]) -> Vec<u8>) {
        let old = std::mem::take(&mut self.points);
        self.points = old.into_iter().map(|(k, v)| (f(&k), v)).collect();
        self.ranges.map_keys(f);
        self.recount();
    }

    pub fn recount(&mut self) {
        self.point_msgs = self.points.values().map(Vec::len).sum();
        self.bytes = self
            .points
            .iter()
            .map(|(k, l)| {
                k.len() + KEY_OVERHEAD_BYTES + l.iter().map(PointMsg::encoded_bytes).sum::<usize>()
            })
            .sum::<usize>()
            + self.ranges.bytes();
    }

    /// Point messages with keys in `[lo, hi)`.
    pub fn points_in<'a>(
        &'a self,
        lo: &'a [u8],
        hi: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a Vec<PointMsg>)> + 'a {
        let upper = match hi {
            Some(h) => Excluded(h),
            None => Unbounded,
        };
        self.points.range::<[u8], _>((Included(lo), upper))
    }
}

/// Appends `msg` to a key's list, folding it into a total operation when
/// the outcome no longer depends on anything older. `covered`: a range
/// delete in the same buffer wipes the older value, so the base is known
/// to be missing.
fn fold_into(list: &mut Vec<PointMsg>, msg: PointMsg, covered: bool) {
    if msg.op.is_blind_total() {
        list.clear();
        list.push(msg);
        return;
    }
    let base = match list.first() {
        Some(PointMsg {
            op: PointOp::Insert(v),
            ..
        }) => Some(Some(v.clone())),
        Some(PointMsg {
            op: PointOp::Delete,
            ..
        }) => Some(None),
        None if covered => Some(None),
        _ => None,
    };
    match base {
        Some(base_value) => {
            let value = apply_all(base_value, list.get(1..).unwrap_or(&[]));
            let value = msg.op.apply(value);
            list.clear();
            list.push(PointMsg {
                msn: msg.msn,
                op: match value {
                    Some(v) => PointOp::Insert(v),
                    None => PointOp::Delete,
                },
            });
        }
        None => list.push(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pm(msn: Msn, op: PointOp) -> PointMsg {
        PointMsg { msn, op }
    }

    #[test]
    fn patches_fold_into_inserts_and_range_deletes_eat_older_messages() {
        let mut b = MsgBuffer::default();
        b.put_point(b"k".to_vec(), pm(1, PointOp::Insert(vec![1, 2, 3])));
        b.put_point(
            b"k".to_vec(),
            pm(
                2,
                PointOp::Patch {
                    offset: 1,
                    data: vec![9],
                },
            ),
        );
        assert_eq!(b.points[&b"k".to_vec()].len(), 1);
        assert_eq!(b.apply_to(b"k", None), Some(vec![1, 9, 3]));
        b.put_point(
            b"x".to_vec(),
            pm(
                3,
                PointOp::Patch {
                    offset: 0,
                    data: vec![5],
                },
            ),
        );
        assert_eq!(b.apply_to(b"x", Some(vec![0, 0])), Some(vec![5, 0]));
        b.put_range_delete(b"a".to_vec(), b"z".to_vec(), 4);
        assert!(b.points.is_empty());
        assert_eq!(b.apply_to(b"k", Some(vec![7])), None);
        b.put_point(
            b"m".to_vec(),
            pm(
                5,
                PointOp::Patch {
                    offset: 2,
                    data: vec![1],
                },
            ),
        );
        assert_eq!(b.apply_to(b"m", Some(vec![7; 9])), Some(vec![0, 0, 1]));
        let before = b.bytes();
        b.recount();
        assert_eq!(before, b.bytes());
    }

    #[test]
    fn split_off_clips_ranges() {
        let mut b = MsgBuffer::default();
        b.put_range_delete(b"b".to_vec(), b"y".to_vec(), 1);
        b.put_point(b"c".to_vec(), pm(2, PointOp::Delete));
        b.put_point(b"q".to_vec(), pm(3, PointOp::Delete));
        let r = b.split_off(b"m");
        assert!(b.ranges.covering(b"l").is_some());
        assert!(b.ranges.covering(b"m").is_none());
        assert!(r.ranges.covering(b"m").is_some());
        assert_eq!(r.points.len(), 1);
        assert_eq!(b.points.len(), 1);
    }
}
