//! `wodfs fsck IMAGE`: engine invariants and checksums (`verify`), then
//! namespace invariants. Exit codes follow fsck(8): 0 clean, 4 errors left
//! uncorrected, 8 operational error (cannot open, image in use).

use std::path::Path;

use wodfs_fs::{Fs, FsOptions};

use crate::image::{try_open_tree, Fail};

/// Runs `fsck`; returns the exit code.
pub fn run(args: &[String]) -> Result<u8, Fail> {
    // fsck(8) passes -a, -p, -n, -y, -f, -C fd; we never repair.
    let images: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let [image] = images.as_slice() else {
        return Err(Fail {
            msg: "usage: wodfs fsck IMAGE".into(),
            code: 8,
        });
    };
    let path = Path::new(image.as_str());
    let tree = match try_open_tree(path, 256 << 20) {
        Ok(t) => t,
        Err(e) => {
            return Err(Fail {
                msg: e.message(path, false),
                code: e.fsck_code(),
            })
        }
    };
    eprintln!("wodfs fsck: checking the tree of {image}");
    let report = match tree.verify() {
        Ok(r) => r,
        Err(e) => {
            println!("{image}: tree damaged: {e}");
            return Ok(4);
        }
    };
    eprintln!(
        "wodfs fsck: {} nodes verified; checking the namespace",
        report.nodes
    );
    let fs = match Fs::from_tree(
        tree,
        FsOptions {
            remove_orphans: false,
            ..FsOptions::default()
        },
    ) {
        Ok(fs) => fs,
        Err(e) => {
            println!("{image}: {e}");
            return Ok(4);
        }
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut progress = |keys: u64| {
        if tty {
            eprint!("\rwodfs fsck: {keys} keys checked");
        }
    };
    let ns = fs.fsck_with_progress(&mut progress);
    if tty {
        eprintln!();
    }
    let ns = match ns {
        Ok(r) => r,
        Err(e) => {
            println!("{image}: {e}");
            return Ok(4);
        }
    };
    for e in ns.errors.iter().take(100) {
        println!("{image}: {e}");
    }
    if ns.errors.len() > 100 {
        println!("{image}: … and {} more", ns.errors.len() - 100);
    }
    println!(
        "{image}: {} directories, {} other names, {} blocks, {} orphans (removed at next mount), {} errors",
        ns.dirs, ns.files, ns.blocks, ns.orphans, ns.errors.len()
    );
    Ok(if ns.errors.is_empty() { 0 } else { 4 })
}
