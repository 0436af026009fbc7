#!/usr/bin/env python3
"""llama.cpp's CPU speed on a GGUF through llama-cpp-python, with llama-bench's test meanings.

ppN: N random tokens evaluated as one batch; tgN: N tokens one at a time; -d DEPTH: tokens in the KV cache first
(not timed); -r: repetitions after one warm-up. Prints JSON lines {"test", "avg_ts", "stddev_ts"}. Used by
bench/cpu_peer.sh to compare against `strata bench` in the same run on the same file.
"""
import argparse
import json
import random
import statistics
import time

from llama_cpp import Llama


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-d", "--n-depth", type=int, default=0)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=None)
    args = ap.parse_args()
    n_ctx = args.n_depth + max(args.n_prompt, args.n_gen) + 8
    llm = Llama(model_path=args.model, n_ctx=n_ctx, n_batch=max(args.n_prompt, 512), n_ubatch=512,
                n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    rnd = random.Random(1234)
    toks = [rnd.randrange(llm.n_vocab()) for _ in range(args.n_depth + max(args.n_prompt, args.n_gen))]
    for test, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
        if n == 0:
            continue
        speeds = []
        for r in range(args.repetitions + 1):
            llm.reset()
            if args.n_depth:
                llm.eval(toks[: args.n_depth])
            t0 = time.perf_counter()
            if test == "pp":
                llm.eval(toks[args.n_depth : args.n_depth + n])
            else:
                for i in range(n):
                    llm.eval([toks[args.n_depth + i]])
            dt = time.perf_counter() - t0
            if r > 0:
                speeds.append(n / dt)
        name = f"{test}{n}" + (f" @ d{args.n_depth}" if args.n_depth else "")
        print(json.dumps({"test": name, "avg_ts": statistics.mean(speeds),
                          "stddev_ts": statistics.stdev(speeds) if len(speeds) > 1 else 0.0}))


if __name__ == "__main__":
    main()
