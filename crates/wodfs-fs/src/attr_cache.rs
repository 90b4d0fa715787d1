//! A cache of decoded attribute records, in front of the tree's point
//! lookups.
//!
//! Most namespace operations read the same few records again and again:
//! an unlink reads its directory (which the kernel has just asked for with
//! GETATTR, because the previous unlink invalidated it) and writes it back
//! with new times; a create reads its directory and looks for the new
//! name. Each read is a root-to-leaf descent through buffers of long
//! keys, a few microseconds; this cache answers it from one map.
//!
//! It holds attribute keys only (the `Meta` and `InodeMeta` spaces), both
//! found (`Some`) and missing (`None`, so a create's check for the new
//! name is free the next time).
//!
//! Coherence: every batch the file system writes passes through
//! [`AttrCache::plan`] before and [`AttrCache::apply`] after the tree has
//! taken it, which sets the records the batch inserts or deletes and
//! forgets every cached key a range delete or range move reaches. A lookup
//! that missed fills the cache only if no batch was applied since it
//! started ([`AttrCache::generation`]): otherwise the value it read from
//! the tree may be older than one the batch just cached. A failed batch
//! clears the cache, since the tree may or may not hold it.

use std::collections::HashMap;

use parking_lot::Mutex;
use wodfs_engine::{Op, SeededState};
use wodfs_schema::key_codec::Space;

use crate::attr::Attr;

/// Records kept before the cache starts over. About 200 bytes each (key,
/// record and map slot): a bounded 3 MiB beside the node cache.
const CAPACITY: usize = 16_384;

/// Records above which a range delete or move that reaches attribute keys
/// (a directory renamed or removed with its subtree: rare) empties the
/// cache instead of visiting every record for the few it reaches.
const FORGET_BY_VISIT_MAX: usize = 1_024;

/// Tag bytes of the key spaces that hold attribute records.
const ATTR_TAGS: [u8; 2] = [Space::Meta.tag(), Space::InodeMeta.tag()];

/// True for keys whose values are attribute records.
fn is_attr_key(key: &[u8]) -> bool {
    key.first().is_some_and(|t| ATTR_TAGS.contains(t))
}

/// True if `[lo, hi)` may hold an attribute key. Most range deletes do
/// not (an unlink's are over the file's blocks and xattrs), and planning
/// nothing for them keeps the cache's lock off those batches.
fn range_may_hold_attr_keys(lo: &[u8], hi: &[u8]) -> bool {
    ATTR_TAGS
        .iter()
        .any(|&t| lo.first().is_none_or(|&l| l <= t) && hi > &[t][..])
}

/// True if keys under `prefix` may be attribute keys.
fn prefix_may_hold_attr_keys(prefix: &[u8]) -> bool {
    prefix.first().is_none_or(|t| ATTR_TAGS.contains(t))
}

/// Hashed, not ordered: a lookup of a random file among many (TableFS's
/// cold queries over a million names) missed the cache and then spent
/// as long in a `BTreeMap`'s search and insert, comparing long path keys
/// in nodes out of the CPU's cache, as in the tree's own descent. Only
/// range forgets want order, and they are rare.
#[derive(Debug, Default)]
struct Inner {
    /// Bumped by every applied batch.
    generation: u64,
    map: HashMap<Vec<u8>, Option<Attr>, SeededState>,
}

impl Inner {
    fn put(&mut self, key: Vec<u8>, value: Option<Attr>) {
        if self.map.len() >= CAPACITY && !self.map.contains_key(&key) {
            // Starting over is cheaper than tracking recency, and the hot
            // records (the directories being worked in) come back at once.
            self.map.clear();
        }
        self.map.insert(key, value);
    }

    /// Applies a patch to a cached record as the tree applies it to the
    /// stored one: bytes written at `offset`, a gap zero-filled.
    fn patch(&mut self, key: Vec<u8>, offset: u32, data: &[u8]) {
        let Some(cached) = self.map.get_mut(&key) else {
            return;
        };
        let patched = cached.as_ref().and_then(|attr| {
            let mut bytes = attr.encode();
            let start = offset as usize;
            let end = start + data.len();
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[start..end].copy_from_slice(data);
            Attr::decode(&bytes).ok()
        });
        match patched {
            Some(attr) => *cached = Some(attr),
            None => {
                self.map.remove(&key);
            }
        }
    }

    /// Forgets the keys from `start` on for which `reached` holds (all of
    /// them, past [`FORGET_BY_VISIT_MAX`] records).
    fn forget_from(&mut self, start: &[u8], reached: impl Fn(&[u8]) -> bool) {
        if self.map.len() > FORGET_BY_VISIT_MAX {
            self.map.clear();
        } else {
            self.map.retain(|k, _| k.as_slice() < start || !reached(k));
        }
    }
}

/// What one batch does to attribute records, taken from its ops before
/// the tree consumes them.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    changes: Vec<Change>,
}

#[derive(Debug)]
enum Change {
    /// The record is now this (`None`: deleted), or could not be decoded
    /// (`Err`: forget it).
    Set(Vec<u8>, Result<Option<Attr>, ()>),
    /// Bytes written into the record's encoding (the file system patches
    /// the fields that changed rather than rewriting the record).
    Patch(Vec<u8>, u32, Vec<u8>),
    ForgetRange(Vec<u8>, Vec<u8>),
    ForgetPrefix(Vec<u8>),
}

/// The answer of [`AttrCache::get`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Cached: the record, or `None` if the key is known missing.
    Hit(Option<Attr>),
    /// Not cached; read the tree, then fill with this generation.
    Miss { generation: u64 },
}

/// Decoded attribute records by key. `Send + Sync`.
#[derive(Debug, Default)]
pub(crate) struct AttrCache {
    inner: Mutex<Inner>,
}

impl AttrCache {
    /// The cached record of `key`, or the generation a lookup in the tree
    /// must pass to [`AttrCache::fill`].
    pub fn get(&self, key: &[u8]) -> Lookup {
        let inner = self.inner.lock();
        match inner.map.get(key) {
            Some(attr) => Lookup::Hit(attr.clone()),
            None => Lookup::Miss {
                generation: inner.generation,
            },
        }
    }

    /// Taken before a scan whose records go to [`AttrCache::fill`].
    pub fn generation(&self) -> u64 {
        self.inner.lock().generation
    }

    /// Caches what a lookup or a scan (a directory listing: the names
    /// listed are usually acted on next) started at `generation` read,
    /// unless a batch was applied since.
    pub fn fill(
        &self,
        generation: u64,
        records: impl IntoIterator<Item = (Vec<u8>, Option<Attr>)>,
    ) {
        let mut inner = self.inner.lock();
        if inner.generation != generation {
            return;
        }
        for (key, attr) in records {
            if is_attr_key(&key) {
                inner.put(key, attr);
            }
        }
    }

    /// What `ops` will do to cached records.
    pub fn plan(ops: &[Op]) -> Plan {
        let mut changes = Vec::new();
        for op in ops {
            match op {
                Op::Insert { key, value } if is_attr_key(key) => {
                    let attr = Attr::decode(value).map(Some).map_err(|_| ());
                    changes.push(Change::Set(key.clone(), attr));
                }
                Op::Delete { key } if is_attr_key(key) => {
                    changes.push(Change::Set(key.clone(), Ok(None)));
                }
                Op::Patch { key, offset, data } if is_attr_key(key) => {
                    changes.push(Change::Patch(key.clone(), *offset, data.clone()));
                }
                Op::Truncate { key, .. } if is_attr_key(key) => {
                    changes.push(Change::Set(key.clone(), Err(())));
                }
                Op::DeleteRange { lo, hi } if range_may_hold_attr_keys(lo, hi) => {
                    changes.push(Change::ForgetRange(lo.clone(), hi.clone()));
                }
                Op::RangeMove { from, to } => {
                    for prefix in [from, to] {
                        if prefix_may_hold_attr_keys(prefix) {
                            changes.push(Change::ForgetPrefix(prefix.clone()));
                        }
                    }
                }
                _ => {}
            }
        }
        Plan { changes }
    }

    /// Brings the cache up to date with a batch the tree has taken (`ok`)
    /// or may have taken in part (`!ok`: the cache starts over). A batch
    /// taken that touches no attribute key (a data write) changes nothing
    /// here and leaves the generation alone.
    pub fn apply(&self, plan: Plan, ok: bool) {
        if ok && plan.changes.is_empty() {
            return;
        }
        let mut inner = self.inner.lock();
        inner.generation += 1;
        if !ok {
            inner.map.clear();
            return;
        }
        for change in plan.changes {
            match change {
                Change::Set(key, Ok(value)) => inner.put(key, value),
                Change::Set(key, Err(())) => {
                    inner.map.remove(&key);
                }
                Change::Patch(key, offset, data) => inner.patch(key, offset, &data),
                Change::ForgetRange(lo, hi) => inner.forget_from(&lo, |k| k < hi.as_slice()),
                Change::ForgetPrefix(prefix) => {
                    inner.forget_from(&prefix, |k| k.starts_with(&prefix))
                }
            }
        }
    }

    /// Every cached record, for checking them against the tree.
    pub fn snapshot(&self) -> Vec<(Vec<u8>, Option<Attr>)> {
        let inner = self.inner.lock();
        inner
            .map
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Forgets everything (a batch written around the cache).
    pub fn clear(&self) {
        let mut inner = self.inner.lock();
        inner.generation += 1;
        inner.map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::{Kind, Timespec};
    use wodfs_schema::key_codec::{inode_meta_key, meta_key};
    use wodfs_schema::FsPath;

    fn generation(c: &AttrCache) -> u64 {
        c.generation()
    }

    fn hit(c: &AttrCache, key: &[u8]) -> Option<Option<Attr>> {
        match c.get(key) {
            Lookup::Hit(a) => Some(a),
            Lookup::Miss { .. } => None,
        }
    }

    fn attr(ino: u64) -> Attr {
        Attr::new(ino, Kind::File, 0o644, 0, 0, Timespec::default())
    }

    fn key(p: &str) -> Vec<u8> {
        meta_key(&FsPath::parse(p.as_bytes()).unwrap())
    }

    #[test]
    fn a_batch_sets_inserted_and_deleted_records() {
        let c = AttrCache::default();
        let ops = [
            Op::Insert {
                key: key("/a"),
                value: attr(7).encode(),
            },
            Op::Delete { key: key("/b") },
        ];
        c.apply(AttrCache::plan(&ops), true);
        assert_eq!(hit(&c, &key("/a")), Some(Some(attr(7))));
        assert_eq!(hit(&c, &key("/b")), Some(None));
        assert_eq!(hit(&c, &key("/c")), None);
    }

    #[test]
    fn a_patch_changes_the_cached_record_as_it_changes_the_stored_one() {
        let c = AttrCache::default();
        let old = attr(3);
        c.fill(generation(&c), [(key("/a"), Some(old.clone()))]);
        let mut new = old.clone();
        new.size = 123_456;
        new.mtime = Timespec { sec: 99, nsec: 5 };
        let mut ops = Vec::new();
        crate::fs::update_attr(
            &crate::loc::Loc::Path(FsPath::parse(b"/a").unwrap()),
            &old,
            &new,
            &mut ops,
        );
        assert!(
            ops.iter().all(|op| matches!(op, Op::Patch { .. })),
            "{ops:?}"
        );
        c.apply(AttrCache::plan(&ops), true);
        assert_eq!(hit(&c, &key("/a")), Some(Some(new)));
        // A patch of a record known missing leaves nothing cached.
        c.fill(generation(&c), [(key("/b"), None)]);
        let patch = [Op::Patch {
            key: key("/b"),
            offset: 0,
            data: vec![1],
        }];
        c.apply(AttrCache::plan(&patch), true);
        assert_eq!(hit(&c, &key("/b")), None);
    }

    #[test]
    fn ranges_and_moves_forget_what_they_reach() {
        let c = AttrCache::default();
        for (i, p) in ["/d", "/d/x", "/d/y", "/e", "/f/z"].iter().enumerate() {
            c.fill(generation(&c), [(key(p), Some(attr(i as u64)))]);
        }
        c.fill(generation(&c), [(inode_meta_key(9), Some(attr(9)))]);
        let children = wodfs_schema::key_codec::children_range(
            wodfs_schema::key_codec::PathSpace::Meta,
            &FsPath::parse(b"/d").unwrap(),
        );
        let ops = [
            Op::DeleteRange {
                lo: children.start,
                hi: children.end,
            },
            Op::RangeMove {
                from: key("/f/z"),
                to: key("/e"),
            },
        ];
        c.apply(AttrCache::plan(&ops), true);
        assert!(hit(&c, &key("/d")).is_some());
        assert_eq!(hit(&c, &key("/d/x")), None);
        assert_eq!(hit(&c, &key("/d/y")), None);
        assert_eq!(hit(&c, &key("/e")), None);
        assert_eq!(hit(&c, &key("/f/z")), None);
        assert!(hit(&c, &inode_meta_key(9)).is_some());
    }

    #[test]
    fn an_unlinks_range_deletes_plan_nothing() {
        use wodfs_schema::key_codec::{entry_range, PathSpace};
        let path = FsPath::parse(b"/d/f").unwrap();
        for space in [PathSpace::Data, PathSpace::Xattr] {
            let r = entry_range(space, &path);
            let op = Op::DeleteRange {
                lo: r.start,
                hi: r.end,
            };
            assert!(AttrCache::plan(&[op]).changes.is_empty(), "{space:?}");
        }
        let r = entry_range(PathSpace::Meta, &path);
        let op = Op::DeleteRange {
            lo: r.start,
            hi: r.end,
        };
        assert_eq!(AttrCache::plan(&[op]).changes.len(), 1);
        let everything = Op::DeleteRange {
            lo: vec![],
            hi: vec![0xff],
        };
        assert_eq!(AttrCache::plan(&[everything]).changes.len(), 1);
    }

    #[test]
    fn a_lookup_that_raced_a_batch_does_not_fill() {
        let c = AttrCache::default();
        let before = generation(&c);
        let ops = [Op::Insert {
            key: key("/a"),
            value: attr(2).encode(),
        }];
        c.apply(AttrCache::plan(&ops), true);
        // The lookup read the tree before the batch: its value is stale.
        c.fill(before, [(key("/a"), Some(attr(1)))]);
        assert_eq!(hit(&c, &key("/a")), Some(Some(attr(2))));
    }

    #[test]
    fn a_failed_batch_clears_everything_and_only_attribute_keys_fill() {
        let c = AttrCache::default();
        c.fill(generation(&c), [(key("/a"), Some(attr(1)))]);
        c.fill(generation(&c), [(b"\x12data".to_vec(), None)]);
        assert_eq!(hit(&c, b"\x12data"), None);
        c.apply(Plan::default(), false);
        assert_eq!(hit(&c, &key("/a")), None);
    }

    #[test]
    fn the_cache_starts_over_when_full() {
        let c = AttrCache::default();
        for i in 0..CAPACITY as u64 + 1 {
            c.fill(generation(&c), [(inode_meta_key(i), Some(attr(i)))]);
        }
        assert!(c.inner.lock().map.len() <= CAPACITY);
        assert!(hit(&c, &inode_meta_key(CAPACITY as u64)).is_some());
    }

    /// Past `FORGET_BY_VISIT_MAX` records a range forget empties the
    /// cache; below it, it forgets just what the range reaches.
    #[test]
    fn a_range_forget_in_a_large_cache_starts_over() {
        // `records` and "/e/x".
        for records in [FORGET_BY_VISIT_MAX - 1, FORGET_BY_VISIT_MAX] {
            let c = AttrCache::default();
            for i in 0..records {
                c.fill(
                    generation(&c),
                    [(key(&format!("/d{i}")), Some(attr(i as u64)))],
                );
            }
            c.fill(generation(&c), [(key("/e/x"), Some(attr(0)))]);
            let children = wodfs_schema::key_codec::children_range(
                wodfs_schema::key_codec::PathSpace::Meta,
                &FsPath::parse(b"/e").unwrap(),
            );
            let op = Op::DeleteRange {
                lo: children.start,
                hi: children.end,
            };
            c.apply(AttrCache::plan(&[op]), true);
            assert_eq!(hit(&c, &key("/e/x")), None);
            let kept = hit(&c, &key("/d0")).is_some();
            assert_eq!(kept, records < FORGET_BY_VISIT_MAX, "{records} records");
        }
    }
}
