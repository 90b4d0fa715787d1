//! Read-ahead for flushes: the children a flush is about to take out of
//! the cache, read whole on a thread of their own while the writer works.
//!
//! Under random inserts into data larger than the cache, nearly every
//! flush out of a height-1 node reads a leaf that is not cached (454 leaf
//! reads in 454 flushes of engine-compare's random-insert phase), and the
//! writer read it itself, holding the state's write lock: reading and
//! decoding a leaf of a few MiB was a seventh of the writer's time, and
//! its waits for the device most of the rest of its idle time. The writer
//! knows which children it will flush before it flushes them (the fullest
//! buffers first, `flush_while_over`), so it names them here and a thread
//! reads them meanwhile; the writer then takes the leaf from here, or
//! waits for the read already under way instead of starting another.
//!
//! The thread takes no lock of the tree: the writer hands it the node's
//! extent from the block table, and the node read is handed over only if
//! the table still gives that extent when the writer takes it. An extent,
//! with its header checksum, names one image (the header holds every
//! partition's checksum), so the node read is the node the writer would
//! have read. Anything else (another extent, a failed read) is dropped and
//! the writer reads the node itself, meeting any error on its own path.
//!
//! Memory: at most [`QUEUED_MAX`] reads waiting or under way and
//! [`READY_MAX`] nodes read and not yet taken, outside the cache's
//! budget; a node not taken is dropped when a newer one needs its place.

use std::collections::VecDeque;

use parking_lot::{Condvar, Mutex};

use super::state::{read_whole_at, Env, WholeRead};
use crate::node::Node;
use crate::table::{BlockNum, Extent};

/// Reads asked for and not yet started or finished, at most: the flushes
/// one node's buffers cause (1-6 in engine-compare's random inserts).
const QUEUED_MAX: usize = 4;

/// Nodes read and not yet taken, at most.
const READY_MAX: usize = 3;

/// A node to read: where the block table put it when it was asked for.
#[derive(Clone, Copy, Debug)]
struct Job {
    b: BlockNum,
    height: u8,
    extent: Extent,
}

#[derive(Debug, Default)]
struct Inner {
    /// A thread runs and takes jobs; cleared to stop it.
    running: bool,
    queue: VecDeque<Job>,
    /// Being read now.
    busy: Option<BlockNum>,
    /// Read, oldest first.
    ready: VecDeque<(Job, Node)>,
}

impl Inner {
    fn knows(&self, b: BlockNum) -> bool {
        self.busy == Some(b)
            || self.queue.iter().any(|j| j.b == b)
            || self.ready.iter().any(|(j, _)| j.b == b)
    }
}

/// The queue between the writer and the flush read-ahead thread.
#[derive(Debug, Default)]
pub(crate) struct FlushAhead {
    inner: Mutex<Inner>,
    cv: Condvar,
}

impl FlushAhead {
    /// Asks for node `b` (at `extent`, of `height`) to be read, if a
    /// thread runs, the node is not asked for already and the queue has
    /// room; a hint, never waited for. Returns whether it was queued.
    pub fn ask(&self, b: BlockNum, height: u8, extent: Extent) -> bool {
        let mut s = self.inner.lock();
        let waiting = s.queue.len() + usize::from(s.busy.is_some());
        if !s.running || waiting >= QUEUED_MAX || s.knows(b) {
            return false;
        }
        s.queue.push_back(Job { b, height, extent });
        self.cv.notify_all();
        true
    }

    /// A thread runs and takes requests.
    pub fn runs(&self) -> bool {
        self.inner.lock().running
    }

    /// Node `b`, read whole, if the thread read it at `extent` (where the
    /// block table has it now); waits if the thread is reading it. `None`:
    /// the caller reads it. A read asked for and not started is withdrawn.
    pub fn take(&self, b: BlockNum, extent: &Extent) -> Option<Node> {
        let mut s = self.inner.lock();
        s.queue.retain(|j| j.b != b);
        while s.busy == Some(b) {
            self.cv.wait(&mut s);
        }
        let at = s.ready.iter().position(|(j, _)| j.b == b)?;
        let (job, node) = s.ready.remove(at).expect("found just now");
        drop(s);
        (job.extent == *extent).then_some(node)
    }

    /// Takes requests from now on, for a thread about to [`Self::run`].
    pub fn start(&self) {
        self.inner.lock().running = true;
    }

    /// The thread's loop: reads what is asked until [`Self::stop`].
    pub fn run(&self, env: Env<'_>) {
        let mut s = self.inner.lock();
        while s.running {
            let Some(job) = s.queue.pop_front() else {
                self.cv.wait(&mut s);
                continue;
            };
            s.busy = Some(job.b);
            drop(s);
            // A failed read or check is left for the writer, which reads
            // the node again and reports the error on its own path.
            let node = read_whole_at(env, job.b, job.height, &job.extent, WholeRead::Copied).ok();
            s = self.inner.lock();
            s.busy = None;
            if let Some(node) = node {
                if s.ready.len() >= READY_MAX {
                    s.ready.pop_front();
                }
                s.ready.push_back((job, node));
            }
            self.cv.notify_all();
        }
    }

    /// The thread has ended (stopped, or panicked mid-read): nothing is
    /// asked of it, and nobody waits for a read it will not finish.
    pub fn ended(&self) {
        let mut s = self.inner.lock();
        s.running = false;
        s.busy = None;
        s.queue.clear();
        s.ready.clear();
        self.cv.notify_all();
    }

    /// Ends [`Self::run`] once the read under way (if any) is done;
    /// nothing is asked of the thread after this.
    pub fn stop(&self) {
        self.inner.lock().running = false;
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use wodfs_device::MemDevice;

    use super::FlushAhead;
    use crate::tree::{Op, Tree};
    use crate::Config;

    impl FlushAhead {
        fn wait_ready(&self, b: crate::table::BlockNum) {
            let start = Instant::now();
            while !self.inner.lock().ready.iter().any(|(j, _)| j.b == b) {
                assert!(start.elapsed() < Duration::from_secs(60), "never read");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// A node read ahead is handed over only while the block table still
    /// puts it where it was read; a node nobody asked for is not there.
    #[test]
    fn a_node_read_at_another_extent_is_not_handed_over() {
        let tree = Tree::create(Box::new(MemDevice::new(64 << 20)), Config::tiny()).unwrap();
        let ops: Vec<Op> = (0..300u32)
            .map(|k| Op::Insert {
                key: k.to_be_bytes().to_vec(),
                value: vec![7; 40],
            })
            .collect();
        tree.write(&ops).unwrap();
        tree.checkpoint().unwrap();
        let (b, height, x) = {
            let st = tree.shared.state.read();
            let e = st.table.get(st.root).unwrap().clone();
            (st.root, e.height, e.loc.unwrap())
        };
        let moved = crate::table::Extent {
            offset: x.offset + 4096,
            ..x
        };
        let ahead = FlushAhead::default();
        assert!(ahead.take(b, &x).is_none(), "nothing was asked");
        ahead.ask(b, height, x);
        assert!(
            ahead.take(b, &x).is_none(),
            "no thread runs: nothing is read"
        );
        ahead.start();
        std::thread::scope(|s| {
            s.spawn(|| ahead.run(tree.env()));
            ahead.ask(b, height, x);
            ahead.wait_ready(b);
            assert!(ahead.take(b, &moved).is_none(), "read at another extent");
            assert!(ahead.take(b, &x).is_none(), "dropped when refused");
            ahead.ask(b, height, x);
            ahead.wait_ready(b);
            let node = ahead.take(b, &x).expect("read where the table has it");
            assert!(node.is_fully_loaded());
            assert_eq!(node.height, height);
            ahead.stop();
        });
    }
}
