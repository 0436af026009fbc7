"""strata serve, the happy paths with the official openai client: models, chat (non-stream and stream, with usage),
completions (both), stop strings, seeds, tokenize/detokenize, health/status/metrics, the API key, the web page root."""
import json

import openai

from harness import WORDS, Server, check, main


def run(args, rng):
    key = "sk-test-" + "".join(rng.choice("abcdef0123456789") for _ in range(16))
    a, b = rng.sample(WORDS, 2)
    with Server(args, api_key=key) as srv:
        c = srv.client()
        models = c.models.list()
        check(len(models.data) == 1 and models.data[0].id == "SmolLM2-135M-Instruct.Q4_1", models)

        # chat, non-stream, greedy
        msgs = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": f"Write one sentence about a {a} and a {b}."}]
        r = c.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0)
        text = r.choices[0].message.content
        print("chat:", repr(text), r.usage)
        check(r.object == "chat.completion" and r.choices[0].message.role == "assistant", r)
        check(len(text) > 0 and r.usage.completion_tokens <= 12 and r.usage.prompt_tokens > 10, r)
        check(r.choices[0].finish_reason in ("stop", "length"), r)
        check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage)

        # the same request streamed: identical greedy text, usage in the last chunk
        chunks = list(c.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0, stream=True,
                                                stream_options={"include_usage": True}))
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        check(streamed == text, f"stream {streamed!r} != non-stream {text!r}")
        check(chunks[0].choices[0].delta.role == "assistant", chunks[0])
        fin = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        check(len(fin) == 1 and fin[0].choices[0].finish_reason == r.choices[0].finish_reason, fin)
        check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
              chunks[-1])
        check(chunks[-1].usage.prompt_tokens_details.cached_tokens > 0, "an identical prompt should hit the cache")
        # without include_usage there is no usage chunk
        chunks = list(c.chat.completions.create(model="x", messages=msgs, max_tokens=3, temperature=0, stream=True))
        check(all(ch.usage is None for ch in chunks), chunks[-1])

        # content given as parts, the developer role, max_completion_tokens
        r2 = c.chat.completions.create(model="x", max_completion_tokens=5, temperature=0, messages=[
            {"role": "developer", "content": [{"type": "text", "text": "You are terse."}]},
            {"role": "user", "content": [{"type": "text", "text": f"Write one sentence about a {a} and a {b}."}]}])
        check(r2.usage.completion_tokens <= 5 and r2.choices[0].message.content == "" or
              text.startswith(r2.choices[0].message.content[:8]), (r2, text))

        # sampling with a seed is reproducible
        kw = dict(model="x", messages=msgs, max_tokens=10, temperature=1.0, top_p=0.9, seed=1234,
                  presence_penalty=0.5, frequency_penalty=0.2, extra_body={"top_k": 50, "min_p": 0.02})
        s1 = c.chat.completions.create(**kw).choices[0].message.content
        s2 = c.chat.completions.create(**kw).choices[0].message.content
        check(s1 == s2, f"same seed, different text: {s1!r} vs {s2!r}")

        # stop strings end the text before the stop string
        words = text.split()
        if len(words) >= 3:
            stop = " " + words[2]
            r3 = c.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0, stop=[stop])
            check(r3.choices[0].message.content == text[:text.index(stop)] and
                  r3.choices[0].finish_reason == "stop", (r3.choices[0], stop, text))

        # completions
        p = f"The {a} and the {b}"
        cr = c.completions.create(model="x", prompt=p, max_tokens=8, temperature=0)
        check(cr.object == "text_completion" and len(cr.choices[0].text) > 0 and cr.usage.completion_tokens <= 8, cr)
        st = "".join(ch.choices[0].text for ch in
                     c.completions.create(model="x", prompt=p, max_tokens=8, temperature=0, stream=True))
        check(st == cr.choices[0].text, (st, cr.choices[0].text))
        d = c.completions.create(model="x", prompt=p, temperature=0)  # default max_tokens is 16
        check(d.usage.completion_tokens <= 16, d.usage)

        # tokenize / detokenize round trip; completions from token ids give the same text
        code, tk = srv.json("POST", "/tokenize", {"content": p})
        check(code == 200 and len(tk["tokens"]) >= 4, tk)
        code, dt = srv.json("POST", "/detokenize", {"tokens": tk["tokens"]})
        check(code == 200 and dt["content"] == p, dt)
        ct = c.completions.create(model="x", prompt=tk["tokens"], max_tokens=8, temperature=0)
        check(ct.choices[0].text == cr.choices[0].text, (ct.choices[0].text, cr.choices[0].text))

        # the key: x-api-key works too; a wrong key is 401; /health and /metrics need none
        code, _ = srv.json("GET", "/v1/models", headers={"x-api-key": key})
        check(code == 200, code)
        for h in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": key[:-1]}, {"Authorization": key}):
            code, body = srv.json("GET", "/v1/models", headers=h)
            check(code == 401 and "API key" in body["error"]["message"], (h, code, body))
        try:
            srv.client().__class__(base_url=srv.base + "/v1", api_key="wrong", max_retries=0).models.list()
            check(False, "a wrong key was accepted")
        except openai.AuthenticationError:
            pass
        check(srv.request("GET", "/health", headers={})[0] == 200, "/health needs no key")

        # status and metrics
        s = srv.status()
        print("status:", json.dumps(s))
        check(s["engine"] == "ready" and s["context"]["n_ctx"] == 2048 and s["engine_restarts"] == 0, s)
        check(s["prefix_cache"]["hits"] >= 1 and s["speed"]["last_decode_tokens_per_s"] > 0, s)
        # the tests start the server without -dev: the CPU in a CPU build, the GPU's name where CUDA runs it
        check(s["placement"] == "CPU" or s["placement"].startswith("NVIDIA"), s["placement"])
        code, _, m = srv.request("GET", "/metrics", headers={})
        m = m.decode()
        check(code == 200 and "strata_engine_ready 1" in m and "strata_generated_tokens_total" in m, m)

        # the web page is served at / (its own test drives it in a browser)
        code, h, body = srv.request("GET", "/", headers={})
        check(code == 200 and h["Content-Type"].startswith("text/html") and b"app.js" in body, (code, h))


main(run)
