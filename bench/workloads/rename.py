"""Rename cost versus file size: per size, 100 renames of one file, each
followed by an fsync of the directory; also a directory of 16 x 64 files
of 16 KiB renamed the same way."""

import os

NAME = "rename"
KIB = 1 << 10


def params(quick):
    if quick:
        return {"sizes": [4 * KIB, 64 * KIB, 1024 * KIB, 4096 * KIB], "renames": 20, "dir_shape": [4, 16, 16 * KIB]}
    return {
        "sizes": [4 * KIB, 64 * KIB, 1024 * KIB, 16384 * KIB, 262144 * KIB],
        "renames": 100,
        "dir_shape": [16, 64, 16 * KIB],
    }


def needs():
    return None


def size_label(size):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def write_file(path, size):
    block = bytes(range(1, 256)) * 4112  # ~1 MiB of non-zero bytes
    with open(path, "wb") as f:
        left = size
        while left > 0:
            chunk = block[: min(left, len(block))]
            f.write(chunk)
            left -= len(chunk)
        f.flush()
        os.fsync(f.fileno())


def rename_loop(directory, first, second, count):
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = [first, second]
        for i in range(count):
            os.rename(os.path.join(directory, names[i % 2]), os.path.join(directory, names[(i + 1) % 2]))
            os.fsync(fd)
    finally:
        os.close(fd)


def run(ctx):
    p = ctx.params
    directory = ctx.root / "rename"
    directory.mkdir()
    for size in p["sizes"]:
        write_file(directory / "a", size)
        ctx.fs.make_durable()
        ctx.step(
            f"rename-{size_label(size)}",
            lambda: rename_loop(directory, "a", "b", p["renames"]),
            per=p["renames"],
            logical_write_bytes=0,
        )
        name = "a" if p["renames"] % 2 == 0 else "b"
        os.unlink(directory / name)
    subdirs, files, file_bytes = p["dir_shape"]
    tree = directory / "ta"
    for s in range(subdirs):
        (tree / f"s{s}").mkdir(parents=True)
        for f in range(files):
            with open(tree / f"s{s}" / f"f{f}", "wb") as out:
                out.write(b"\x5a" * file_bytes)
    ctx.fs.make_durable()
    label = f"rename-dir-{subdirs}x{files}x{size_label(file_bytes)}"
    ctx.step(label, lambda: rename_loop(directory, "ta", "tb", p["renames"]), per=p["renames"])
