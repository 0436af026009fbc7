"""strata serve, prompt checkpoints: an agent alternates between conversations (main thread A, sub-agent B with
another system prompt). After a request for B replaced the live session, A's next turn must still reuse A's prefix
from a checkpoint (cached_tokens close to A's whole first prompt, checkpoint_hits counted in /v1/status and
/metrics), and its greedy output must equal that of a server without the prefix cache."""
import time

from harness import WORDS, Server, check, main


def system_prompt(rng, who):
    # A few hundred tokens: longer than the default --checkpoint-min-tokens (256).
    rules = " ".join(f"Rule {i}: never mention the {rng.choice(WORDS)} near the {rng.choice(WORDS)}."
                     for i in range(20))
    return f"You are {who}. {rules}"


def run(args, rng):
    a, b, c, d = rng.sample(WORDS, 4)
    conv_a = [{"role": "system", "content": system_prompt(rng, "the main coding agent")},
              {"role": "user", "content": f"Tell me about a {a}."}]
    conv_b = [{"role": "system", "content": system_prompt(rng, "a sub-agent that searches files")},
              {"role": "user", "content": f"Find the {b}."}]
    with Server(args) as srv:
        cl = srv.client()

        def chat(conv, n=12):
            t0 = time.time()
            r = cl.chat.completions.create(model="x", messages=conv, max_tokens=n, temperature=0)
            print(f"  {time.time() - t0:.2f} s, prompt {r.usage.prompt_tokens}, cached {r.usage.prompt_tokens_details.cached_tokens}: "
                  f"{r.choices[0].message.content!r}")
            return r

        a1 = chat(conv_a)
        check(a1.usage.prompt_tokens >= 260, f"conversation A's prompt is only {a1.usage.prompt_tokens} tokens")
        b1 = chat(conv_b)
        check(b1.usage.prompt_tokens_details.cached_tokens < 32,
              f"B shares only the template's first tokens with A, yet cached {b1.usage}")
        hits0 = srv.status()["prefix_cache"]["checkpoint_hits"]
        conv_a += [{"role": "assistant", "content": a1.choices[0].message.content},
                   {"role": "user", "content": f"And what about a {c}?"}]
        a2 = chat(conv_a, 16)
        n1 = a1.usage.prompt_tokens
        check(a2.usage.prompt_tokens_details.cached_tokens >= n1 - 4,
              f"A's second turn after B cached {a2.usage.prompt_tokens_details.cached_tokens} tokens, expected >= "
              f"{n1 - 4} (A's first prompt) from a checkpoint")
        check(a2.model_extra["timings"]["prompt_n"] ==
              a2.usage.prompt_tokens - a2.usage.prompt_tokens_details.cached_tokens, a2.model_extra["timings"])
        pc = srv.status()["prefix_cache"]
        check(pc["checkpoint_hits"] == hits0 + 1, f"checkpoint_hits {hits0} -> {pc['checkpoint_hits']}: {pc}")
        check(1 <= pc["checkpoints"] <= 4 and pc["checkpoint_mib"] > 0, pc)
        # B's next turn comes back from its own checkpoint (saved when A2 replaced it).
        conv_b += [{"role": "assistant", "content": b1.choices[0].message.content},
                   {"role": "user", "content": f"Now find the {d}."}]
        b2 = chat(conv_b)
        check(b2.usage.prompt_tokens_details.cached_tokens >= b1.usage.prompt_tokens - 4, b2.usage)
        st, _, metrics = srv.request("GET", "/metrics")
        line = [l for l in metrics.decode().splitlines() if l.startswith("strata_checkpoint_hits_total ")]
        check(st == 200 and line and int(line[0].split()[1]) == hits0 + 2, f"/metrics: {line}")
    # The same greedy answer from a server without the prefix cache (every prompt evaluated from scratch).
    with Server(args, "--no-prefix-cache") as srv:
        cl = srv.client()
        r = cl.chat.completions.create(model="x", messages=conv_a, max_tokens=16, temperature=0)
        check(r.usage.prompt_tokens_details.cached_tokens == 0, r.usage)
        check(r.usage.prompt_tokens == a2.usage.prompt_tokens, (r.usage, a2.usage))
        check(r.choices[0].message.content == a2.choices[0].message.content,
              f"checkpoint-restored answer {a2.choices[0].message.content!r} != uncached "
              f"{r.choices[0].message.content!r}")
        check(srv.status()["prefix_cache"]["checkpoint_hits"] == 0, "checkpoint hits with the cache off")


main(run)
