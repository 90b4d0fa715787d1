//! What a directory handle remembers of its listing: the names it handed
//! out, so cookie `3 + i` resumes after name `i` however the directory
//! changed, and where the listing is known to end.

use std::collections::HashMap;

#[derive(Debug, Default)]
pub(super) struct DirHandle {
    /// Cookie `3 + i` resumes after `names[i]`.
    names: Vec<Vec<u8>>,
    /// The cookie each name in `names` got, once a listing started
    /// anywhere but after the last name (a seekdir or a rewinddir). A name
    /// listed again keeps its cookie, so a handle holds each name once: a
    /// program that seeks back and reads in a loop cannot grow it without
    /// bound, and cookies stay in name order for a plain scan. A plain
    /// scan needs no map: each listing continues after the last name, in
    /// key order, so every name it brings is new (hashing and copying each
    /// name was a sixth of a cold `du`'s listing work).
    cookies: Option<HashMap<Vec<u8>, u64>>,
    /// A cookie at which the listing is known to be over: a listing from
    /// it found nothing more and the kernel took every entry before it.
    /// The kernel asks once more at the end of every directory it reads;
    /// that request is answered without reading the tree. Names created
    /// since may be missed there, as POSIX allows for names added after
    /// `opendir` or `rewinddir`.
    end: Option<u64>,
}

impl DirHandle {
    /// Starts a listing from `offset`: the name it resumes after (`None`:
    /// from the first name), or `Err` for a cookie this handle never
    /// gave. A listing from the start (a `rewinddir`) forgets where the
    /// last one ended: names created before the rewind must be listed,
    /// and one after the old last name would be missed there.
    pub fn begin(&mut self, offset: u64) -> Result<Option<Vec<u8>>, ()> {
        match offset {
            0..=2 => {
                self.end = None;
                Ok(None)
            }
            k => self
                .names
                .get((k - 3) as usize)
                .map(|n| Some(n.clone()))
                .ok_or(()),
        }
    }

    /// True if a listing from `after` brings only names this handle has
    /// not given out: it starts after the last one (or at the start of a
    /// handle that gave none).
    pub fn continues(&self, after: Option<&[u8]>) -> bool {
        after == self.names.last().map(Vec::as_slice)
    }

    /// The cookie that resumes after `name`; `new` if the caller knows the
    /// name was not given out yet (see [`DirHandle::continues`]).
    pub fn cookie(&mut self, name: &[u8], new: bool) -> u64 {
        if !(new && self.cookies.is_none()) {
            let names = &self.names;
            let cookies = self.cookies.get_or_insert_with(|| {
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n.clone(), 3 + i as u64))
                    .collect()
            });
            if let Some(&c) = cookies.get(name) {
                return c;
            }
            cookies.insert(name.to_vec(), 3 + self.names.len() as u64);
        }
        self.names.push(name.to_vec());
        3 + self.names.len() as u64 - 1
    }

    /// True if a listing from `offset` is known to find nothing.
    pub fn is_end(&self, offset: u64) -> bool {
        self.end == Some(offset)
    }

    /// Records that a listing found nothing past `cookie`.
    pub fn set_end(&mut self, cookie: u64) {
        self.end = Some(cookie);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forward_scan_numbers_names_in_order_without_a_map() {
        let mut h = DirHandle::default();
        assert!(h.continues(None));
        assert_eq!(h.cookie(b"a", h.continues(None)), 3);
        assert!(h.continues(Some(b"a")));
        assert_eq!(h.cookie(b"b", true), 4);
        assert!(h.cookies.is_none());
        assert_eq!(h.begin(4), Ok(Some(b"b".to_vec())));
        assert_eq!(h.begin(1), Ok(None));
        assert_eq!(h.begin(5), Err(()));
    }

    #[test]
    fn a_listing_again_from_the_start_keeps_each_names_cookie() {
        let mut h = DirHandle::default();
        for n in [&b"a"[..], b"b", b"c"] {
            h.cookie(n, true);
        }
        assert!(!h.continues(None));
        assert!(!h.continues(Some(b"a")));
        assert_eq!(h.cookie(b"a", false), 3);
        assert_eq!(h.cookie(b"b", false), 4);
        assert_eq!(h.cookie(b"d", false), 6);
        // Once the map exists, even a continuing listing keeps it whole.
        assert_eq!(h.cookie(b"e", true), 7);
        assert_eq!(h.cookie(b"e", false), 7);
        assert_eq!(h.names.len(), 5);
    }

    #[test]
    fn only_the_recorded_end_is_known_empty() {
        let mut h = DirHandle::default();
        assert!(!h.is_end(2));
        h.set_end(2);
        assert!(h.is_end(2));
        assert!(!h.is_end(0));
        assert!(!h.is_end(3));
        h.cookie(b"a", true);
        h.set_end(3);
        assert_eq!(h.begin(3), Ok(Some(b"a".to_vec())));
        assert!(h.is_end(3), "resuming elsewhere keeps it");
        assert_eq!(h.begin(0), Ok(None));
        assert!(!h.is_end(3), "a rewind forgets it");
    }
}
