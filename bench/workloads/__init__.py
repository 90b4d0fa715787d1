"""Workloads, one module each. A module defines NAME, `params(quick)`,
`needs()` (missing tools or inputs -> reason, else None) and `run(ctx)`;
`run` gets a freshly made and mounted file system."""

from . import fsmark, git, postmark, rename, seqio, srctree, stall, tablefs, tokubench, unlink

ALL = [seqio, stall, tokubench, srctree, git, rename, unlink, tablefs, postmark, fsmark]
BY_NAME = {module.NAME: module for module in ALL}
