"""git clone of a local repository of kernel/ fs/ mm/, then edits to 100
files and a cold `git diff`."""

from harness import system

NAME = "git"

# A clone takes about a second, a cold diff a fifth of one: a full run
# measures each five times (`harness/repeats.py`).
ROUNDS = 5


def params(quick):
    return {"edited_files": 20 if quick else 100}


def needs():
    return None if system.shutil_which("git") else "git not found"


ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def run(ctx):
    source = ctx.inputs.git_repo()
    clone = ctx.root / "repo"
    ctx.step("git-clone", lambda: system.run(["git", "clone", "-q", source, clone], env=ENV))
    files = sorted(p for p in clone.rglob("*.c") if ".git" not in p.parts)
    stride = max(1, len(files) // ctx.params["edited_files"])
    for path in files[::stride][: ctx.params["edited_files"]]:
        with open(path, "a") as f:
            f.write("/* benchmark edit */\n")
    ctx.fs.make_durable()
    ctx.step("git-diff-cold", lambda: system.shell("git diff >/dev/null", cwd=clone), durable=False)
