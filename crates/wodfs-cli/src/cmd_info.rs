//! `wodfs stat IMAGE`: tree shape, space and buffered messages.

use std::path::Path;

use crate::image::{engine_fail, open_tree, Fail};

/// Runs `stat`.
pub fn run(args: &[String]) -> Result<(), Fail> {
    let [image] = args else {
        return Err(Fail::new("usage: wodfs stat IMAGE"));
    };
    let path = Path::new(image);
    let tree = open_tree(path, 256 << 20)?;
    let report = tree.verify().map_err(|e| engine_fail(path, &e))?;
    let space = tree.space();
    let cfg = tree.config();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("image            {image}");
    println!(
        "node size        {} KiB (partitions {} KiB, fanout {})",
        cfg.node_bytes >> 10,
        cfg.partition_bytes >> 10,
        cfg.fanout
    );
    println!("log              {} MiB", cfg.log_bytes >> 20);
    println!("tree height      {}", report.height);
    println!(
        "nodes            {} ({} leaves)",
        report.nodes, report.leaves
    );
    println!("leaf entries     {}", report.leaf_entries);
    println!(
        "buffered         {} point messages, {} range deletes, {:.1} MiB",
        report.buffered_points,
        report.buffered_ranges,
        mib(report.buffered_bytes)
    );
    println!("node bytes       {:.1} MiB", mib(report.extent_bytes));
    println!("space total      {:.1} MiB", mib(space.total_bytes));
    println!("space used       {:.1} MiB", mib(space.used_bytes));
    println!(
        "space free       {:.1} MiB (+{:.1} MiB reusable after a checkpoint)",
        mib(space.free_bytes),
        mib(space.pending_bytes)
    );
    Ok(())
}
