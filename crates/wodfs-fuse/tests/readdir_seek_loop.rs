//! Regression (xfstests generic/676, t_readdir_3): a program that calls
//! seekdir(telldir()) after every readdir made the daemon append a whole
//! batch of names to the directory handle per call. Its memory grew
//! without bound (the OOM killer took the daemon on a seek loop over 4,000
//! names), and cookies below the largest one could resume after the last
//! name (an unexpected end of directory). Now a handle holds each name
//! once: positions stay below the entry count and every one of them
//! resumes at an entry.

mod common;

use common::{mkfs, mount, Scratch};

const SCRIPT: &str = r#"
use strict;
my $n = 1500;
for my $i (0..$n-1) { open(my $f, '>', sprintf("f%04d", $i)) or die; close $f; }
opendir(my $d, '.') or die;
my ($max, $read) = (0, 0);
while (1) {
    my $pos = telldir($d);
    $max = $pos if $pos > $max;
    my $e = readdir($d);
    last unless defined $e;
    $read++;
    # Seek to where we are: each readdir becomes a READDIR at an offset.
    seekdir($d, telldir($d));
}
die "read $read" unless $read == $n + 2;
for my $p (0..$max-1) {
    seekdir($d, $p);
    defined(readdir($d)) or die "end of directory at position $p of $max";
}
print "$max\n";
"#;

#[test]
fn seeking_after_every_entry_keeps_positions_small_and_valid() {
    require_fuse!();
    let s = Scratch::new("seek-loop");
    mkfs(&s.image(), 256 << 20);
    let m = mount(&s.image(), &s.mnt(), false);
    std::fs::write(s.dir.join("t.pl"), SCRIPT).unwrap();
    let out = m.sh(&format!("perl {}", s.dir.join("t.pl").display()));
    let max: u64 = out.trim().parse().unwrap();
    // 1,500 names plus "." and "..": one cookie each.
    assert!(max <= 1503, "largest position {max}");
    m.unmount();
}
