#!/usr/bin/env python3
"""strata serve on CUDA, where decoding is the device-pipelined generation (strata_gen: the sample drawn on the GPU,
the next step queued before the host reads the token): greedy answers repeat exactly without the prompt cache, and
with it (each reusing the same prefix of what the last answer left in the session, also after an answer cut by a
stop string: the step run ahead must not leak into the session), and equal the host-sampling path's
(STRATA_GEN_HOST=1 on a second server); a seeded draw at temperature 0.9 repeats. Raw HTTP
only (tests/server/harness.py's Server), so it runs where the `openai` package is not installed.

usage: tests/gpu/serve_smoke.py --strata build-gpu/bin/strata --model MODEL.gguf [--gpu-mem GIB] [--device cpu]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from harness import Server, check  # noqa: E402

PROMPT = "The history of the river and the mountain town begins"


def complete(srv, **body):
    req = {"prompt": PROMPT, "max_tokens": 32, "temperature": 0}
    req.update(body)
    st, r = srv.json("POST", "/v1/completions", req, timeout=300)
    check(st == 200, f"/v1/completions {req}: HTTP {st}: {r}")
    return r["choices"][0]["text"], r["usage"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--gpu-mem", default=None, help="a VRAM budget (hybrid placement)")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the script where no GPU is")
    a = ap.parse_args()
    extra = ["-dev", a.device] + (["--gpu-mem", a.gpu_mem] if a.gpu_mem else [])
    results = {}
    for host in (False, True):
        env = dict(os.environ)
        if host:
            env["STRATA_GEN_HOST"] = "1"
        with Server(a, *extra, env=env) as srv:
            # Without the prompt cache every request evaluates the whole prompt alike: answers must repeat.
            f1, _ = complete(srv, cache_prompt=False)
            f2, _ = complete(srv, cache_prompt=False)
            check(f1 == f2, f"greedy answers (no cache) differ: {f1!r} / {f2!r}")
            # With it, every request after the first reuses the same prefix (the prompt but its last two tokens) of
            # what the previous answer left in the session: a step run ahead must not have leaked into that.
            c1, u1 = complete(srv)
            c2, u2 = complete(srv)
            check(u2.get("prompt_tokens_details", {}).get("cached_tokens", 0) > 0, f"no prefix reuse: {u2}")
            check(c1 == c2, f"greedy answers (cache) differ: {c1!r} / {c2!r}")
            words = c1.split()
            if len(words) > 3:  # an answer cut by a stop string, then the full answer again
                cut, _ = complete(srv, stop=[words[2]])
                check(c1.startswith(cut), f"stopped answer {cut!r} is not a prefix of {c1!r}")
                c3, _ = complete(srv)
                check(c3 == c1, f"after a stopped answer: {c3!r} vs {c1!r}")
            d1, _ = complete(srv, temperature=0.9, seed=7, cache_prompt=False)
            d2, _ = complete(srv, temperature=0.9, seed=7, cache_prompt=False)
            check(d1 == d2, f"seeded draws differ: {d1!r} / {d2!r}")
            results[host] = (f1, c1)
            print(f"{'host sampling' if host else 'device-pipelined'}: {f1!r}; with the cache {'the same' if c1 == f1 else repr(c1)}; "
                  f"seeded draw {d1!r}")
    check(results[False] == results[True], "device-pipelined and host-sampling greedy answers differ")
    print("serve_smoke: PASS")


if __name__ == "__main__":
    main()
