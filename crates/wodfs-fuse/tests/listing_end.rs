//! The request the kernel sends after the last entry of every directory
//! it reads is answered from the directory handle, without the tree; a
//! listing read again from the start still sees names created since.

mod common;

use std::sync::atomic::Ordering::Relaxed;

use common::{mkfs, mount, Scratch};

#[test]
fn the_end_of_a_listing_is_answered_without_the_tree() {
    require_fuse!();
    let s = Scratch::new("listing-end");
    mkfs(&s.image(), 256 << 20);
    let m = mount(&s.image(), &s.mnt(), false);
    for d in 0..20 {
        let dir = m.mnt.join(format!("d{d:02}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..5 {
            std::fs::write(dir.join(format!("f{f}")), b"x").unwrap();
        }
    }
    let (listed, ended) = (
        m.counters.listings.load(Relaxed),
        m.counters.listing_ends.load(Relaxed),
    );
    let found = m.sh("find . | wc -l");
    assert_eq!(found.trim(), "121", "the root, 20 directories, 100 files");
    // One listing from the tree per directory (the root and 20), each
    // ended by one request answered from its handle.
    assert_eq!(m.counters.listings.load(Relaxed) - listed, 21);
    assert_eq!(m.counters.listing_ends.load(Relaxed) - ended, 21);

    // Past the end of an open listing, a new name may be missed (POSIX
    // leaves it open); after rewinddir it is listed.
    let out = m.sh(
        r#"perl -e '
            opendir(my $d, "d00") or die;
            my @a = readdir($d);
            open(my $f, ">", "d00/new") or die; close $f;
            my @b = readdir($d);
            rewinddir($d);
            my @c = readdir($d);
            print scalar(@a), " ", scalar(@c), " ", (grep { $_ eq "new" } @c) ? "seen" : "missed", "\n";
        '"#,
    );
    assert_eq!(out.trim(), "7 8 seen");
    m.unmount();
}
