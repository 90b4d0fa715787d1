"""The Linux source tree (linux-source-6.1): untar; cold find, grep -r,
du -s and tar of the tree; rsync into the file system and rsync --inplace
after touching a tenth of the files; mv of the whole tree; cold rm -rf."""

import os

from harness import inputs as inputs_mod
from harness import system

NAME = "srctree"
TOP = inputs_mod.TOP


def params(quick):
    return {"touch_every": 10, "subset": "kernel/sched kernel/time mm/damon" if quick else "all"}


def needs():
    for tool in ["tar", "rsync", "grep", "find", "du"]:
        if not system.shutil_which(tool):
            return f"{tool} not found"
    return None


def _tree_bytes(top):
    total = 0
    for dirpath, _, files in os.walk(top):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def run(ctx):
    root = ctx.root
    tar = ctx.inputs.source_tar()
    source = ctx.inputs.source_tree()
    tree = root / TOP
    logical = _tree_bytes(source)

    ctx.step("untar", lambda: system.run(["tar", "xf", tar, "-C", root]), logical_write_bytes=logical)
    ctx.step("find-cold", lambda: system.run(["find", tree, "-name", "wait.c"]))
    ctx.step("grep-cold", lambda: system.run(["grep", "-r", "cpu_to_be64", tree], check=False))
    ctx.step("du-cold", lambda: system.run(["du", "-s", tree]))
    ctx.step("tar-cold", lambda: system.shell(f"tar cf - {TOP} | cat >/dev/null", cwd=root))

    copy = root / "rsync-copy"
    ctx.step("rsync", lambda: system.run(["rsync", "-a", f"{source}/", f"{copy}/"]), logical_write_bytes=logical)
    touched = 0
    for index, path in enumerate(sorted(str(p) for p in source.rglob("*") if p.is_file() and not p.is_symlink())):
        if index % ctx.params["touch_every"] == 0:
            os.utime(path)
            touched += 1

    def rsync_inplace():
        system.run(["rsync", "-a", "--inplace", f"{source}/", f"{copy}/"])
        return {"touched_files": touched}

    ctx.step("rsync-inplace", rsync_inplace)

    (root / "moved").mkdir()
    ctx.step("mv-tree", lambda: system.run(["mv", tree, root / "moved" / TOP]))
    ctx.step("rm-rf-cold", lambda: system.run(["rm", "-rf", root / "moved" / TOP]))
