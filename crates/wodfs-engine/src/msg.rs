//! Messages: the updates that travel down the tree in buffers.
//!
//! Every message carries a message sequence number (MSN), assigned in
//! commit order. For one key, messages higher in the tree are always newer
//! than messages lower down, and inside one buffer a key's point messages
//! are newer than the range delete covering it (older ones are discarded
//! when the range delete arrives: "Pac-Man"). Queries therefore apply, from
//! the leaf up: the leaf value, then per buffer the covering range delete
//! and the point messages.

/// Message sequence number: the commit order of a message.
pub type Msn = u64;

/// Persistent message kind numbers (never renumber).
pub(crate) mod kind {
    pub const INSERT: u8 = 1;
    pub const DELETE: u8 = 2;
    pub const PATCH: u8 = 3;
    pub const TRUNCATE: u8 = 4;
}

/// An update to one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PointOp {
    /// Set the value.
    Insert(Vec<u8>),
    /// Remove the key.
    Delete,
    /// Write `data` at `offset` inside the value without reading it. A
    /// missing value reads as empty; the gap up to `offset` is zero-filled
    /// and the value grows to at least `offset + data.len()`.
    Patch {
        /// Byte offset inside the value.
        offset: u32,
        /// Bytes to write.
        data: Vec<u8>,
    },
    /// Shorten the value to at most `len` bytes. A missing value stays
    /// missing; a shorter value is unchanged.
    Truncate {
        /// The new maximum length.
        len: u32,
    },
}

impl PointOp {
    /// Applies this operation to a value.
    pub fn apply(&self, value: Option<Vec<u8>>) -> Option<Vec<u8>> {
        match self {
            PointOp::Insert(v) => Some(v.clone()),
            PointOp::Delete => None,
            PointOp::Patch { offset, data } => {
                let mut v = value.unwrap_or_default();
                let start = *offset as usize;
                let end = start + data.len();
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[start..end].copy_from_slice(data);
                Some(v)
            }
            PointOp::Truncate { len } => value.map(|mut v| {
                v.truncate(*len as usize);
                v
            }),
        }
    }

    /// True if the result does not depend on the previous value.
    pub fn is_blind_total(&self) -> bool {
        matches!(self, PointOp::Insert(_) | PointOp::Delete)
    }

    /// Approximate encoded size, for buffer accounting.
    pub fn encoded_bytes(&self) -> usize {
        match self {
            PointOp::Insert(v) => 1 + 3 + v.len(),
            PointOp::Delete => 1,
            PointOp::Patch { data, .. } => 1 + 5 + 3 + data.len(),
            PointOp::Truncate { .. } => 1 + 5,
        }
    }
}

/// A point message: an operation and its MSN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointMsg {
    /// Commit order.
    pub msn: Msn,
    /// The update.
    pub op: PointOp,
}

impl PointMsg {
    /// Bytes this message costs in a buffer besides its key.
    pub fn encoded_bytes(&self) -> usize {
        8 + self.op.encoded_bytes()
    }
}

/// Applies a key's messages, oldest first, to a base value.
pub fn apply_all(mut value: Option<Vec<u8>>, msgs: &[PointMsg]) -> Option<Vec<u8>> {
    for m in msgs {
        value = m.op.apply(value);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_of_missing_value_reads_as_zeros() {
        let op = PointOp::Patch {
            offset: 3,
            data: vec![7, 8],
        };
        assert_eq!(op.apply(None), Some(vec![0, 0, 0, 7, 8]));
        assert_eq!(
            op.apply(Some(vec![1; 8])),
            Some(vec![1, 1, 1, 7, 8, 1, 1, 1])
        );
    }

    #[test]
    fn truncate_only_shortens_and_keeps_missing_missing() {
        let op = PointOp::Truncate { len: 2 };
        assert_eq!(op.apply(None), None);
        assert_eq!(op.apply(Some(vec![1, 2, 3])), Some(vec![1, 2]));
        assert_eq!(op.apply(Some(vec![1])), Some(vec![1]));
    }
}
