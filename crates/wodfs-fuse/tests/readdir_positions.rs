//! telldir/seekdir through the mount (with Perl's, which call libc's), and
//! a listing that continues while the directory changes: no name twice,
//! every name that stayed is seen.

mod common;

use common::{mkfs, mount, Scratch};

const SCRIPT: &str = r#"
use strict;
for my $i (0..1999) { open(my $f, '>', sprintf("f%04d", $i)) or die; close $f; }
opendir(my $d, '.') or die;
my @first;
for (1..500) { push @first, scalar readdir($d); }
my $pos = telldir($d);
my @a;
for (1..100) { push @a, scalar readdir($d); }
seekdir($d, $pos);
my @b;
for (1..100) { push @b, scalar readdir($d); }
die "seekdir: @a[0..2] vs @b[0..2]" unless "@a" eq "@b";
# Change the directory under the open listing.
for my $i (0..1999) { unlink(sprintf("f%04d", $i)) if $i % 7 == 3; }
for my $i (0..299) { open(my $f, '>', sprintf("g%04d", $i)) or die; close $f; }
my @rest;
while (defined(my $n = readdir($d))) { push @rest, $n; }
my %seen;
for my $n (@first, @a, @rest) { die "twice: $n" if $seen{$n}++; }
for my $i (0..1999) {
    next if $i % 7 == 3;
    my $n = sprintf("f%04d", $i);
    die "missing $n" unless $seen{$n};
}
print scalar(keys %seen), "\n";
"#;

#[test]
fn telldir_seekdir_and_listing_while_changing() {
    require_fuse!();
    let s = Scratch::new("readdir");
    mkfs(&s.image(), 256 << 20);
    let m = mount(&s.image(), &s.mnt(), false);
    std::fs::write(s.dir.join("t.pl"), SCRIPT).unwrap();
    let out = m.sh(&format!("perl {}", s.dir.join("t.pl").display()));
    let count: usize = out.trim().parse().unwrap();
    // 2000 files, "." and "..", and up to 300 new names.
    assert!((2002..=2302).contains(&count), "{count}");
    m.unmount();
}
