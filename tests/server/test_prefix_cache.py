"""strata serve, prompt-prefix cache: a follow-up turn reuses the KV of the conversation so far (cached_tokens > 0,
only the new tokens prefilled), and greedy output is identical with and without the cache."""
from harness import WORDS, Server, check, main


def run(args, rng):
    a, b, c = rng.sample(WORDS, 3)
    with Server(args) as srv:
        cl = srv.client()
        conv = [{"role": "system", "content": f"You are a helpful assistant who likes the word {a}."},
                {"role": "user", "content": f"Tell me about a {b}."}]
        r1 = cl.chat.completions.create(model="x", messages=conv, max_tokens=16, temperature=0)
        conv += [{"role": "assistant", "content": r1.choices[0].message.content},
                 {"role": "user", "content": f"And what about a {c}?"}]
        turns = []
        for cache in (True, False, True):
            r = cl.chat.completions.create(model="x", messages=conv, max_tokens=16, temperature=0,
                                           extra_body={"cache_prompt": cache})
            turns.append(r)
            print(f"cache_prompt={cache}: cached {r.usage.prompt_tokens_details.cached_tokens} of "
                  f"{r.usage.prompt_tokens}: {r.choices[0].message.content!r}")
        hit, miss, hit2 = turns
        n1 = r1.usage.prompt_tokens
        check(hit.usage.prompt_tokens_details.cached_tokens >= n1 - 1,
              f"follow-up turn cached {hit.usage.prompt_tokens_details.cached_tokens}, expected >= {n1 - 1}")
        check(miss.usage.prompt_tokens_details.cached_tokens == 0, miss.usage)
        # The same prompt again: all but the last two tokens come from the cache (the worker never evaluates a
        # one-token batch, so that outputs do not depend on the cache; see prefix_lookup in src/server/worker.c).
        check(hit2.usage.prompt_tokens_details.cached_tokens == hit2.usage.prompt_tokens - 2, hit2.usage)
        check(hit.choices[0].message.content == miss.choices[0].message.content == hit2.choices[0].message.content,
              "greedy output differs with and without the prefix cache")
        # the timings say only the new tokens were prefilled
        check(hit.model_extra["timings"]["prompt_n"] == hit.usage.prompt_tokens -
              hit.usage.prompt_tokens_details.cached_tokens, hit.model_extra["timings"])
        # a different conversation shares only the template's prefix: still correct output
        other = [{"role": "user", "content": f"Tell me about a {c}."}]
        o1 = cl.chat.completions.create(model="x", messages=other, max_tokens=8, temperature=0)
        o2 = cl.chat.completions.create(model="x", messages=other, max_tokens=8, temperature=0,
                                        extra_body={"cache_prompt": False})
        check(o1.choices[0].message.content == o2.choices[0].message.content, (o1, o2))
        s = srv.status()
        check(s["prefix_cache"]["hits"] >= 2 and s["prefix_cache"]["cached_tokens_total"] > 0, s["prefix_cache"])
    # the same greedy answer from a server with the cache switched off
    with Server(args, "--no-prefix-cache") as srv:
        r = srv.client().chat.completions.create(model="x", messages=conv, max_tokens=16, temperature=0)
        check(r.usage.prompt_tokens_details.cached_tokens == 0, r.usage)
        check(r.choices[0].message.content == hit.choices[0].message.content,
              f"--no-prefix-cache server: {r.choices[0].message.content!r} != {hit.choices[0].message.content!r}")


main(run)
