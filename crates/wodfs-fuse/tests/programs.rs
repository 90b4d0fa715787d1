//! Real programs on a mounted wodfs: cp -a, tar, rsync -a, grep -r, find,
//! git init/add/commit + git fsck, then unmount, remount and compare with
//! the source tree.

mod common;

use std::path::Path;

use common::{mkfs, mount, sh_in, Scratch};

/// A source tree to copy: this workspace's crates (a few hundred files,
/// nested directories), plus odd names and a symlink.
fn make_source(dir: &Path) {
    sh_in(
        dir,
        "mkdir src && cp -a /work/main/crates src/ 2>/dev/null || cp -a \"$CARGO_MANIFEST_DIR/..\" src/crates; \
         mkdir -p 'src/odd names/ünïcödé' && printf 'x\\001y' > \"src/odd names/$(printf 'a\\001b')\" && \
         ln -s ../crates 'src/odd names/link' && dd if=/dev/urandom of=src/random.bin bs=1M count=3 status=none && \
         find src -name target -prune -exec rm -rf {} +",
    );
}

#[test]
fn cp_tar_rsync_grep_find_git_and_remount() {
    require_fuse!();
    let s = Scratch::new("programs");
    make_source(&s.dir);
    mkfs(&s.image(), 2 << 30);
    let m = mount(&s.image(), &s.mnt(), true);
    let src = s.dir.join("src");
    let src = src.display();
    m.sh(&format!(
        "cp -a {src} cp && diff -r --no-dereference {src} cp"
    ));
    m.sh(&format!("mkdir tarred && tar -C {src} -cf - . | tar -C tarred -xf - && diff -r --no-dereference {src} tarred"));
    m.sh(&format!(
        "rsync -a {src}/ rsynced/ && diff -r --no-dereference {src} rsynced"
    ));
    let want = sh_in(
        &s.dir,
        "grep -r --binary-files=without-match -c fn src | sed 's|^src/||' | LC_ALL=C sort",
    );
    let got =
        m.sh("grep -r --binary-files=without-match -c fn cp | sed 's|^cp/||' | LC_ALL=C sort");
    assert_eq!(want, got, "grep -r differs");
    let want = sh_in(&s.dir, "cd src && find . | LC_ALL=C sort");
    let got = m.sh("cd cp && find . | LC_ALL=C sort");
    assert_eq!(want, got, "find differs");
    m.sh("cd cp && git init -q && git add -A && \
         git -c user.name=t -c user.email=t@t commit -qm import && \
         git mv crates moved && git -c user.name=t -c user.email=t@t commit -qm move && \
         git fsck --strict 2>&1 && git status --porcelain | wc -l | grep -qx 0");
    m.sh("rm -rf tarred && test ! -e tarred");
    m.unmount();

    let m = mount(&s.image(), &s.mnt(), false);
    m.sh(&format!("diff -r --no-dereference {src} rsynced"));
    m.sh("cd cp && git fsck --strict 2>&1 && git log --oneline | wc -l | grep -qx 2");
    let fsck = m.fs.fsck().unwrap();
    assert!(
        fsck.errors.is_empty(),
        "{:?}",
        &fsck.errors[..fsck.errors.len().min(5)]
    );
    m.unmount();
}
