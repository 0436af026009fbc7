#!/usr/bin/env python3
"""bench_arena --check on a small qwen3moe make-model file both ways: the anonymous arena costs anonymous memory
(RssAnon grows by >= 90% of the arena), the mapped pack costs page cache (RssAnon grows by <= 10% + 4 MiB).
usage: test_arena_rss.py STRATA_BINARY BENCH_ARENA_BINARY"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cli_harness as h  # noqa: E402

strata, bench = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as d:
    # Big enough that allocator slack does not blur the 90% / 10% lines: 8 layers x 64 experts of 128 x 512.
    model, pack = f"{d}/m.gguf", f"{d}/m.pack"
    rc, _, err = h.run(strata, "make-model", "--preset", "tiny-qwen3moe", "--type", "Q4_K_M", "--n-layer", "8",
                       "--n-expert", "64", "-o", model, "-q", "-t", "2")
    h.check(rc == 0, "make-model", err)
    rc, _, err = h.run(strata, "pack", "-m", model, "-o", pack, "-q")
    h.check(rc == 0, "strata pack", err)
    for args in ([model, "--check"], [model, "--pack", pack, "--check"]):
        rc, out, err = h.run(bench, *args)
        print(out.strip())
        h.check(rc == 0 and "PASS" in out, f"bench_arena {' '.join(args[1:])}", out + err)
if h.failures:
    print(f"test_arena_rss: {h.failures} failure(s)", file=sys.stderr)
    sys.exit(1)
print("test_arena_rss: PASS")
