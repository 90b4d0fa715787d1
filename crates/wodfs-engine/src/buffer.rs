//! A message buffer: the pending messages an internal node holds for one
//! child. Keys are relative to the node's frame prefix (see lifting).
//!
//! Invariants (checked by `verify`): range deletes are disjoint; every
//! point message of a key is newer than the range delete covering it; per
//! key, point messages are in increasing MSN order and at most the first is
//! a total operation (insert or delete), because a total operation makes
//! everything before it dead and a partial one (patch, truncate) that
//! follows a total one is folded into it at once.

//!
//! Like a basement, a buffer is either open (a map the writer changes) or
//! frozen: its point messages searched in place in the bytes read from
//! disk (see `format::frozen`), with the messages put since in a small
//! map beside them (the delta). A flush into a frozen buffer adds to its
//! delta instead of decoding every key it holds: that decoding, and
//! freeing it all again when the node was evicted, cost random inserts
//! about a quarter of their time, since a node's buffers usually outlive
//! its stay in the cache. Splits, merges, range deletes and flushes out of
//! the buffer open it first.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::format::frozen::FrozenPoints;
use crate::key_cmp::{merge_order, MapKey};
use crate::key_filter::KeyFilter;
use crate::msg::{apply_all, Msn, PointMsg, PointOp};
use crate::range_index::RangeIndex;

/// Per-key accounting overhead besides the key bytes.
pub(crate) const KEY_OVERHEAD_BYTES: usize = 4;

/// Runs shorter than this go into a buffer key by key even when it has no
/// map entries ([`MsgBuffer::put_sorted`]): a skip-down's few messages.
const PUT_SORTED_MIN: usize = 8;

/// A key's messages in a buffer, oldest first. Nearly every key has one,
/// kept in place: a buffered message costs no allocation besides its key
/// and value (under random inserts, the list's own allocation and free
/// were one in three of the writer's).
pub(crate) type MsgList = smallvec::SmallVec<[PointMsg; 1]>;

type PointMap = BTreeMap<MapKey, MsgList>;

#[derive(Clone, Debug)]
enum Points {
    Open(PointMap),
    Frozen(Layered),
}

/// A frozen buffer's point messages: those read from disk (`base`) and
/// those put since (`delta`, all newer). A key in `delta` has all its
/// messages there; its entry in `base`, if any, is shadowed.
#[derive(Clone, Debug)]
struct Layered {
    base: FrozenPoints,
    delta: PointMap,
    /// Base entries shadowed by the delta: how many, their accounting
    /// bytes and their messages.
    shadowed: usize,
    shadowed_bytes: usize,
    shadowed_msgs: usize,
}

/// Where a key's messages are: in a frozen base (by index) or in a map.
#[derive(Clone, Copy)]
enum Source<'a> {
    Base(usize),
    Map(&'a [PointMsg]),
}

/// The keys of a layered buffer in `[lo, hi)` in order: base entries not
/// shadowed, merged with the delta.
struct Merge<'a> {
    base: &'a FrozenPoints,
    i: usize,
    end: usize,
    delta: std::iter::Peekable<std::collections::btree_map::Range<'a, MapKey, MsgList>>,
}

impl<'a> Iterator for Merge<'a> {
    type Item = (&'a [u8], Source<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let base_key = (self.i < self.end).then(|| self.base.key(self.i));
        let delta_key = self.delta.peek().map(|(k, _)| k.bytes());
        // One inline comparison a step (`key_cmp`), not two `memcmp`s.
        let order = merge_order(base_key, delta_key)?;
        if let (Ordering::Less, Some(b)) = (order, base_key) {
            self.i += 1;
            return Some((b, Source::Base(self.i - 1)));
        }
        let (k, list) = self.delta.next().expect("peeked");
        if order == Ordering::Equal {
            self.i += 1;
        }
        Some((k.bytes(), Source::Map(list.as_slice())))
    }
}

/// A key's messages, borrowed: as stored in a frozen base (count, then
/// messages), or decoded in a map.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ListRef<'a> {
    Encoded(&'a [u8]),
    Decoded(&'a [PointMsg]),
}

impl<'a> ListRef<'a> {
    /// `Some(Some(value))` for a lone insert, `Some(None)` for a lone
    /// delete, `None` for anything else; nothing is decoded or copied.
    pub fn lone_total(self) -> Option<Option<&'a [u8]>> {
        match self {
            ListRef::Encoded(e) => crate::format::frozen::lone_total(e),
            ListRef::Decoded(
                [PointMsg {
                    op: PointOp::Insert(v),
                    ..
                }],
            ) => Some(Some(v.as_slice())),
            ListRef::Decoded(
                [PointMsg {
                    op: PointOp::Delete,
                    ..
                }],
            ) => Some(None),
            ListRef::Decoded(_) => None,
        }
    }

    /// The messages, decoded if they are stored.
    pub fn msgs(self) -> Msgs<'a> {
        match self {
            ListRef::Encoded(e) => Cow::Owned(crate::format::frozen::decode_list(e)),
            ListRef::Decoded(l) => Cow::Borrowed(l),
        }
    }
}

impl Default for Points {
    fn default() -> Self {
        Points::Open(BTreeMap::new())
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct MsgBuffer {
    points: Points,
    pub ranges: RangeIndex,
    bytes: usize,
    /// Point messages held (kept current so accounting is O(1)).
    point_msgs: usize,
    /// Every key of the map (the open map, or the delta): a point query
    /// searches the map only if this says the key may be there.
    filter: KeyFilter,
}

/// Equal when they hold the same messages, whatever their form.
impl PartialEq for MsgBuffer {
    fn eq(&self, other: &Self) -> bool {
        self.ranges == other.ranges
            && self.key_count() == other.key_count()
            && self.iter_points().eq(other.iter_points())
    }
}
impl Eq for MsgBuffer {}

/// A key's messages, borrowed from an open buffer or decoded from a
/// frozen one.
pub(crate) type Msgs<'a> = Cow<'a, [PointMsg]>;

impl MsgBuffer {
    /// This buffer as it comes back from disk: frozen, nothing decoded.
    #[cfg(test)]
    pub(crate) fn frozen_copy(&self) -> MsgBuffer {
        let mut e = crate::format::bytes::Enc::with_capacity(0);
        crate::format::partition::encode_buffer(self, &mut e, usize::MAX);
        let (ranges, points) = FrozenPoints::parse(e.buf).expect("own encoding");
        MsgBuffer::from_frozen(ranges, points)
    }

    pub fn from_frozen(ranges: RangeIndex, points: FrozenPoints) -> Self {
        let mut b = MsgBuffer {
            point_msgs: points.message_count(),
            bytes: points.bytes() + ranges.bytes(),
            points: Points::Frozen(Layered {
                base: points,
                delta: PointMap::new(),
                shadowed: 0,
                shadowed_bytes: 0,
                shadowed_msgs: 0,
            }),
            ranges,
            filter: KeyFilter::default(),
        };
        if b.key_count() == 0 {
            b.points = Points::default();
        }
        b
    }

    /// A buffer of point messages in commit order. A run in strictly
    /// increasing key order (a sequential stream skipping down to a leaf)
    /// is built in one pass, without a search per key; anything else goes
    /// through [`MsgBuffer::put_point`] one message at a time.
    pub fn from_points(points: Vec<(Vec<u8>, PointMsg)>) -> Self {
        let mut b = MsgBuffer::default();
        if !points.windows(2).all(|w| w[0].0 < w[1].0) {
            for (key, msg) in points {
                b.put_point(key, msg);
            }
            return b;
        }
        // One message per key and no range delete: each key's list is just
        // its message, as `put_point` would leave it.
        b.point_msgs = points.len();
        b.bytes = points
            .iter()
            .map(|(k, m)| k.len() + KEY_OVERHEAD_BYTES + m.encoded_bytes())
            .sum();
        let map: PointMap = points
            .into_iter()
            .map(|(k, m)| (MapKey::new(k), smallvec::smallvec![m]))
            .collect();
        b.points = Points::Open(map);
        b.refilter();
        b
    }

    /// The point messages as a map, opening a frozen buffer first.
    fn open(&mut self) -> &mut PointMap {
        if let Points::Frozen(l) = &mut self.points {
            let mut delta = std::mem::take(&mut l.delta);
            let base = &l.base;
            let mut map: PointMap = (0..base.len())
                .filter_map(|i| {
                    let k = base.key(i);
                    (!delta.contains_key(k))
                        .then(|| (MapKey::new(k.to_vec()), MsgList::from_vec(base.messages(i))))
                })
                .collect();
            map.append(&mut delta);
            self.points = Points::Open(map);
            // The base's keys are in the map now, not in the filter: none
            // until enough keys are put (a thawed buffer is usually about
            // to be emptied by a flush).
            self.filter.reset();
        }
        match &mut self.points {
            Points::Open(m) => m,
            Points::Frozen(_) => unreachable!("opened just above"),
        }
    }

    /// Builds the key filter anew from the whole map (after a change that
    /// brought keys into it in bulk and visited every key anyway).
    fn refilter(&mut self) {
        let map = match &self.points {
            Points::Open(m) => m,
            Points::Frozen(l) => &l.delta,
        };
        self.filter = KeyFilter::build(map.keys().map(MapKey::bytes));
    }

    /// The keys in `[lo, hi)` and where each one's messages are.
    fn sources<'a>(
        &'a self,
        lo: &[u8],
        hi: Option<&[u8]>,
    ) -> Box<dyn Iterator<Item = (&'a [u8], Source<'a>)> + 'a> {
        let upper = match hi {
            Some(h) => Excluded(h),
            None => Unbounded,
        };
        match &self.points {
            Points::Open(m) => Box::new(
                m.range::<[u8], _>((Included(lo), upper))
                    .map(|(k, l)| (k.bytes(), Source::Map(l.as_slice()))),
            ),
            Points::Frozen(l) => {
                let start = l.base.lower_bound(lo);
                let end = hi.map_or(l.base.len(), |h| l.base.lower_bound(h).max(start));
                if l.delta.is_empty() {
                    return Box::new((start..end).map(|i| (l.base.key(i), Source::Base(i))));
                }
                Box::new(Merge {
                    base: &l.base,
                    i: start,
                    end,
                    delta: l.delta.range::<[u8], _>((Included(lo), upper)).peekable(),
                })
            }
        }
    }

    /// The messages a source names: a frozen base's entry as stored, or
    /// a map's list.
    fn list_of<'a>(&'a self, source: Source<'a>) -> ListRef<'a> {
        match (source, &self.points) {
            (Source::Map(l), _) => ListRef::Decoded(l),
            (Source::Base(i), Points::Frozen(l)) => ListRef::Encoded(l.base.encoded_messages(i)),
            (Source::Base(_), Points::Open(_)) => unreachable!("an open buffer has no base"),
        }
    }

    /// Turns a frozen buffer into its open form (the writer is about to
    /// change it, or a caller wants the map form).
    pub fn thaw(&mut self) {
        self.open();
    }

    /// Takes the point messages out (opening the buffer), leaving it
    /// without them; ranges stay.
    pub fn take_points(&mut self) -> impl Iterator<Item = (Vec<u8>, MsgList)> {
        let map = std::mem::take(self.open());
        self.filter.reset();
        self.recount();
        map.into_iter().map(|(k, list)| (k.into_vec(), list))
    }

    /// Takes the point messages out as key/value pairs, in order, if the
    /// buffer is open (its values are owned, not a frozen buffer's bytes),
    /// holds no range delete and each key's only message is an insert;
    /// otherwise leaves the buffer as it is and returns `None`.
    pub fn take_lone_inserts(&mut self) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let Points::Open(map) = &self.points else {
            return None;
        };
        let lone_insert = |l: &MsgList| {
            matches!(
                l.as_slice(),
                [PointMsg {
                    op: PointOp::Insert(_),
                    ..
                }]
            )
        };
        if !self.ranges.is_empty() || !map.values().all(lone_insert) {
            return None;
        }
        let map = std::mem::take(self.open());
        self.filter.reset();
        self.recount();
        Some(
            map.into_iter()
                .map(|(k, mut list)| match list.pop().map(|m| m.op) {
                    Some(PointOp::Insert(v)) => (k.into_vec(), v),
                    _ => unreachable!("checked above: a lone insert"),
                })
                .collect(),
        )
    }

    /// Number of keys with point messages.
    pub fn key_count(&self) -> usize {
        match &self.points {
            Points::Open(m) => m.len(),
            Points::Frozen(l) => l.base.len() + l.delta.len() - l.shadowed,
        }
    }

    /// Keys with point messages, in order.
    pub fn keys(&self) -> Box<dyn Iterator<Item = &[u8]> + '_> {
        self.keys_in(&[], None)
    }

    /// Keys with point messages in `[lo, hi)`, in order, without decoding
    /// their messages.
    pub fn keys_in<'a>(
        &'a self,
        lo: &[u8],
        hi: Option<&[u8]>,
    ) -> Box<dyn Iterator<Item = &'a [u8]> + 'a> {
        Box::new(self.sources(lo, hi).map(|(k, _)| k))
    }

    /// Holds range deletes.
    pub fn has_ranges(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// Every key with its messages, in key order.
    pub fn iter_points(&self) -> Box<dyn Iterator<Item = (&[u8], Msgs<'_>)> + '_> {
        self.points_in(&[], None)
    }

    /// Every key with its message list for encoding: a frozen base's
    /// lists as stored (count, then messages), written back without
    /// decoding them, and the others decoded.
    pub fn lists(&self) -> impl Iterator<Item = (&[u8], ListRef<'_>)> + '_ {
        self.sources(&[], None)
            .map(move |(k, s)| (k, self.list_of(s)))
    }

    pub fn is_empty(&self) -> bool {
        self.key_count() == 0 && self.ranges.is_empty()
    }

    /// Accounting size (close to the encoded size).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    #[cfg(test)]
    pub fn message_count(&self) -> usize {
        self.point_msgs + self.ranges.len()
    }

    /// Heap bytes this buffer costs in memory. Open: per key a key `Vec`,
    /// a message `Vec` and B-tree slot overhead; per message its enum.
    pub fn mem_bytes(&self) -> usize {
        // `bytes` counts the ranges' bounds already; O(1), as the cache
        // asks often (`RangeIndex::bytes` walks every range: rsync's
        // buffers full of range moves spent 59 % of the daemon's time
        // there when this asked it). Besides keys and messages: the
        // ranges' nodes and the key filter.
        let beside = self.ranges.len() * 64 + self.filter.mem_bytes();
        match &self.points {
            Points::Open(m) => self.bytes + m.len() * 64 + self.point_msgs * 48 + beside,
            Points::Frozen(l) => {
                // Beyond the live base: the delta's messages and the ranges.
                let base_bytes = l.base.bytes() - l.shadowed_bytes;
                let base_msgs = l.base.message_count() - l.shadowed_msgs;
                let delta_msgs = self.point_msgs - base_msgs;
                l.base.mem_bytes()
                    + (self.bytes - base_bytes)
                    + l.delta.len() * 64
                    + delta_msgs * 48
                    + beside
            }
        }
    }

    pub fn max_msn(&self) -> Msn {
        let newest = |m: &PointMap| {
            m.values()
                .filter_map(|v| v.last().map(|m| m.msn))
                .max()
                .unwrap_or(0)
        };
        let p = match &self.points {
            Points::Open(m) => newest(m),
            // A shadowed base entry is older than the delta's entry for
            // its key, so counting it changes nothing.
            Points::Frozen(l) => l.base.max_msn().max(newest(&l.delta)),
        };
        p.max(self.ranges.max_msn())
    }

    /// Adds a point message newer than everything in the buffer for `key`.
    pub fn put_point(&mut self, key: Vec<u8>, msg: PointMsg) {
        use std::collections::btree_map::Entry;
        let covered = self.ranges.covering(&key).is_some();
        let key_bytes = key.len() + KEY_OVERHEAD_BYTES;
        // New messages go to the open map, or to a frozen buffer's delta.
        let (map, mut layered) = match &mut self.points {
            Points::Open(m) => (m, None),
            Points::Frozen(l) => (&mut l.delta, Some(&l.base)),
        };
        let mut filter_full = false;
        let (added, removed, msgs_added, msgs_removed) = match map.entry(MapKey::new(key)) {
            Entry::Occupied(mut e) => {
                let list = e.get_mut();
                let old: usize = list.iter().map(PointMsg::encoded_bytes).sum();
                let old_len = list.len();
                fold_into(list, msg, false);
                let new: usize = list.iter().map(PointMsg::encoded_bytes).sum();
                (new, old, list.len(), old_len)
            }
            Entry::Vacant(e) => {
                let shadowed = layered
                    .take()
                    .and_then(|base| base.find(e.key().bytes()).map(|i| (base, i)));
                let (list, removed, msgs_removed) = new_list(shadowed, msg, covered);
                let base_known = shadowed.is_some();
                let new = key_bytes + list.iter().map(PointMsg::encoded_bytes).sum::<usize>();
                let n = list.len();
                filter_full = !self.filter.add(e.key().bytes());
                e.insert(list);
                if base_known {
                    if let Points::Frozen(l) = &mut self.points {
                        l.shadowed += 1;
                        l.shadowed_bytes += removed;
                        l.shadowed_msgs += msgs_removed;
                    }
                }
                (new, removed, n, msgs_removed)
            }
        };
        if filter_full {
            self.refilter();
        }
        self.bytes = self.bytes + added - removed;
        self.point_msgs = self.point_msgs + msgs_added - msgs_removed;
    }

    /// Adds a range delete `[lo, hi)` newer than everything in the buffer:
    /// older point messages inside it are discarded ("Pac-Man") and older
    /// ranges are cut.
    pub fn put_range_delete(&mut self, lo: Vec<u8>, hi: Vec<u8>, msn: Msn) {
        let dead: Vec<Vec<u8>> = self
            .points_in(&lo, Some(&hi))
            .map(|(k, _)| k.to_vec())
            .collect();
        for k in dead {
            let list = self.open().remove(k.as_slice()).expect("key just listed");
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
    pub fn lookup(&self, key: &[u8]) -> (bool, Msgs<'_>) {
        let covered = self.ranges.covering(key).is_some();
        let (map, base) = match &self.points {
            Points::Open(m) => (m, None),
            Points::Frozen(l) => (&l.delta, Some(&l.base)),
        };
        // The base is searched only for a key the map does not have; the
        // map only for a key its filter may hold.
        let in_map = if self.filter.may_contain(key) {
            map.get(key)
        } else {
            None
        };
        let msgs = match in_map {
            Some(list) => Cow::Borrowed(list.as_slice()),
            None => match base.and_then(|b| b.find(key).map(|i| (b, i))) {
                Some((b, i)) => Cow::Owned(b.messages(i)),
                None => Cow::Borrowed(&[][..]),
            },
        };
        (covered, msgs)
    }

    /// Applies this buffer's messages for `key` to an older value.
    #[cfg(test)]
    pub fn apply_to(&self, key: &[u8], value: Option<Vec<u8>>) -> Option<Vec<u8>> {
        let (covered, msgs) = self.lookup(key);
        let base = if covered { None } else { value };
        apply_all(base, &msgs)
    }

    /// Splits off the messages for keys `>= at` (ranges clipped at `at`).
    pub fn split_off(&mut self, at: &[u8]) -> MsgBuffer {
        let mut right = MsgBuffer {
            points: Points::Open(self.open().split_off(at)),
            ..Default::default()
        };
        right.refilter();
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
        let mut theirs = std::mem::take(other.open());
        self.open().append(&mut theirs);
        self.refilter();
        for (lo, r) in other.ranges.into_iter_owned() {
            self.ranges.insert(lo, r.hi, r.msn);
        }
        self.recount();
    }

    /// Drops the first `n` bytes of every key (a longer frame prefix below:
    /// a flush into a child with a lift). Keys keep their order, and each
    /// is shortened where it lies: no allocation per key.
    pub fn strip_key_prefix(&mut self, n: usize) {
        let old = std::mem::take(self.open());
        self.points = Points::Open(
            old.into_iter()
                .map(|(k, v)| (k.strip_prefix(n), v))
                .collect(),
        );
        self.refilter();
        self.ranges.map_keys(|k| k[n..].to_vec());
        self.recount();
    }

    /// Adds a key's messages, oldest first, each newer than everything in
    /// the buffer for `key` (a flush from above): the key is moved in, not
    /// copied per message.
    pub fn put_points(&mut self, key: Vec<u8>, list: MsgList) {
        let mut list = list.into_iter();
        let Some(last) = list.next_back() else {
            return;
        };
        for m in list {
            self.put_point(key.clone(), m);
        }
        self.put_point(key, last);
    }

    /// [`MsgBuffer::put_points`] for a run of keys in strictly ascending
    /// order (a flush's share for one child). Into a buffer with no map
    /// entries yet (a child just read: its buffer frozen, its delta
    /// empty), the run becomes the map in one bulk build, and each key's
    /// base entry is found by a galloping search from the last one,
    /// instead of a B-tree descent and a binary search of the base per key
    /// (together a sixth of the writer's time under random inserts). The
    /// result, accounting included, is what `put_points` key by key gives.
    pub fn put_sorted(&mut self, run: Vec<(Vec<u8>, MsgList)>) {
        debug_assert!(run.windows(2).all(|w| w[0].0 < w[1].0), "keys ascend");
        let empty = match &self.points {
            Points::Open(m) => m.is_empty(),
            Points::Frozen(l) => l.delta.is_empty(),
        };
        if !empty || run.len() < PUT_SORTED_MIN {
            for (key, list) in run {
                self.put_points(key, list);
            }
            return;
        }
        let base = match &self.points {
            Points::Frozen(l) => Some(&l.base),
            Points::Open(_) => None,
        };
        let mut entries: Vec<(MapKey, MsgList)> = Vec::with_capacity(run.len());
        let (mut added, mut removed, mut msgs_added, mut msgs_removed) = (0, 0, 0, 0);
        let mut shadowed = 0;
        let mut at = 0;
        for (key, list) in run {
            let mut msgs = list.into_iter();
            let Some(first) = msgs.next() else {
                continue;
            };
            let covered = self.ranges.covering(&key).is_some();
            let hit = base.and_then(|b| {
                at = b.lower_bound_from(&key, at);
                (at < b.len() && b.key(at) == key.as_slice()).then_some((b, at))
            });
            let (mut out, gone_bytes, gone_msgs) = new_list(hit, first, covered);
            removed += gone_bytes;
            msgs_removed += gone_msgs;
            shadowed += usize::from(hit.is_some());
            for m in msgs {
                fold_into(&mut out, m, false);
            }
            added += key.len()
                + KEY_OVERHEAD_BYTES
                + out.iter().map(PointMsg::encoded_bytes).sum::<usize>();
            msgs_added += out.len();
            entries.push((MapKey::new(key), out));
        }
        // Sorted and unique: `collect` builds the tree bottom up.
        let map: PointMap = entries.into_iter().collect();
        match &mut self.points {
            Points::Open(m) => *m = map,
            Points::Frozen(l) => {
                l.delta = map;
                l.shadowed += shadowed;
                l.shadowed_bytes += removed;
                l.shadowed_msgs += msgs_removed;
            }
        }
        self.refilter();
        self.bytes = self.bytes + added - removed;
        self.point_msgs = self.point_msgs + msgs_added - msgs_removed;
    }

    /// Rewrites every key with `f` (a change of frame prefix).
    pub fn map_keys(&mut self, mut f: impl FnMut(&[u8]) -> Vec<u8>) {
        let old = std::mem::take(self.open());
        self.points = Points::Open(
            old.into_iter()
                .map(|(k, v)| (MapKey::new(f(k.bytes())), v))
                .collect(),
        );
        self.refilter();
        self.ranges.map_keys(f);
        self.recount();
    }

    pub fn recount(&mut self) {
        let points = self.open();
        let point_msgs = points.values().map(|l| l.len()).sum();
        let bytes = points
            .iter()
            .map(|(k, l)| {
                k.bytes().len()
                    + KEY_OVERHEAD_BYTES
                    + l.iter().map(PointMsg::encoded_bytes).sum::<usize>()
            })
            .sum::<usize>();
        self.point_msgs = point_msgs;
        self.bytes = bytes + self.ranges.bytes();
    }

    /// Point messages with keys in `[lo, hi)`.
    pub fn points_in<'a>(
        &'a self,
        lo: &[u8],
        hi: Option<&[u8]>,
    ) -> Box<dyn Iterator<Item = (&'a [u8], Msgs<'a>)> + 'a> {
        Box::new(
            self.sources(lo, hi)
                .map(move |(k, s)| (k, self.list_of(s).msgs())),
        )
    }
}

/// The list of a key new to the map (an open buffer's, or a frozen one's
/// delta), from its first message: a key the frozen base holds (`base`,
/// its entry there) moves to the delta whole, its messages decoded unless
/// a total operation is about to replace them all, and shadows its base
/// entry, whose accounting bytes and message count are returned to be
/// taken off. `covered`: a range delete in the buffer wipes the older
/// value.
fn new_list(
    base: Option<(&FrozenPoints, usize)>,
    msg: PointMsg,
    covered: bool,
) -> (MsgList, usize, usize) {
    let (mut list, bytes, msgs) = match base {
        Some((b, i)) => {
            let (bytes, msgs) = b.entry_accounting(i);
            let list = if msg.op.is_blind_total() {
                MsgList::new()
            } else {
                MsgList::from_vec(b.messages(i))
            };
            (list, bytes, msgs)
        }
        None => (MsgList::new(), 0, 0),
    };
    fold_into(&mut list, msg, covered && base.is_none());
    (list, bytes, msgs)
}

/// Appends `msg` to a key's list, folding it into a total operation when
/// the outcome no longer depends on anything older. `covered`: a range
/// delete in the same buffer wipes the older value, so the base is known
/// to be missing.
fn fold_into(list: &mut MsgList, msg: PointMsg, covered: bool) {
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
        None => push_patch_or(list, msg),
    }
}

/// Appends `msg` to a list with no total operation to fold into. A patch
/// first makes the older patches it overwrites entirely dead, and merges
/// with the newest one when their ranges touch: a key patched over and
/// over (a file's attributes at every write, chmod after chmod) keeps a
/// short list instead of one message per call, which every query of the
/// key would replay. Only patches since the last truncate are considered,
/// so lengths come out the same.
fn push_patch_or(list: &mut MsgList, msg: PointMsg) {
    let PointOp::Patch { offset, data } = &msg.op else {
        list.push(msg);
        return;
    };
    let (lo, hi) = (*offset as usize, *offset as usize + data.len());
    let first = list
        .iter()
        .rposition(|m| !matches!(m.op, PointOp::Patch { .. }))
        .map_or(0, |i| i + 1);
    let mut i = first;
    while i < list.len() {
        match &list[i].op {
            PointOp::Patch { offset, data }
                if lo <= *offset as usize && *offset as usize + data.len() <= hi =>
            {
                list.remove(i);
            }
            _ => i += 1,
        }
    }
    if list.len() > first {
        if let Some(PointMsg {
            op:
                PointOp::Patch {
                    offset: older_offset,
                    data: older,
                },
            ..
        }) = list.last()
        {
            let (older_lo, older_hi) =
                (*older_offset as usize, *older_offset as usize + older.len());
            if older_lo <= hi && lo <= older_hi {
                let start = lo.min(older_lo);
                let mut merged = vec![0u8; hi.max(older_hi) - start];
                merged[older_lo - start..older_hi - start].copy_from_slice(older);
                merged[lo - start..hi - start].copy_from_slice(data);
                let last = list.len() - 1;
                list[last] = PointMsg {
                    msn: msg.msn,
                    op: PointOp::Patch {
                        offset: start as u32,
                        data: merged,
                    },
                };
                return;
            }
        }
    }
    list.push(msg);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_bytes::below;

    fn pm(msn: Msn, op: PointOp) -> PointMsg {
        PointMsg { msn, op }
    }

    /// Lone inserts are taken out as entries, in key order, leaving the
    /// buffer empty; a buffer with another message (a delete, a patch),
    /// a range delete, or frozen (its values are not owned) is left as it
    /// was.
    #[test]
    fn lone_inserts_are_taken_and_anything_else_is_left() {
        let inserts = || -> Vec<(Vec<u8>, PointMsg)> {
            (0u8..5)
                .rev()
                .map(|i| (vec![i], pm(u64::from(i), PointOp::Insert(vec![i; 3]))))
                .collect()
        };
        let mut b = MsgBuffer::from_points(inserts());
        let taken = b.take_lone_inserts().expect("lone inserts");
        let want: Vec<(Vec<u8>, Vec<u8>)> = (0u8..5).map(|i| (vec![i], vec![i; 3])).collect();
        assert_eq!(taken, want);
        assert!(b.is_empty() && b.bytes() == 0);

        let mut with_delete = inserts();
        with_delete.push((vec![9], pm(9, PointOp::Delete)));
        let mut with_patch = inserts();
        let patch = PointOp::Patch {
            offset: 1,
            data: vec![1],
        };
        with_patch.push((vec![9], pm(9, patch)));
        let mut ranged = MsgBuffer::from_points(inserts());
        ranged.put_range_delete(vec![7], vec![8], 9);
        for mut b in [
            MsgBuffer::from_points(with_delete),
            MsgBuffer::from_points(with_patch),
            ranged,
            MsgBuffer::from_points(inserts()).frozen_copy(),
        ] {
            let before = b.clone();
            assert!(b.take_lone_inserts().is_none());
            assert_eq!(b, before);
            assert_eq!(b.bytes(), before.bytes());
        }
    }

    /// Patches and truncates of a key whose value is not in the buffer:
    /// the kept list applies to any base value exactly as every message in
    /// order would, and a key patched over and over keeps a short list.
    #[test]
    fn repeated_patches_stay_few_and_mean_the_same() {
        let mut next = below(7);
        for round in 0..2000 {
            let mut b = MsgBuffer::default();
            let mut all = Vec::new();
            for msn in 1..=(1 + next(12)) {
                let op = if next(6) == 0 {
                    PointOp::Truncate {
                        len: next(40) as u32,
                    }
                } else {
                    let len = 1 + next(10) as usize;
                    PointOp::Patch {
                        offset: next(30) as u32,
                        data: vec![(msn as u8) | 0x80; len],
                    }
                };
                all.push(pm(msn, op.clone()));
                b.put_point(b"k".to_vec(), pm(msn, op));
            }
            for base in [None, Some(vec![]), Some((1..=50).collect::<Vec<u8>>())] {
                assert_eq!(
                    b.apply_to(b"k", base.clone()),
                    crate::msg::apply_all(base.clone(), &all),
                    "round {round}: {all:?}"
                );
            }
        }
        // The same two fields patched 1,000 times: two messages.
        let mut b = MsgBuffer::default();
        for msn in 1..=1000 {
            let (offset, len) = if msn % 2 == 0 { (3, 2) } else { (61, 12) };
            b.put_point(
                b"k".to_vec(),
                pm(
                    msn,
                    PointOp::Patch {
                        offset,
                        data: vec![msn as u8; len],
                    },
                ),
            );
        }
        assert_eq!(b.lookup(b"k").1.len(), 2);
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
        assert_eq!(b.lookup(b"k").1.len(), 1);
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
        assert_eq!(b.key_count(), 0);
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

    /// A sorted run and the same messages put one by one make equal
    /// buffers with equal accounting; an unsorted run still folds.
    #[test]
    fn from_points_matches_put_point() {
        let msg = |i: u64| {
            let op = match i % 3 {
                0 => PointOp::Insert(vec![i as u8; 7]),
                1 => PointOp::Delete,
                _ => PointOp::Patch {
                    offset: 2,
                    data: vec![1],
                },
            };
            pm(i, op)
        };
        let sorted: Vec<(Vec<u8>, PointMsg)> = (0..50u64)
            .map(|i| (format!("k{i:03}").into_bytes(), msg(i)))
            .collect();
        let shuffled: Vec<(Vec<u8>, PointMsg)> = (0..50u64)
            .map(|i| (format!("k{:03}", i * 7 % 20).into_bytes(), msg(i)))
            .collect();
        for points in [sorted, shuffled] {
            let mut one_by_one = MsgBuffer::default();
            for (k, m) in points.clone() {
                one_by_one.put_point(k, m);
            }
            let built = MsgBuffer::from_points(points);
            assert_eq!(built, one_by_one);
            assert_eq!(built.bytes(), one_by_one.bytes());
            assert_eq!(built.message_count(), one_by_one.message_count());
        }
    }

    /// A message of any kind at the next MSN, small enough that patches
    /// overlap and truncates cut them.
    fn random_msg(msn: &mut Msn, next: &mut dyn FnMut(u64) -> u64) -> PointMsg {
        *msn += 1;
        let op = match next(4) {
            0 => PointOp::Insert(vec![*msn as u8; next(9) as usize]),
            1 => PointOp::Delete,
            2 => PointOp::Truncate {
                len: next(6) as u32,
            },
            _ => PointOp::Patch {
                offset: next(8) as u32,
                data: vec![*msn as u8 | 0x80; 1 + next(4) as usize],
            },
        };
        pm(*msn, op)
    }

    /// A buffer that took many puts keeps a filter of its keys, which
    /// turns most lookups of keys it does not hold away from its map.
    #[test]
    fn a_buffer_of_many_keys_filters_lookups_of_absent_ones() {
        let mut next = below(23);
        let mut msn = 0;
        let mut b = MsgBuffer::default();
        for i in 0..5_000u64 {
            let k = format!("/table/f{:08}", i * 2).into_bytes();
            b.put_point(k, random_msg(&mut msn, &mut next));
        }
        assert!(b.filter.is_built());
        let passed = (0..5_000u64)
            .filter(|i| {
                b.filter
                    .may_contain(format!("/table/f{:08}", i * 2 + 1).as_bytes())
            })
            .count();
        assert!(passed < 100, "{passed} of 5,000 absent keys reach the map");
    }

    /// A point lookup answers what the buffer lists for the key, whatever
    /// brought the key into the map: puts one by one through the key
    /// filter's rebuilds, sorted runs, a frozen copy's delta, thawing by a
    /// range delete, a split and its append, a rewrite of every key, a
    /// take. The filter never hides a key the map holds.
    #[test]
    fn lookups_find_every_key_the_buffer_lists() {
        let mut next = below(17);
        let key = |i: u64| format!("k{i:05}").into_bytes();
        let mut msn = 0;
        let mut b = MsgBuffer::default();
        let mut checked_with_filter = 0;
        for step in 0..3_000 {
            match next(40) {
                0..=33 => {
                    let k = key(next(3_000));
                    b.put_point(k, random_msg(&mut msn, &mut next));
                }
                34 => {
                    let mut ks: Vec<u64> = (0..next(200)).map(|_| next(3_000)).collect();
                    ks.sort_unstable();
                    ks.dedup();
                    let run = ks
                        .into_iter()
                        .map(|i| (key(i), smallvec::smallvec![random_msg(&mut msn, &mut next)]))
                        .collect();
                    b.put_sorted(run);
                }
                35 => b = b.frozen_copy(),
                36 => {
                    let lo = next(3_000);
                    msn += 1;
                    b.put_range_delete(key(lo), key(lo + 1 + next(20)), msn);
                }
                37 => {
                    let right = b.split_off(&key(next(3_000)));
                    b.append(right);
                }
                38 => b.map_keys(<[u8]>::to_vec),
                _ if next(10) == 0 => {
                    b.take_points().for_each(drop);
                }
                _ => {}
            }
            if step % 50 != 49 {
                continue;
            }
            checked_with_filter += usize::from(b.filter.is_built());
            let listed: BTreeMap<Vec<u8>, Vec<PointMsg>> = b
                .iter_points()
                .map(|(k, m)| (k.to_vec(), m.into_owned()))
                .collect();
            for i in 0..3_000 {
                let k = key(i);
                let (_, msgs) = b.lookup(&k);
                let want = listed.get(&k).cloned().unwrap_or_default();
                assert_eq!(msgs.into_owned(), want, "step {step}, key {i}");
            }
        }
        // Many checks ran with a filter built (not every key "maybe").
        assert!(checked_with_filter > 20, "{checked_with_filter} of 60");
    }

    /// An open buffer of up to 30 random messages on 20 keys, under a
    /// range delete one time in three.
    fn random_buffer(msn: &mut Msn, next: &mut dyn FnMut(u64) -> u64) -> MsgBuffer {
        let mut b = MsgBuffer::default();
        if next(3) == 0 {
            b.put_range_delete(b"k05".to_vec(), b"k12".to_vec(), 0);
        }
        for _ in 0..next(30) {
            let key = format!("k{:02}", next(20)).into_bytes();
            b.put_point(key, random_msg(msn, next));
        }
        b
    }

    /// Messages put into a frozen buffer (its delta) and into the same
    /// buffer opened give equal buffers: the same messages per key (a
    /// base entry shadowed by a blind insert, patched on top of its base
    /// messages, or left alone), the same accounting, the same encoding.
    #[test]
    fn a_frozen_buffer_takes_messages_as_an_open_one_does() {
        let mut next = below(11);
        for round in 0..300 {
            let mut msn = 0;
            let mut open = random_buffer(&mut msn, &mut next);
            let mut frozen = open.frozen_copy();
            assert!(matches!(frozen.points, Points::Frozen(_)) || open.key_count() == 0);
            for _ in 0..next(30) {
                let key = format!("k{:02}", next(25)).into_bytes();
                let m = random_msg(&mut msn, &mut next);
                open.put_point(key.clone(), m.clone());
                frozen.put_point(key, m);
                assert_eq!(frozen.bytes(), open.bytes(), "round {round}");
                assert_eq!(frozen.message_count(), open.message_count());
                assert_eq!(frozen.key_count(), open.key_count());
            }
            assert_eq!(frozen, open, "round {round}");
            assert_eq!(frozen.max_msn(), open.max_msn());
            for k in 0..25 {
                let key = format!("k{k:02}").into_bytes();
                assert_eq!(frozen.lookup(&key), open.lookup(&key));
            }
            assert!(frozen
                .points_in(b"k07", Some(b"k19"))
                .eq(open.points_in(b"k07", Some(b"k19"))));
            // Written back, read again: what the open buffer encodes to.
            assert_eq!(frozen.frozen_copy(), open);
            let mut opened = frozen.clone();
            opened.thaw();
            assert_eq!(opened, open);
            assert_eq!(opened.bytes(), open.bytes());
        }
    }

    /// A sorted run put at once gives the buffer that putting its keys one
    /// by one gives, into an empty open buffer, a frozen one (base entries
    /// shadowed or kept, range deletes below), and one whose map is not
    /// empty (where `put_sorted` goes key by key itself).
    #[test]
    fn a_sorted_run_put_at_once_is_put_key_by_key() {
        let mut next = below(13);
        for round in 0..600 {
            let mut msn = 0;
            let start = random_buffer(&mut msn, &mut next);
            let mut one_by_one = match round % 3 {
                0 => start.frozen_copy(),
                1 => {
                    let mut b = MsgBuffer {
                        ranges: start.ranges.clone(),
                        ..Default::default()
                    };
                    b.recount();
                    b
                }
                _ => start,
            };
            let mut at_once = one_by_one.clone();
            let mut run: Vec<(Vec<u8>, MsgList)> = Vec::new();
            for k in 0..25 {
                if next(2) == 0 {
                    continue;
                }
                let list: MsgList = (0..1 + next(3))
                    .map(|_| random_msg(&mut msn, &mut next))
                    .collect();
                run.push((format!("k{k:02}").into_bytes(), list));
            }
            for (key, list) in run.clone() {
                one_by_one.put_points(key, list);
            }
            at_once.put_sorted(run);
            assert_eq!(at_once, one_by_one, "round {round}");
            assert_eq!(at_once.bytes(), one_by_one.bytes(), "round {round}");
            assert_eq!(at_once.message_count(), one_by_one.message_count());
            assert_eq!(at_once.key_count(), one_by_one.key_count());
            assert_eq!(at_once.mem_bytes(), one_by_one.mem_bytes());
            assert_eq!(at_once.frozen_copy(), one_by_one);
            let mut recounted = at_once.clone();
            recounted.recount();
            assert_eq!(recounted.bytes(), at_once.bytes(), "round {round}");
        }
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
        assert_eq!(r.key_count(), 1);
        assert_eq!(b.key_count(), 1);
    }
}
