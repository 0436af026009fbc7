"""Shared pieces of the tests that drive the strata binary on tiny make-model files (tests/place/test_place_cli.py,
tests/engine/test_route_predict.py): a run with the named variables removed from the environment, a failure
counter, and the two tiny models those tests use."""
import os
import subprocess
import sys

failures = 0


def run(binary, *args, unset=(), env=None, timeout=120):
    """(returncode, stdout, stderr) of `binary args...`; `unset` names variables removed first, `env` adds some."""
    e = dict(os.environ)
    for k in unset:
        e.pop(k, None)
    if env:
        e.update(env)
    p = subprocess.run([binary, *args], capture_output=True, text=True, env=e, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check(cond, what, out=""):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}\n{out}", file=sys.stderr)


def make_tiny_models(binary, d, skew):
    """A tiny qwen3moe (Q4_K_M, --router-skew skew) and a tiny llama (Q4_0) in directory d: (moe, dense) paths."""
    moe, dense = f"{d}/moe.gguf", f"{d}/dense.gguf"
    for cmd in (["make-model", "--preset", "tiny-qwen3moe", "--type", "Q4_K_M", "--router-skew", str(skew), "-o", moe],
                ["make-model", "--preset", "tiny-llama", "--type", "Q4_0", "-o", dense]):
        rc, out, err = run(binary, *cmd, "-q", "-t", "2")
        check(rc == 0, f"{cmd}", err)
    return moe, dense
