#!/usr/bin/env python3
"""Makes the engine's golden files with llama.cpp (llama-cpp-python), the reference for GGUF semantics.

For each model: the prompts' token ids as llama.cpp tokenizes them (BOS per the model, special tokens parsed), the
top-5 logits after every prompt position, and a greedy continuation. KV cache in F32 on both sides so attention is
exact; flash attention off. Synthetic models are made by `strata make-model` (deterministic for a seed), so the test
can remake them bit-identically instead of committing them.

usage: make_goldens.py --strata build/bin/strata --demo models/SmolLM2-135M-Instruct.Q4_1.gguf [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))

DEMO_PROMPTS = [
    "The capital of France is",
    "Write a Python function that returns the factorial of n.\n\ndef factorial(n):",
    "<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village by the sea,",
    "1, 2, 3, 4, 5, 6,",
    "The three primary colors are",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nExplain what a hash table is in one sentence.<|im_end|>\n<|im_start|>assistant\n",
    "Q: What is 12 times 12?\nA:",
]

SYNTH_PROMPTS = [
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5",
    "<|im_start|>user\nHello! Who are you?<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, 600 million people watched the first Moon landing on television.",
]

# (name, arch, preset, mix, greedy tokens): greedy continuations only where rounding cannot flip near-ties.
SYNTH_MODELS = [
    ("tiny-llama-F16", "llama", "tiny-llama", "F16", 32),
    ("tiny-llama-Q8_0", "llama", "tiny-llama", "Q8_0", 32),
    ("tiny-llama-Q4_K_M", "llama", "tiny-llama", "Q4_K_M", 0),
    ("tiny-qwen3-F16", "qwen3", "tiny-qwen3", "F16", 32),
    ("tiny-qwen3-Q8_0", "qwen3", "tiny-qwen3", "Q8_0", 32),
    ("tiny-qwen3-Q2_K", "qwen3", "tiny-qwen3", "Q2_K", 0),
    ("tiny-qwen3-IQ4_XS", "qwen3", "tiny-qwen3", "IQ4_XS", 0),
    ("tiny-qwen3moe-F16", "qwen3moe", "tiny-qwen3moe", "F16", 32),
    ("tiny-qwen3moe-Q8_0", "qwen3moe", "tiny-qwen3moe", "Q8_0", 32),
    ("tiny-qwen3moe-Q4_K_M", "qwen3moe", "tiny-qwen3moe", "Q4_K_M", 0),
    ("tiny-qwen3moe-IQ3_S", "qwen3moe", "tiny-qwen3moe", "IQ3_S", 0),
    ("tiny-qwen3moe-IQ1_M", "qwen3moe", "tiny-qwen3moe", "IQ1_M", 0),
]
SYNTH_SEED = 7

GGML_TYPE_F32 = 0


def run_model(path, prompts, n_greedy):
    llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_ubatch=512, logits_all=True, type_k=GGML_TYPE_F32,
                type_v=GGML_TYPE_F32, flash_attn=False, n_threads=2, verbose=False)
    cases = []
    for prompt in prompts:
        toks = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(toks)
        scores = np.array(llm.scores[: len(toks)], dtype=np.float32)
        top = []
        for row in scores:
            idx = np.argsort(-row, kind="stable")[:5]
            top.append([[int(i), float(row[i])] for i in idx])
        greedy = []
        for _ in range(n_greedy):
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            greedy.append(nxt)
            if llm.token_eos() == nxt:
                break
            llm.eval([nxt])
        cases.append({"prompt": prompt, "tokens": toks, "top": top, "greedy": greedy})
    del llm
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "goldens"))
    ap.add_argument("--only", help="comma-separated model names to remake")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None

    def save(name, doc):
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        print("wrote", name, file=sys.stderr)

    if not only or "demo" in only:
        save("demo", {"model": "demo", "cases": run_model(args.demo, DEMO_PROMPTS, 64)})
    with tempfile.TemporaryDirectory() as tmp:
        for name, arch, preset, mix, n_greedy in SYNTH_MODELS:
            if only and name not in only:
                continue
            path = os.path.join(tmp, name + ".gguf")
            subprocess.run([args.strata, "make-model", "--arch", arch, "--preset", preset, "--type", mix, "--seed",
                            str(SYNTH_SEED), "--vocab-from", args.demo, "-o", path], check=True,
                           stdout=subprocess.DEVNULL)
            doc = {"model": name, "make_model": ["--arch", arch, "--preset", preset, "--type", mix, "--seed",
                                                 str(SYNTH_SEED), "--vocab-from", "DEMO"],
                   "cases": run_model(path, SYNTH_PROMPTS, n_greedy)}
            save(name, doc)


if __name__ == "__main__":
    main()
