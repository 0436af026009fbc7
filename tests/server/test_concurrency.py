"""strata serve, concurrency: 16 clients stream at once; the engine serves them one at a time from the queue, and
each gets its own complete answer (identical to the same request made alone, greedy). Past --parallel-queue,
requests get 429 and the server stays healthy."""
import threading

import openai

from harness import WORDS, Server, check, main


def run(args, rng):
    n = 16
    prompts = [f"Name a {w} and a {v}." for w, v in zip(rng.sample(WORDS, n), rng.sample(WORDS, n))]
    with Server(args) as srv:
        cl = srv.client(timeout=120)
        results, errors = [None] * n, []

        def one(i):
            try:
                parts, finish = [], None
                for ch in cl.chat.completions.create(model="x", messages=[{"role": "user", "content": prompts[i]}],
                                                     max_tokens=6, temperature=0, stream=True):
                    if ch.choices and ch.choices[0].delta.content:
                        parts.append(ch.choices[0].delta.content)
                    if ch.choices and ch.choices[0].finish_reason:
                        finish = ch.choices[0].finish_reason
                results[i] = ("".join(parts), finish)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((i, repr(e)))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        check(not errors, errors)
        # alone, one at a time: the same answers (so none was mixed with another's tokens)
        for i in range(n):
            r = cl.chat.completions.create(model="x", messages=[{"role": "user", "content": prompts[i]}],
                                           max_tokens=6, temperature=0)
            alone = (r.choices[0].message.content, r.choices[0].finish_reason)
            check(results[i] == alone, f"client {i}: concurrent {results[i]!r} != alone {alone!r}")
        print("16 concurrent streams complete and unmixed")
        s = srv.status()
        check(s["queue_depth"] == 0 and not s["busy"], s)

    # a bounded queue: 2 may wait; a burst of 8 gets some 429s, the rest complete
    with Server(args, "--parallel-queue", "2") as srv:
        cl = srv.client(timeout=120)
        codes = []
        lock = threading.Lock()

        def burst(i):
            try:
                cl.chat.completions.create(model="x", messages=[{"role": "user", "content": prompts[i]}],
                                           max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
                c = 200
            except openai.RateLimitError:
                c = 429
            except Exception as e:  # noqa: BLE001
                c = repr(e)
            with lock:
                codes.append(c)

        threads = [threading.Thread(target=burst, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        print("burst of 8 with --parallel-queue 2:", sorted(map(str, codes)))
        check(set(codes) <= {200, 429} and codes.count(429) >= 1 and codes.count(200) >= 3, codes)
        check(srv.status()["requests"]["rejected_queue_full"] == codes.count(429), srv.status())
        r = cl.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        check(r.usage.completion_tokens >= 1, r)


main(run)
