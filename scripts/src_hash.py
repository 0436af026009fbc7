#!/usr/bin/env python3
"""Content fingerprint of Strata's sources (src/, include/, CMakeLists.txt files): sha1 over the sorted relative
paths and their bytes. The GPU machines run a copy of the working tree whose git metadata may be stale, so the
benchmark tables print this instead of trusting `git rev-parse` there; here, `scripts/src_hash.py --rev REV` gives
a commit's fingerprint to match against.
  usage: scripts/src_hash.py [--rev REV] [ROOT]"""
import hashlib
import io
import os
import subprocess
import sys
import tarfile

PARTS = ("src/", "include/")


def wanted(path):
    return path.startswith(PARTS) or os.path.basename(path) == "CMakeLists.txt"


def fingerprint(files):
    """files: iterable of (relative path, bytes)."""
    h = hashlib.sha1()
    for path, data in sorted(files):
        h.update(path.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:12]


def tree_files(root):
    for d, dirs, names in os.walk(root):
        rel_d = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]  # VCS, carried trees, build outputs
        for n in names:
            rel = os.path.normpath(os.path.join(rel_d, n))
            if wanted(rel):
                with open(os.path.join(d, n), "rb") as f:
                    yield rel, f.read()


def rev_files(rev, root):
    tar = subprocess.run(["git", "-C", root, "archive", rev], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        for m in t.getmembers():
            if m.isfile() and wanted(m.name):
                yield m.name, t.extractfile(m).read()


def main(argv):
    rev = None
    if argv[:1] == ["--rev"]:
        rev, argv = argv[1], argv[2:]
    root = argv[0] if argv else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    print(fingerprint(rev_files(rev, root) if rev else tree_files(root)))


if __name__ == "__main__":
    main(sys.argv[1:])
