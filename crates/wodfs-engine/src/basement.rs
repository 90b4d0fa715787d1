//! A basement: one independently readable partition of a leaf, holding
//! sorted key/value pairs (keys relative to the leaf's frame prefix).
//!
//! A basement is either frozen (as read from disk: searched in place, see
//! `format::frozen`) or open (a map the writer changes). Readers never
//! change a basement; the writer's mutating methods open it first.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::buffer::ListRef;
use crate::format::frozen::FrozenBasement;
use crate::key_cmp::merge_order;
use crate::msg::{apply_all, PointMsg, PointOp};
use crate::range_index::RangeIndex;

/// Per-entry accounting overhead besides key and value bytes (encoded).
const ENTRY_OVERHEAD_BYTES: usize = 6;
/// Per-entry heap overhead in memory, beyond the encoded size.
const MEM_OVERHEAD_PER_ENTRY: usize = 64;

#[derive(Clone, Debug)]
enum Repr {
    Open(BTreeMap<Vec<u8>, Vec<u8>>),
    Frozen(FrozenBasement),
}

#[derive(Clone, Debug)]
pub(crate) struct Basement {
    repr: Repr,
    bytes: usize,
    /// How many small writes were merged into this frozen basement since
    /// it was read (see [`Basement::apply_few`]).
    merges: u8,
}

impl Default for Basement {
    fn default() -> Self {
        Basement {
            repr: Repr::Open(BTreeMap::new()),
            bytes: 0,
            merges: 0,
        }
    }
}

/// Equal when they hold the same entries, whatever their form.
impl PartialEq for Basement {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for Basement {}

/// Small writes merged into a frozen basement before it is opened (see
/// [`Basement::apply_few`]).
const MERGES_BEFORE_OPEN: u8 = 4;

pub(crate) fn entry_bytes(k: &[u8], v: &[u8]) -> usize {
    k.len() + v.len() + ENTRY_OVERHEAD_BYTES
}

impl Basement {
    pub fn from_map(entries: BTreeMap<Vec<u8>, Vec<u8>>) -> Self {
        let bytes = entries.iter().map(|(k, v)| entry_bytes(k, v)).sum();
        Basement {
            repr: Repr::Open(entries),
            bytes,
            merges: 0,
        }
    }

    /// Are its bytes a slice of its node's read buffer
    /// ([`crate::format::raw_bytes::RawBytes`])?
    pub fn is_shared(&self) -> bool {
        matches!(&self.repr, Repr::Frozen(f) if f.is_shared())
    }

    /// Gives a frozen basement whose bytes are a slice of its node's read
    /// buffer bytes of its own.
    pub fn unshare(&mut self) {
        if let Repr::Frozen(f) = &mut self.repr {
            f.unshare();
        }
    }

    pub fn from_frozen(f: FrozenBasement) -> Self {
        let bytes = (0..f.len())
            .map(|i| entry_bytes(f.key(i), f.value(i)))
            .sum();
        Basement {
            repr: Repr::Frozen(f),
            bytes,
            merges: 0,
        }
    }

    /// The encoded bytes, when the basement is frozen (unchanged since it
    /// was read): they can be written back as they are.
    pub fn frozen_raw(&self) -> Option<&[u8]> {
        match &self.repr {
            Repr::Frozen(f) => f.raw(),
            Repr::Open(_) => None,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Open(m) => m.len(),
            Repr::Frozen(f) => f.len(),
        }
    }

    /// Drops the first `n` bytes of every key, which all keys share (the
    /// basement moves to a leaf whose frame prefix is `n` bytes longer).
    /// A frozen basement keeps its bytes and only re-points its index.
    pub fn strip_keys(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        match &mut self.repr {
            Repr::Frozen(f) => f.strip_keys(n),
            Repr::Open(m) => {
                *m = std::mem::take(m)
                    .into_iter()
                    .map(|(k, v)| (k[n..].to_vec(), v))
                    .collect();
            }
        }
        self.bytes -= n * self.len();
    }

    /// The largest key held, if any.
    pub fn last_key(&self) -> Option<&[u8]> {
        match &self.repr {
            Repr::Open(m) => m.keys().next_back().map(Vec::as_slice),
            Repr::Frozen(f) => f.len().checked_sub(1).map(|i| f.key(i)),
        }
    }

    /// Heap bytes this basement costs in memory (open: two `Vec` headers
    /// and B-tree slot overhead per entry besides the bytes themselves).
    pub fn mem_bytes(&self) -> usize {
        match &self.repr {
            Repr::Open(m) => self.bytes + m.len() * MEM_OVERHEAD_PER_ENTRY,
            Repr::Frozen(f) => f.mem_bytes(),
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        match &self.repr {
            Repr::Open(m) => m.get(key).map(Vec::as_slice),
            Repr::Frozen(f) => f.get(key),
        }
    }

    /// The value of `key`, for keys asked in ascending order: `*hint`
    /// (start at 0) is where the previous answer left the search.
    pub fn get_from(&self, key: &[u8], hint: &mut usize) -> Option<&[u8]> {
        match &self.repr {
            Repr::Open(m) => m.get(key).map(Vec::as_slice),
            Repr::Frozen(f) => {
                let i = f.lower_bound_from(key, *hint);
                *hint = i;
                (i < f.len() && f.key(i) == key).then(|| f.value(i))
            }
        }
    }

    /// Whether `key` is here, looking first at entry `*hint` and leaving
    /// there the entry after the answer: keys asked in ascending order,
    /// each the one after the last (a stream being bound), are found
    /// without a search.
    pub fn contains_from(&self, key: &[u8], hint: &mut usize) -> bool {
        match &self.repr {
            Repr::Open(m) => m.contains_key(key),
            Repr::Frozen(f) => {
                let i = if *hint < f.len() && f.key(*hint) == key {
                    *hint
                } else {
                    f.lower_bound(key)
                };
                let found = i < f.len() && f.key(i) == key;
                *hint = i + usize::from(found);
                found
            }
        }
    }

    /// The map form, opening a frozen basement first.
    fn open(&mut self) -> &mut BTreeMap<Vec<u8>, Vec<u8>> {
        if let Repr::Frozen(f) = &self.repr {
            let map = (0..f.len())
                .map(|i| (f.key(i).to_vec(), f.value(i).to_vec()))
                .collect();
            self.repr = Repr::Open(map);
        }
        match &mut self.repr {
            Repr::Open(m) => m,
            Repr::Frozen(_) => unreachable!("opened just above"),
        }
    }

    /// Turns a frozen basement into its open form.
    pub fn thaw(&mut self) {
        self.open();
    }

    /// Takes every entry out, leaving the basement empty.
    pub fn take_entries(&mut self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let map = std::mem::take(self.open());
        self.bytes = 0;
        map
    }

    /// Applies a key's messages (oldest first).
    pub fn apply(&mut self, key: &[u8], msgs: &[PointMsg]) {
        let mut value = self.remove(key);
        for m in msgs {
            value = match (&m.op, value) {
                (PointOp::Insert(v), _) => Some(v.clone()),
                (op, old) => op.apply(old),
            };
        }
        if let Some(v) = value {
            self.bytes += entry_bytes(key, &v);
            self.open().insert(key.to_vec(), v);
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        // Look before opening: a frozen basement without the key stays frozen.
        self.get(key)?;
        let v = self.open().remove(key)?;
        self.bytes -= entry_bytes(key, &v);
        Some(v)
    }

    /// Applies a buffer's worth of messages at once: `ranges` (range
    /// deletes) and `msgs` (keys ascending, each key's list oldest first,
    /// all newer than the range covering the key). A frozen basement is
    /// merged into a new frozen one in one pass, without opening it: that
    /// is what a flush into a leaf does to every basement it touches. A
    /// key whose messages are a lone insert or delete (most of them) is
    /// merged without decoding its list, even when it is stored in a
    /// frozen buffer.
    pub fn apply_sorted(&mut self, msgs: &[(&[u8], ListRef<'_>)], ranges: &RangeIndex) {
        let pieces = self.apply_sorted_in_pieces(msgs, ranges, usize::MAX);
        debug_assert!(pieces.is_empty());
    }

    /// [`Basement::apply_sorted`] that leaves a frozen basement no larger
    /// than about `piece_bytes` (one entry at least): what does not fit
    /// is returned as the basements that follow this one, each with the
    /// pivot before it. The merge is cut into pieces as it is built, so
    /// each byte is copied once; building one large basement and cutting
    /// it afterwards copied a stream's bytes twice. Cut only when the
    /// result would be larger than two pieces, as `reshape_basements`
    /// cuts an open basement.
    ///
    /// Messages that all lie past the last key of a basement of at least
    /// half a piece are built into basements of their own when they fill
    /// half a piece themselves: a stream's next batch does not copy the
    /// batch before it again.
    pub fn apply_sorted_in_pieces(
        &mut self,
        msgs: &[(&[u8], ListRef<'_>)],
        ranges: &RangeIndex,
        piece_bytes: usize,
    ) -> Vec<(Vec<u8>, Basement)> {
        let Repr::Frozen(f) = &self.repr else {
            for (lo, r) in ranges.iter() {
                self.delete_range(lo, &r.hi);
            }
            for (k, list) in msgs {
                self.apply(k, &list.msgs());
            }
            return Vec::new();
        };
        let last = f.len().checked_sub(1).map(|i| f.key(i));
        let appends = ranges.is_empty()
            && last.is_some_and(|last| msgs.first().is_some_and(|(k, _)| *k > last));
        let keep_old = appends && kept_apart(self.bytes, msgs_bytes(msgs), piece_bytes);
        let out = merged(f, keep_old, msgs, ranges);
        let cuts = piece_runs(out.iter().map(|(k, v)| entry_bytes(k, v)), piece_bytes);
        let build = |run: &std::ops::Range<usize>| {
            Basement::from_frozen(FrozenBasement::build(
                out[run.clone()].iter().map(|(k, v)| (*k, v.as_ref())),
            ))
        };
        let mut pieces = Vec::new();
        let mut prev_last = if keep_old { last } else { None };
        for (n, run) in cuts.iter().enumerate() {
            if run.is_empty() {
                continue;
            }
            if n == 0 && !keep_old {
                // The head: this basement's new self.
                prev_last = Some(out[run.end - 1].0);
                continue;
            }
            let first = out[run.start].0;
            let pivot = crate::tree::frame::separator(
                prev_last.expect("a piece follows the entries before it"),
                first,
            );
            pieces.push((pivot, build(run)));
            prev_last = Some(out[run.end - 1].0);
        }
        if !keep_old {
            // Not before the pivots above are taken from `out`, which
            // borrows from this basement.
            let head = build(&cuts[0]);
            drop(out);
            *self = head;
        }
        pieces
    }

    /// [`Basement::apply_sorted_in_pieces`] for inserts past this
    /// basement's last key whose values the caller gives away (a stream's
    /// blocks, see `tree::write::apply_to_leaf`): the values are moved
    /// into open basements instead of copied into frozen ones, and cut
    /// where that merge would cut them. Building frozen basements copied
    /// every byte of a sequential write once more on the request thread
    /// (a 4 GiB write: `FrozenBasement::build` was a fifth of that
    /// thread's samples); the copy into the node image at write-back is
    /// the same for either form. `entries`: sorted, distinct, every key
    /// past [`Basement::last_key`].
    pub fn append_owned_in_pieces(
        &mut self,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        piece_bytes: usize,
    ) -> Vec<(Vec<u8>, Basement)> {
        debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        debug_assert!(self
            .last_key()
            .is_none_or(|last| entries.first().is_none_or(|(k, _)| k.as_slice() > last)));
        let new_sizes = entries.iter().map(|(k, v)| entry_bytes(k, v));
        let keep_old =
            self.len() > 0 && kept_apart(self.bytes, new_sizes.clone().sum(), piece_bytes);
        // What the pieces are cut from: the old entries too unless they
        // stay as they are.
        let old = if keep_old { 0 } else { self.len() };
        let old_sizes: Vec<usize> = self
            .iter()
            .take(old)
            .map(|(k, v)| entry_bytes(k, v))
            .collect();
        let cuts = piece_runs(old_sizes.iter().copied().chain(new_sizes), piece_bytes);
        let mut entries = entries.into_iter();
        let mut runs = cuts.iter();
        if !keep_old {
            // The head: this basement's entries and the first new ones.
            let head = runs.next().expect("fill_runs returns a run");
            let Some(extra) = head.end.checked_sub(old) else {
                // The old entries alone fill more than a piece (a small
                // append to a large basement): cut like any open basement.
                self.append_sorted_owned(entries);
                return Vec::new();
            };
            self.append_sorted_owned(entries.by_ref().take(extra));
        }
        let mut prev_last = self.last_key().map(<[u8]>::to_vec);
        let mut pieces = Vec::new();
        for run in runs {
            if run.is_empty() {
                continue;
            }
            let map: BTreeMap<Vec<u8>, Vec<u8>> = entries.by_ref().take(run.len()).collect();
            let first = map.keys().next().expect("a run is not empty");
            let pivot = crate::tree::frame::separator(
                prev_last
                    .as_deref()
                    .expect("a piece follows the entries before it"),
                first,
            );
            prev_last = map.keys().next_back().cloned();
            pieces.push((pivot, Basement::from_map(map)));
        }
        pieces
    }

    /// Adds entries past the last key, opening the basement.
    fn append_sorted_owned(&mut self, entries: impl Iterator<Item = (Vec<u8>, Vec<u8>)>) {
        let map = self.open();
        let mut added = 0;
        for (k, v) in entries {
            added += entry_bytes(&k, &v);
            map.insert(k, v);
        }
        self.bytes += added;
    }

    /// [`Basement::apply_sorted`] for a message or two (a skip-down).
    /// Opening a frozen basement costs two allocations per entry (and as
    /// many frees when it is unloaded); a merge copies it once. Under
    /// random inserts a leaf's basement gets a few skip-downs between its
    /// read and its write-back: merging up to four (rather than the first
    /// only) took opening out of the writer's profile (4 % of its samples,
    /// 0.4 % after) and most of the freeing thread's work on basements
    /// (engine-compare, session 21; eight did no better). Past
    /// `MERGES_BEFORE_OPEN`, a stream or a hot key range is bringing more,
    /// and a map takes each in O(log n) where a merge copies the basement.
    pub fn apply_few(&mut self, msgs: &[(&[u8], ListRef<'_>)], ranges: &RangeIndex) {
        let frozen = matches!(self.repr, Repr::Frozen(_));
        if frozen && self.merges < MERGES_BEFORE_OPEN {
            let merges = self.merges + 1;
            self.apply_sorted(msgs, ranges);
            self.merges = merges;
        } else {
            self.thaw();
            self.apply_sorted(msgs, ranges);
        }
    }

    /// Deletes every key in `[lo, hi)`.
    pub fn delete_range(&mut self, lo: &[u8], hi: &[u8]) {
        if self.range(lo, Some(hi)).next().is_none() {
            return;
        }
        let map = self.open();
        let mut tail = map.split_off(lo);
        let mut rest = tail.split_off(hi);
        map.append(&mut rest);
        let freed: usize = tail.iter().map(|(k, v)| entry_bytes(k, v)).sum();
        self.bytes -= freed;
    }

    /// Entries with keys in `[lo, hi)`, in order.
    pub fn range<'a>(&'a self, lo: &'a [u8], hi: Option<&'a [u8]>) -> Entries<'a> {
        match &self.repr {
            Repr::Open(m) => {
                let upper = match hi {
                    Some(h) => Excluded(h),
                    None => Unbounded,
                };
                Entries::Open(m.range::<[u8], _>((Included(lo), upper)))
            }
            Repr::Frozen(f) => {
                // The whole basement (a scan passing through) needs no search.
                let start = if lo.is_empty() { 0 } else { f.lower_bound(lo) };
                let end = hi.map_or(f.len(), |h| f.lower_bound(h).max(start));
                Entries::Frozen(f, start..end)
            }
        }
    }

    pub fn iter(&self) -> Entries<'_> {
        self.range(&[], None)
    }
}

/// An iterator over a basement's entries.
pub(crate) enum Entries<'a> {
    Open(std::collections::btree_map::Range<'a, Vec<u8>, Vec<u8>>),
    Frozen(&'a FrozenBasement, std::ops::Range<usize>),
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Entries::Open(r) => r.next().map(|(k, v)| (k.as_slice(), v.as_slice())),
            Entries::Frozen(f, r) => r.next().map(|i| (f.key(i), f.value(i))),
        }
    }
}

/// The entries of frozen basement `f` (none if `skip_old`) with `msgs`
/// and `ranges` applied, borrowed where they are unchanged.
fn merged<'a>(
    f: &'a FrozenBasement,
    skip_old: bool,
    msgs: &[(&'a [u8], ListRef<'a>)],
    ranges: &RangeIndex,
) -> Vec<(&'a [u8], Cow<'a, [u8]>)> {
    let covered = |k: &[u8]| !ranges.is_empty() && ranges.covering(k).is_some();
    let mut out: Vec<(&[u8], Cow<'_, [u8]>)> = Vec::with_capacity(f.len() + msgs.len());
    let (mut i, mut m) = (if skip_old { f.len() } else { 0 }, 0);
    while i < f.len() || m < msgs.len() {
        let old_key = (i < f.len()).then(|| f.key(i));
        let msg_key = msgs.get(m).map(|(k, _)| *k);
        // One comparison a step, inline (`key_cmp`): slice comparisons
        // here were most of the writer's `memcmp` under random inserts.
        let order = merge_order(old_key, msg_key).expect("a run has keys left");
        if order == Ordering::Less {
            let k = f.key(i);
            if !covered(k) {
                out.push((k, Cow::Borrowed(f.value(i))));
            }
            i += 1;
            continue;
        }
        // A key with messages, with or without an old value.
        let (k, list) = msgs[m];
        m += 1;
        let take_old = order == Ordering::Equal;
        let had_old = take_old && !covered(k);
        if take_old {
            i += 1;
        }
        // The common case, a lone insert or delete, needs no copy.
        match list.lone_total() {
            Some(Some(v)) => out.push((k, Cow::Borrowed(v))),
            Some(None) => {}
            None => {
                let old = had_old.then(|| f.value(i - 1).to_vec());
                if let Some(v) = apply_all(old, &list.msgs()) {
                    out.push((k, Cow::Owned(v)));
                }
            }
        }
    }
    out
}

/// Bytes the messages' keys and newest values would take as entries, a
/// lower bound good enough to size a merge (patches and deletes count
/// their key only).
fn msgs_bytes(msgs: &[(&[u8], ListRef<'_>)]) -> usize {
    msgs.iter()
        .map(|(k, list)| match list.lone_total() {
            Some(Some(v)) => entry_bytes(k, v),
            _ => k.len(),
        })
        .sum()
}

/// Whether entries appended past a basement's last key become basements
/// of their own, leaving it as it is: both fill half a piece.
fn kept_apart(old_bytes: usize, new_bytes: usize, piece_bytes: usize) -> bool {
    let half = piece_bytes / 2;
    old_bytes >= half && new_bytes >= half
}

/// Where a merge's entries of these sizes are cut into basements: only
/// if they would be larger than two pieces, as `reshape_basements` cuts
/// an open basement (most merges are not cut: sized without
/// allocating), and then into runs that fill a piece each.
fn piece_runs<I>(sizes: I, piece_bytes: usize) -> Vec<std::ops::Range<usize>>
where
    I: Iterator<Item = usize> + Clone,
{
    if sizes.clone().sum::<usize>() > piece_bytes.saturating_mul(2) {
        fill_runs(&sizes.collect::<Vec<_>>(), piece_bytes)
    } else {
        std::iter::once(0..sizes.count()).collect()
    }
}

/// Cuts items of the given sizes into runs of at most `limit` bytes
/// each, filling each run before starting the next (an item larger than
/// `limit` is a run of its own).
pub(crate) fn fill_runs(sizes: &[usize], limit: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && bytes + size > limit {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    out.push(start..sizes.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::Msn;

    fn msg(msn: Msn, op: PointOp) -> PointMsg {
        PointMsg { msn, op }
    }

    /// A skip-down merges into a frozen basement (no map, no allocation
    /// per entry) `MERGES_BEFORE_OPEN` times; the next one opens it.
    #[test]
    fn small_writes_merge_into_a_frozen_basement_up_to_the_limit() {
        let entries: BTreeMap<Vec<u8>, Vec<u8>> =
            (0u8..50).map(|i| (vec![i * 2], vec![i; 3])).collect();
        let frozen = FrozenBasement::build(entries.iter().map(|(k, v)| (&k[..], &v[..])));
        let mut b = Basement::from_frozen(frozen);
        let none = RangeIndex::default();
        for n in 0..=MERGES_BEFORE_OPEN {
            let key = vec![n * 2 + 1];
            let list = [msg(u64::from(n) + 1, PointOp::Insert(vec![n; 5]))];
            b.apply_few(&[(&key[..], ListRef::Decoded(&list))], &none);
            let still_frozen = matches!(b.repr, Repr::Frozen(_));
            assert_eq!(still_frozen, n < MERGES_BEFORE_OPEN, "after write {n}");
            assert_eq!(b.get(&key), Some(&[n; 5][..]));
            assert_eq!(b.len(), 51 + usize::from(n));
        }
    }

    /// `get_from` answers as `get` does for keys asked in ascending order,
    /// present or not, close together or far apart, in both forms.
    #[test]
    fn get_from_agrees_with_get_for_ascending_keys() {
        let entries: BTreeMap<Vec<u8>, Vec<u8>> = (0u8..100)
            .map(|i| (vec![b'k', i * 2], vec![i; 2]))
            .collect();
        let frozen = FrozenBasement::build(entries.iter().map(|(k, v)| (&k[..], &v[..])));
        let forms = [Basement::from_frozen(frozen), Basement::from_map(entries)];
        for b in &forms {
            for stride in [1u8, 2, 3, 7, 30, 61, 250] {
                let mut hint = 0;
                let mut probe = 0u8;
                loop {
                    let key = [b'k', probe];
                    assert_eq!(b.get_from(&key, &mut hint), b.get(&key), "{probe}");
                    match probe.checked_add(stride) {
                        Some(p) => probe = p,
                        None => break,
                    }
                }
            }
        }
    }

    /// `contains_from` answers as `get` does, for keys asked in any order
    /// and whatever the hint, in both forms.
    #[test]
    fn contains_from_agrees_with_get_whatever_the_hint() {
        let entries: BTreeMap<Vec<u8>, Vec<u8>> =
            (0u8..40).map(|i| (vec![b'k', i * 2], vec![i; 3])).collect();
        let frozen = FrozenBasement::build(entries.iter().map(|(k, v)| (&k[..], &v[..])));
        let forms = [Basement::from_frozen(frozen), Basement::from_map(entries)];
        let ascending: Vec<Vec<u8>> = (0u8..84).map(|i| vec![b'k', i]).collect();
        let mixed: Vec<Vec<u8>> = (0u32..84)
            .map(|i| vec![b'k', ((i * 37) % 84) as u8])
            .collect();
        for bm in &forms {
            for keys in [&ascending, &mixed] {
                for start in [0, 5, 39, 40, 1000] {
                    let mut hint = start;
                    for k in keys {
                        assert_eq!(bm.contains_from(k, &mut hint), bm.get(k).is_some(), "{k:?}");
                    }
                }
            }
        }
    }

    /// The one-pass merge into a frozen basement gives what applying the
    /// same messages one by one to the map form gives.
    #[test]
    fn frozen_merge_matches_the_map_form() {
        let entries: BTreeMap<Vec<u8>, Vec<u8>> =
            (0u8..40).map(|i| (vec![b'k', i * 2], vec![i; 3])).collect();
        let frozen = FrozenBasement::build(entries.iter().map(|(k, v)| (&k[..], &v[..])));
        let mut a = Basement::from_frozen(frozen);
        let mut b = Basement::from_map(entries);
        let mut ranges = RangeIndex::default();
        ranges.insert(vec![b'k', 10], vec![b'k', 21], 5);
        let msgs = vec![
            (vec![b'a'], vec![msg(6, PointOp::Insert(vec![1]))]),
            (vec![b'k', 4], vec![msg(7, PointOp::Delete)]),
            (
                vec![b'k', 12],
                vec![msg(
                    8,
                    PointOp::Patch {
                        offset: 1,
                        data: vec![9],
                    },
                )],
            ),
            (vec![b'k', 13], vec![msg(9, PointOp::Truncate { len: 0 })]),
            (
                vec![b'k', 30],
                vec![
                    msg(10, PointOp::Truncate { len: 1 }),
                    msg(
                        11,
                        PointOp::Patch {
                            offset: 2,
                            data: vec![4],
                        },
                    ),
                ],
            ),
            (vec![b'z'], vec![msg(12, PointOp::Insert(vec![2]))]),
        ];
        let c_start = a.clone();
        let refs: Vec<(&[u8], ListRef<'_>)> = msgs
            .iter()
            .map(|(k, l)| (k.as_slice(), ListRef::Decoded(l)))
            .collect();
        a.apply_sorted(&refs, &ranges);
        b.apply_sorted(&refs, &ranges);
        assert!(a.frozen_raw().is_some(), "the merge keeps it frozen");
        assert_eq!(a, b);
        // The same messages as a buffer read from disk hands them over:
        // stored, not decoded.
        let mut buf = crate::buffer::MsgBuffer::default();
        for (k, l) in msgs.clone() {
            buf.put_points(k, l.into());
        }
        let mut e = crate::format::bytes::Enc::with_capacity(0);
        crate::format::partition::encode_buffer(&buf, &mut e, usize::MAX);
        let (_, points) = crate::format::frozen::FrozenPoints::parse(e.buf).unwrap();
        let frozen = crate::buffer::MsgBuffer::from_frozen(RangeIndex::default(), points);
        let stored: Vec<(&[u8], ListRef<'_>)> = frozen.lists().collect();
        assert!(stored.iter().all(|(_, l)| matches!(l, ListRef::Encoded(_))));
        let mut c = c_start;
        c.apply_sorted(&stored, &ranges);
        assert_eq!(c, a);
        assert_eq!(c.bytes(), a.bytes());
        assert_eq!(a.bytes(), b.bytes());
        assert_eq!(a.get(&[b'k', 12]), Some(&[0, 9][..]));
        assert_eq!(a.get(&[b'k', 14]), None);
        assert_eq!(a.get(&[b'k', 30]), Some(&[15, 0, 4][..]));
    }

    /// A merge cut into pieces holds exactly what one merge into an open
    /// basement holds, each piece within its bounds and its size, for
    /// appends (kept apart from a large basement or merged into a small
    /// one), overwrites, deletes and range deletes.
    #[test]
    fn a_merge_in_pieces_holds_what_one_merge_holds() {
        let mut below = crate::test_bytes::below(11);
        let (mut cut, mut kept_apart) = (0, 0);
        for round in 0..300 {
            let old_n = below(60);
            let step = 1 + below(4);
            let entries: BTreeMap<Vec<u8>, Vec<u8>> = (0..old_n)
                .map(|i| {
                    (
                        (i * step).to_be_bytes().to_vec(),
                        vec![i as u8; 1 + below(40) as usize],
                    )
                })
                .collect();
            let frozen = FrozenBasement::build(entries.iter().map(|(k, v)| (&k[..], &v[..])));
            let mut open = Basement::from_map(entries);
            let mut pieced = Basement::from_frozen(frozen);
            // Appends past the last key, or keys anywhere.
            let from = if below(2) == 0 { old_n * step } else { 0 };
            let mut keys: Vec<u64> = (0..below(80)).map(|_| from + below(200)).collect();
            keys.sort_unstable();
            keys.dedup();
            let lists: Vec<(Vec<u8>, Vec<PointMsg>)> = keys
                .iter()
                .map(|k| {
                    let op = match below(6) {
                        0 => PointOp::Delete,
                        1 => PointOp::Patch {
                            offset: 1,
                            data: vec![7; 3],
                        },
                        _ => PointOp::Insert(vec![*k as u8; 1 + below(50) as usize]),
                    };
                    (k.to_be_bytes().to_vec(), vec![msg(100 + *k, op)])
                })
                .collect();
            let refs: Vec<(&[u8], ListRef<'_>)> = lists
                .iter()
                .map(|(k, l)| (k.as_slice(), ListRef::Decoded(l)))
                .collect();
            let mut ranges = RangeIndex::default();
            if below(4) == 0 {
                let lo = below(100);
                ranges.insert(
                    lo.to_be_bytes().to_vec(),
                    (lo + 1 + below(50)).to_be_bytes().to_vec(),
                    50,
                );
            }
            let piece_bytes = 40 + below(400) as usize;
            open.apply_sorted(&refs, &ranges);
            let before = pieced.clone();
            let pieces = pieced.apply_sorted_in_pieces(&refs, &ranges, piece_bytes);
            cut += usize::from(!pieces.is_empty());
            kept_apart +=
                usize::from(!pieces.is_empty() && pieced.frozen_raw() == before.frozen_raw());
            let mut all: Vec<(Vec<u8>, Vec<u8>)> = pieced
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect();
            let mut lo_bound = None::<Vec<u8>>;
            for (pivot, b) in &pieces {
                assert!(all.last().is_none_or(|(k, _)| k < pivot), "round {round}");
                assert!(lo_bound.as_ref().is_none_or(|l| l < pivot), "round {round}");
                assert!(
                    b.iter().all(|(k, _)| k >= pivot.as_slice()),
                    "round {round}"
                );
                assert!(
                    b.len() == 1 || b.bytes() <= 2 * piece_bytes,
                    "round {round}"
                );
                assert!(b.frozen_raw().is_some());
                all.extend(b.iter().map(|(k, v)| (k.to_vec(), v.to_vec())));
                lo_bound = Some(pivot.clone());
            }
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                open.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            assert_eq!(all, want, "round {round}");
            let bytes = pieced.bytes() + pieces.iter().map(|(_, b)| b.bytes()).sum::<usize>();
            assert_eq!(bytes, open.bytes(), "round {round}");
        }
        assert!(
            cut > 50 && kept_apart > 10,
            "{cut} cut, {kept_apart} kept apart"
        );
    }

    /// Inserts past the last key given away are cut as a merge in pieces
    /// cuts them: the same basement, the same pivots and the same pieces,
    /// open instead of frozen, whatever form the basement had; a small
    /// append to a large basement (the merge rebuilds it in pieces) leaves
    /// everything in the basement, for the leaf to cut.
    #[test]
    fn owned_appends_are_cut_as_a_merge_in_pieces_cuts() {
        let mut below = crate::test_bytes::below(5);
        let (mut cut, mut kept_apart, mut merged, mut left_whole) = (0, 0, 0, 0);
        for round in 0..400 {
            let old_n = below(30);
            let entries: BTreeMap<Vec<u8>, Vec<u8>> = (0..old_n)
                .map(|i| {
                    (
                        i.to_be_bytes().to_vec(),
                        vec![i as u8; 1 + below(60) as usize],
                    )
                })
                .collect();
            let frozen = FrozenBasement::build(entries.iter().map(|(k, v)| (&k[..], &v[..])));
            let mut owned = if below(2) == 0 {
                Basement::from_frozen(frozen.clone())
            } else {
                Basement::from_map(entries.clone())
            };
            let mut pieced = Basement::from_frozen(frozen);
            let new: Vec<(Vec<u8>, Vec<u8>)> = (old_n..old_n + 1 + below(40))
                .map(|k| {
                    (
                        k.to_be_bytes().to_vec(),
                        vec![k as u8; 1 + below(80) as usize],
                    )
                })
                .collect();
            let lists: Vec<(Vec<u8>, Vec<PointMsg>)> = new
                .iter()
                .map(|(k, v)| (k.clone(), vec![msg(7, PointOp::Insert(v.clone()))]))
                .collect();
            let refs: Vec<(&[u8], ListRef<'_>)> = lists
                .iter()
                .map(|(k, l)| (k.as_slice(), ListRef::Decoded(l)))
                .collect();
            let piece_bytes = 40 + below(400) as usize;
            let want = pieced.apply_sorted_in_pieces(&refs, &RangeIndex::default(), piece_bytes);
            let got = owned.append_owned_in_pieces(new.clone(), piece_bytes);
            let rows = |b: &Basement| -> Vec<(Vec<u8>, Vec<u8>)> {
                b.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
            };
            if got.is_empty() && !want.is_empty() {
                // Left whole: everything is in the basement.
                left_whole += 1;
                let mut all = rows(&pieced);
                for (_, b) in &want {
                    all.extend(rows(b));
                }
                assert_eq!(rows(&owned), all, "round {round}");
                continue;
            }
            assert_eq!(rows(&owned), rows(&pieced), "round {round}");
            assert_eq!(owned.bytes(), pieced.bytes(), "round {round}");
            assert_eq!(got.len(), want.len(), "round {round}");
            for ((gp, gb), (wp, wb)) in got.iter().zip(&want) {
                assert_eq!(gp, wp, "round {round}");
                assert_eq!(rows(gb), rows(wb), "round {round}");
                assert_eq!(gb.bytes(), wb.bytes(), "round {round}");
                assert!(gb.frozen_raw().is_none(), "round {round}");
            }
            cut += usize::from(!got.is_empty());
            kept_apart += usize::from(
                !got.is_empty() && rows(&owned) == rows(&Basement::from_map(entries.clone())),
            );
            merged += usize::from(rows(&owned).len() > entries.len());
        }
        assert!(
            cut > 100 && kept_apart > 100 && merged > 20 && left_whole > 0,
            "{cut} cut, {kept_apart} kept apart, {merged} merged, {left_whole} left whole"
        );
    }

    /// Stripping a shared key prefix gives the same basement in both
    /// forms, and a stripped frozen basement is encoded anew, not as the
    /// bytes it was read as.
    #[test]
    fn stripped_keys_read_and_encode_as_shorter_keys() {
        let entries: BTreeMap<Vec<u8>, Vec<u8>> = (0u8..50)
            .map(|i| (vec![b'p', b'q', i], vec![i; 3]))
            .collect();
        let frozen = FrozenBasement::build(entries.iter().map(|(k, v)| (&k[..], &v[..])));
        let mut a = Basement::from_frozen(frozen);
        let mut b = Basement::from_map(entries);
        a.strip_keys(2);
        b.strip_keys(2);
        let want: Basement = Basement::from_map((0u8..50).map(|i| (vec![i], vec![i; 3])).collect());
        assert_eq!(a, want);
        assert_eq!(b, want);
        assert_eq!((a.bytes(), b.bytes()), (want.bytes(), want.bytes()));
        assert_eq!(a.get(&[7]), Some(&[7u8, 7, 7][..]));
        assert_eq!(a.last_key(), Some(&[49u8][..]));
        assert!(
            a.frozen_raw().is_none(),
            "its stored bytes hold the long keys"
        );
        let mut e = crate::format::bytes::Enc::with_capacity(0);
        crate::format::partition::encode_basement(&a, &mut e);
        assert_eq!(
            crate::format::partition::decode_basement(&e.buf).unwrap(),
            want
        );
    }
}
