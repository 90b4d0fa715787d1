//! Late binding (seed 000 §3): large batches log their inserts without the
//! values; before a log flush makes such a record durable, each unbound
//! insert is bound to the node that now holds its key's value, that node is
//! written, and a binding record naming it is appended.
//!
//! Binding to the key's *current* value is sound: every operation logged
//! after the unbound insert on the same key (insert, delete, patch,
//! truncate) gives the same result when replayed over a value that already
//! includes it, so recovery may start the key from that value and replay
//! the rest. Range moves read values, so pending inserts are bound before a
//! range move runs.

use std::sync::Arc;

use super::cache::CacheEntry;
use super::frame::Bounds;
use super::state::{Env, State};
use super::write::child_bounds;
use crate::buffer::MsgBuffer;
use crate::error::{Error, Result};
use crate::key_cmp::key_cmp;
use crate::msg::{PointMsg, PointOp};
use crate::node::Part;
use crate::table::BlockNum;
use crate::wal::record::{Binding, Target};

/// An insert logged without its value, not yet bound.
#[derive(Clone, Debug)]
pub(crate) struct Unbound {
    pub lsn: u64,
    pub op: u32,
    pub key: Vec<u8>,
    /// Bytes of its value (what binding it will write).
    pub value_bytes: u32,
}

/// The unbound inserts in log order, with the sum of their values' bytes
/// kept as they come and go: the writer checks it on every streamed
/// batch, and summing thousands of entries there each time was work on
/// the write path, under the lock.
#[derive(Debug, Default)]
pub(crate) struct UnboundList {
    items: Vec<Unbound>,
    value_bytes: usize,
}

impl UnboundList {
    pub fn push(&mut self, u: Unbound) {
        self.value_bytes += u.value_bytes as usize;
        self.items.push(u);
    }

    /// Takes every entry out, leaving the list empty.
    pub fn take_all(&mut self) -> Vec<Unbound> {
        self.value_bytes = 0;
        std::mem::take(&mut self.items)
    }

    /// Keeps only the entries `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&Unbound) -> bool) {
        self.items.retain(keep);
        self.value_bytes = self.summed();
    }

    /// Bytes of all the entries' values.
    pub fn value_bytes(&self) -> usize {
        debug_assert_eq!(self.value_bytes, self.summed());
        self.value_bytes
    }

    fn summed(&self) -> usize {
        self.items.iter().map(|u| u.value_bytes as usize).sum()
    }
}

impl std::ops::Deref for UnboundList {
    type Target = [Unbound];

    fn deref(&self) -> &[Unbound] {
        &self.items
    }
}

/// Where the newest whole value of a key is. An answer stays good while
/// the node's contents are unchanged (same cache entry `version`): the
/// message or entry holding the value leaves a node only by a change to it
/// (a flush, a split), which puts a new version. A newer operation on the key elsewhere does not
/// matter: binding to a value that includes the unbound insert is sound
/// (module comment).
#[derive(Clone, Copy, Debug)]
enum Located {
    Node(BlockNum),
    Obsolete,
}

/// What a leaf's value says of a key: it is there, or a later operation
/// removed it.
fn in_leaf(present: bool, b: BlockNum) -> Located {
    if present {
        Located::Node(b)
    } else {
        Located::Obsolete
    }
}

/// What a buffer's messages say of a key: its newest whole value is here
/// (an insert), it was removed (a delete or a range delete over it), or
/// nothing (look further down).
fn in_buffer(buf: &MsgBuffer, b: BlockNum, rel: &[u8]) -> Option<Located> {
    let (covered, msgs) = buf.lookup(rel);
    said_by(msgs.first(), b).or((covered && msgs.is_empty()).then_some(Located::Obsolete))
}

/// What a key's first (oldest) message in the buffer of node `b` says:
/// an insert holds the newest whole value, a delete removed it; a partial
/// one (patch, truncate) says nothing.
fn said_by(first: Option<&PointMsg>, b: BlockNum) -> Option<Located> {
    match first.map(|m| &m.op) {
        Some(PointOp::Insert(_)) => Some(Located::Node(b)),
        Some(PointOp::Delete) => Some(Located::Obsolete),
        _ => None,
    }
}

/// `key` relative to the frame of node `b`.
fn relative<'k>(entry: &CacheEntry, b: BlockNum, key: &'k [u8]) -> Result<&'k [u8]> {
    key.get(entry.node.prefix.len()..).ok_or_else(|| {
        Error::corrupt(
            "node",
            0,
            format!("block {b}: key outside its frame while binding"),
        )
    })
}

/// A root-to-leaf path kept across the lookups of one binding pass (see
/// [`State::locate_unbound`]); read-ahead finds leaves and their bounds
/// with it too.
pub(super) struct LeafPath {
    /// Internal nodes from the root: block, entry, child taken.
    levels: Vec<(BlockNum, Arc<CacheEntry>, usize)>,
    pub leaf: (BlockNum, Arc<CacheEntry>),
    /// The leaf's key bounds: every key inside takes this path.
    pub bounds: Bounds,
    /// Where in the leaf the last key was (partition, entry after it): the
    /// next key of a stream is usually right there.
    hint: (usize, usize),
    /// Per level, its buffer's keys from the last one asked for on.
    windows: Vec<Option<Window>>,
}

/// A buffer's keys from `from` on, copied in order with what each says
/// of an unbound insert ([`in_buffer`]): a binding pass asks for a
/// stream's keys in order, so one walk through the buffer answers for a
/// run of them, where a B-tree descent per key and buffer (a lookup) was
/// a sixth of a sequential stream's writer. Only for a buffer without
/// range deletes (one may cover a key the buffer has no message for).
#[derive(Debug, Default)]
struct Window {
    from: Vec<u8>,
    /// The keys listed, end to end (`ends[i]`: where key `i` ends).
    bytes: Vec<u8>,
    ends: Vec<usize>,
    answers: Vec<Option<Located>>,
    /// The buffer has no key past the last one listed.
    to_end: bool,
    /// Where the last key asked for was.
    at: usize,
}

/// Keys a window lists at most.
const WINDOW_KEYS: usize = 256;

/// What a window says of a key.
enum Listed {
    /// The window does not reach the key.
    Beyond,
    /// The buffer has the key (and what its messages say) or not (`None`).
    Has(Option<Option<Located>>),
}

impl Window {
    fn fill(buf: &MsgBuffer, b: BlockNum, from: &[u8]) -> Window {
        let mut w = Window {
            from: from.to_vec(),
            ..Window::default()
        };
        for (k, msgs) in buf.points_in(from, None).take(WINDOW_KEYS) {
            w.bytes.extend_from_slice(k);
            w.ends.push(w.bytes.len());
            w.answers.push(said_by(msgs.first(), b));
        }
        w.to_end = w.ends.len() < WINDOW_KEYS;
        w
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    fn ask(&mut self, rel: &[u8]) -> Listed {
        // Inline comparisons (`key_cmp`): binding asks once per unbound
        // insert, and `memcmp` calls here and in `covers` were 6 % of a
        // sequential insert's writer.
        let n = self.ends.len();
        if key_cmp(rel, &self.from).is_lt() {
            return Listed::Beyond;
        }
        if !self.to_end && key_cmp(rel, self.key(n - 1)).is_gt() {
            return Listed::Beyond;
        }
        // Usually at or just past the last key asked for.
        if self.at >= n || key_cmp(self.key(self.at), rel).is_gt() {
            self.at = 0;
        }
        let mut order = std::cmp::Ordering::Greater;
        while self.at < n {
            order = key_cmp(self.key(self.at), rel);
            if order.is_ge() {
                break;
            }
            self.at += 1;
        }
        if self.at < n && order.is_eq() {
            Listed::Has(Some(self.answers[self.at]))
        } else {
            Listed::Has(None)
        }
    }
}

impl LeafPath {
    fn covers(&self, key: &[u8]) -> bool {
        key_cmp(&self.bounds.lo, key).is_le()
            && self
                .bounds
                .hi
                .as_deref()
                .is_none_or(|h| key_cmp(key, h).is_lt())
    }

    /// [`State::locate_value`] for a key this path covers.
    fn locate(&mut self, st: &State, env: Env<'_>, key: &[u8]) -> Result<Located> {
        for (n, (b, entry, i)) in self.levels.iter().enumerate() {
            let Some(Part::Buffer(buf)) = entry.node.parts[*i].data.get() else {
                return Err(Error::corrupt(
                    "node",
                    0,
                    format!("block {b} holds no buffer"),
                ));
            };
            if buf.is_empty() {
                continue;
            }
            let rel = relative(entry, *b, key)?;
            if !buf.has_ranges() {
                let w = &mut self.windows[n];
                let listed = match w.as_mut().map(|w| w.ask(rel)) {
                    Some(Listed::Has(x)) => Listed::Has(x),
                    _ => w.insert(Window::fill(buf, *b, rel)).ask(rel),
                };
                match listed {
                    Listed::Has(Some(Some(found))) => return Ok(found),
                    Listed::Has(_) => continue,
                    // Not after a fill from `rel`; the lookup below answers.
                    Listed::Beyond => {}
                }
            }
            if let Some(found) = in_buffer(buf, *b, rel) {
                return Ok(found);
            }
        }
        let (b, entry) = &self.leaf;
        let rel = relative(entry, *b, key)?;
        let i = entry.node.part_index_near(rel, self.hint.0);
        if i != self.hint.0 {
            self.hint = (i, 0);
        }
        match st.part(env, *b, entry, i)? {
            Part::Basement(bm) => Ok(in_leaf(bm.contains_from(rel, &mut self.hint.1), *b)),
            Part::Buffer(_) => Err(Error::corrupt(
                "node",
                0,
                format!("leaf {b} holds a buffer"),
            )),
        }
    }
}

/// The first pass's answers by insert `(lsn, op)`, sorted before the
/// locked pass takes the lock. The locked pass asks in the same order the
/// pending inserts are listed, which is the order the first pass answered
/// in, so a cursor finds nearly every answer where the last one ended (a
/// hash map of one entry per insert cost a tenth of a sequential stream's
/// profile).
#[derive(Default)]
pub(crate) struct Prepared(Vec<((u64, u32), (BlockNum, u64))>);

impl Prepared {
    pub fn new(found: &[Found]) -> Prepared {
        let mut answers: Vec<_> = found
            .iter()
            .map(|f| ((f.lsn, f.op), (f.block, f.version)))
            .collect();
        // Stable: of two answers for one insert (the pending list shifted
        // between two rounds of the first pass), the later one is kept.
        answers.sort_by_key(|a| a.0);
        answers.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                *kept = *later;
            }
            same
        });
        Prepared(answers)
    }

    /// The answer for insert `key`, looking first at `*cursor` and leaving
    /// it after the answer.
    fn get(&self, key: (u64, u32), cursor: &mut usize) -> Option<(BlockNum, u64)> {
        if self.0.get(*cursor).is_none_or(|a| a.0 != key) {
            *cursor = self.0.partition_point(|a| a.0 < key);
        }
        let &(found, answer) = self.0.get(*cursor)?;
        if found != key {
            return None;
        }
        *cursor += 1;
        Some(answer)
    }
}

/// Which pending inserts a binding pass binds.
#[derive(Clone, Copy)]
pub(crate) enum Which<'a> {
    /// Every one (before a log flush: no unbound record may become
    /// durable).
    All,
    /// Those whose keys the predicate accepts (before a range move, the
    /// ones under its prefixes).
    Keys(&'a dyn Fn(&[u8]) -> bool),
    /// Those whose nodes the unlocked first pass found and wrote and that
    /// have not changed since: binding them needs no lookup and no node
    /// write, so the locked pass is short. Back-pressure binds these; the
    /// rest wait for the next pass.
    Prepared,
}

/// An answer of the first pass: the unbound insert `(lsn, op)` has its
/// value in `block`, whose cache entry then had `version`.
pub(crate) struct Found {
    lsn: u64,
    op: u32,
    pub block: BlockNum,
    version: u64,
}

impl State {
    /// The node holding the newest whole value of `key` (the first insert
    /// or delete on the way down, else the leaf).
    fn locate_value(&self, env: Env<'_>, key: &[u8]) -> Result<Located> {
        let mut b = self.root;
        loop {
            let entry = self.node_for_read(env, b)?;
            let rel = relative(&entry, b, key)?;
            let i = entry.node.part_index(rel);
            match self.part(env, b, &entry, i)? {
                Part::Basement(bm) => return Ok(in_leaf(bm.get(rel).is_some(), b)),
                Part::Buffer(buf) => {
                    if let Some(found) = in_buffer(buf, b, rel) {
                        return Ok(found);
                    }
                }
            }
            b = entry.node.children[i].child;
        }
    }

    /// Finds the nodes holding the values of unbound inserts `from..` (a
    /// first pass under the read lock; see [`Located`] for why its answers
    /// stay good while the node's entry is unchanged).
    ///
    /// The inserts of a stream come in key order, most of them into the
    /// leaf of the one before: the path to a leaf is kept and reused for
    /// every key inside the leaf's bounds (the same nodes and children
    /// all the way down; under the read lock the tree's shape cannot
    /// change), so such a key costs a look into each buffer on the path
    /// (nothing for an empty one) and into the leaf, not a descent through
    /// the cache. A sequential insert stream spent more than half its time
    /// in those descents.
    pub fn locate_unbound(&self, env: Env<'_>, from: usize, n: usize) -> Result<Vec<Found>> {
        let mut out = Vec::new();
        let mut kept: Option<LeafPath> = None;
        let mut last_version: Option<(BlockNum, Option<u64>)> = None;
        for u in self.unbound.iter().skip(from).take(n) {
            let path = match kept.take() {
                Some(p) if p.covers(&u.key) => kept.insert(p),
                _ => kept.insert(self.leaf_path(env, &u.key)?),
            };
            if let Located::Node(b) = path.locate(self, env, &u.key)? {
                let version = match last_version {
                    Some((at, v)) if at == b => v,
                    _ => {
                        let v = self.cache.version(b).map(|(v, _)| v);
                        last_version = Some((b, v));
                        v
                    }
                };
                if let Some(version) = version {
                    out.push(Found {
                        lsn: u.lsn,
                        op: u.op,
                        block: b,
                        version,
                    });
                }
            }
        }
        Ok(out)
    }

    /// The path to the leaf whose bounds hold `key`, each internal node's
    /// buffer for the child taken loaded.
    pub(super) fn leaf_path(&self, env: Env<'_>, key: &[u8]) -> Result<LeafPath> {
        let mut levels = Vec::new();
        let mut bounds = Bounds::all();
        let mut b = self.root;
        loop {
            let entry = self.node_for_read(env, b)?;
            let rel = relative(&entry, b, key)?;
            if entry.node.is_leaf() {
                return Ok(LeafPath {
                    windows: levels.iter().map(|_| None).collect(),
                    levels,
                    leaf: (b, entry),
                    bounds,
                    hint: (0, 0),
                });
            }
            let i = entry.node.part_index(rel);
            self.part(env, b, &entry, i)?;
            bounds = child_bounds(&entry.node, &bounds, i);
            let child = entry.node.children[i].child;
            levels.push((b, entry, i));
            b = child;
        }
    }

    /// The leaf whose range holds `key` and its bounds, without reading
    /// the leaf itself: a read-ahead decides how to read it (whole, in one
    /// read) instead of the descent reading its header first.
    pub(super) fn leaf_for(&self, env: Env<'_>, key: &[u8]) -> Result<(BlockNum, Bounds)> {
        let mut bounds = Bounds::all();
        let mut b = self.root;
        loop {
            let entry = self.node_for_read(env, b)?;
            if entry.node.is_leaf() {
                return Ok((b, bounds));
            }
            let rel = relative(&entry, b, key)?;
            let i = entry.node.part_index(rel);
            bounds = child_bounds(&entry.node, &bounds, i);
            let child = entry.node.children[i].child;
            if entry.node.height == 1 {
                return Ok((child, bounds));
            }
            b = child;
        }
    }

    /// Binds pending unbound inserts (`which` of them): writes the nodes
    /// that hold them (redirect-on-write, left cached and clean) and
    /// returns the binding entries to log. `prepared` holds answers of
    /// [`State::locate_unbound`] whose nodes were written since: an insert
    /// whose node still has the same version, now clean, is bound to it
    /// without looking again.
    ///
    /// The inserts not bound stay pending, in order (a binding record may
    /// name any subset: recovery matches bindings to inserts by LSN and
    /// op).
    pub fn bind_pending(
        &mut self,
        env: Env<'_>,
        bind_lsn: u64,
        prepared: &Prepared,
        which: Which<'_>,
    ) -> Result<Vec<Binding>> {
        // The last answer: a stream's inserts come in runs prepared on one
        // node version, and nothing here changes the cache.
        let mut last: Option<((BlockNum, u64), bool)> = None;
        let mut cursor = 0;
        let mut good = |st: &State, u: &Unbound| {
            let (block, version) = prepared.get((u.lsn, u.op), &mut cursor)?;
            let unchanged = match last {
                Some((asked, unchanged)) if asked == (block, version) => unchanged,
                _ => {
                    let unchanged = st.cache.version(block) == Some((version, false))
                        && !st.writing.contains(&block);
                    last = Some(((block, version), unchanged));
                    unchanged
                }
            };
            unchanged.then_some(block)
        };
        // Each insert is checked against its prepared answer once: that
        // check both picks the inserts to bind and locates them.
        let all = self.unbound.take_all();
        let mut pending = Vec::with_capacity(all.len());
        for u in all {
            let at = good(self, &u);
            let bind = match which {
                Which::All => true,
                Which::Keys(accepts) => accepts(&u.key),
                Which::Prepared => at.is_some(),
            };
            if bind {
                pending.push((u, at));
            } else {
                self.unbound.push(u);
            }
        }
        let mut out = Vec::with_capacity(pending.len());
        let mut written: std::collections::HashMap<BlockNum, crate::table::Extent> =
            Default::default();
        env.dev.annotate("bind.nodes");
        for (u, at) in pending {
            let located = match at {
                Some(block) => Located::Node(block),
                None => self.locate_value(env, &u.key)?,
            };
            let target = match located {
                Located::Obsolete => Target::Obsolete,
                Located::Node(b) => {
                    let x = match written.get(&b) {
                        Some(x) => *x,
                        None => {
                            let x = self.make_durable_in_place(env, b)?;
                            written.insert(b, x);
                            self.table.bind(x.offset, bind_lsn);
                            x
                        }
                    };
                    Target::Node {
                        block: b,
                        offset: x.offset,
                        len: x.len,
                        header_len: x.header_len,
                        header_crc: x.header_crc,
                    }
                }
            };
            out.push(Binding {
                lsn: u.lsn,
                op: u.op,
                target,
            });
        }
        Ok(out)
    }

    /// Ensures node `b`'s current extent holds its current contents (it
    /// will be durable after the next device sync), writing it if dirty or
    /// if a checkpoint has not written it yet.
    fn make_durable_in_place(&mut self, env: Env<'_>, b: BlockNum) -> Result<crate::table::Extent> {
        let dirty = self.cache.get(b).is_some_and(|e| e.dirty);
        let unwritten = self.writing.contains(&b);
        if dirty || unwritten {
            // A clean node stays fully loaded in the cache, so its
            // partitions' places are not needed again.
            let (node, _) = self.take_full(env, b)?;
            if let Err(e) = self.write_node(env, b, &node) {
                // Kept, dirty: the poisoned store must stay readable.
                self.put_clean(b, node, true);
                return Err(e);
            }
            self.writing.remove(&b);
            self.put_clean(b, node, false);
        }
        self.table.get(b).and_then(|e| e.loc).ok_or_else(|| {
            Error::corrupt(
                "block pointer",
                0,
                format!("block {b} has no place after binding"),
            )
        })
    }
}

/// Recovery: the value of `key` in the node a binding names, read straight
/// from the extent the binding recorded (verified against the binding's
/// header checksum).
pub(crate) fn read_bound_value(env: Env<'_>, target: &Target, key: &[u8]) -> Result<Vec<u8>> {
    let Target::Node {
        block,
        offset,
        len,
        header_len,
        header_crc,
    } = *target
    else {
        return Err(Error::InvalidArgument(
            "an obsolete binding has no value".into(),
        ));
    };
    let bad = |d: String| Error::corrupt("bound node", offset, format!("block {block}: {d}"));
    let mut head = vec![0u8; header_len as usize];
    env.read(offset, &mut head)?;
    if crate::format::checksum(&head[..head.len().saturating_sub(4)]) != header_crc {
        return Err(bad("header checksum does not match the binding".into()));
    }
    let node = crate::format::node::decode_header(&head, block, len).map_err(bad)?;
    let rel = key
        .strip_prefix(node.prefix.as_slice())
        .ok_or_else(|| bad("key outside the node's frame".into()))?;
    let i = node.part_index(rel);
    let loc = node.parts[i]
        .disk
        .ok_or_else(|| bad("partition without a place".into()))?;
    let mut stored = vec![0u8; loc.stored_len as usize];
    env.read(offset + u64::from(loc.offset), &mut stored)?;
    match crate::format::node::decode_part(stored, &loc, &node, i).map_err(bad)? {
        Part::Basement(bm) => bm
            .get(rel)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| bad("bound key missing".into())),
        Part::Buffer(buf) => match buf.lookup(rel).1.first().map(|m| &m.op) {
            Some(PointOp::Insert(v)) => Ok(v.clone()),
            _ => Err(bad("bound key has no whole value".into())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A window answers every key as a lookup in the buffer does
        /// ([`in_buffer`]), refilled from the key where it does not reach
        /// it (as `LeafPath::locate` does), for keys asked in order (a
        /// stream's) and in any order, open and frozen buffers alike.
        #[test]
        fn a_window_answers_as_a_lookup_does(
            msgs in prop::collection::vec((0u16..3000, 0u8..3), 0..1500),
            mut probes in prop::collection::vec(0u16..3100, 1..400),
            sorted in any::<bool>(),
        ) {
            let key = |k: u16| k.to_be_bytes().to_vec();
            let mut open = MsgBuffer::default();
            for (msn, (k, kind)) in msgs.into_iter().enumerate() {
                let op = match kind {
                    0 => PointOp::Insert(vec![1; 3]),
                    1 => PointOp::Delete,
                    _ => PointOp::Patch { offset: 1, data: vec![2] },
                };
                open.put_point(key(k), PointMsg { msn: msn as u64 + 1, op });
            }
            if sorted {
                probes.sort_unstable();
            }
            for buf in [open.frozen_copy(), open] {
                let mut window: Option<Window> = None;
                for &p in &probes {
                    let rel = key(p);
                    let listed = match window.as_mut().map(|w| w.ask(&rel)) {
                        Some(Listed::Has(x)) => x,
                        _ => match window.insert(Window::fill(&buf, 7, &rel)).ask(&rel) {
                            Listed::Has(x) => x,
                            Listed::Beyond => panic!("a window reaches the key it starts at"),
                        },
                    };
                    let want = in_buffer(&buf, 7, &rel);
                    prop_assert_eq!(
                        format!("{:?}", listed.flatten()),
                        format!("{want:?}"),
                        "key {}", p
                    );
                }
            }
        }
    }

    fn found(lsn: u64, op: u32, block: BlockNum) -> Found {
        Found {
            lsn,
            op,
            block,
            version: lsn,
        }
    }

    /// Answers found in any order, one insert answered twice: asked in
    /// order, out of order or for an insert nobody answered, the cursor
    /// gives what a map would.
    #[test]
    fn prepared_answers_as_a_map_would() {
        let prepared = Prepared::new(&[
            found(10, 0, 1),
            found(10, 1, 1),
            found(30, 0, 3),
            found(20, 0, 2),
            found(10, 1, 9),
        ]);
        let mut cursor = 0;
        let mut ask = |lsn, op| prepared.get((lsn, op), &mut cursor).map(|a| a.0);
        assert_eq!(ask(10, 0), Some(1));
        assert_eq!(ask(10, 1), Some(9), "the later answer");
        assert_eq!(ask(15, 0), None);
        assert_eq!(ask(20, 0), Some(2));
        assert_eq!(ask(10, 0), Some(1), "asked again, behind the cursor");
        assert_eq!(ask(30, 0), Some(3));
        assert_eq!(ask(31, 0), None);
    }
}
