"""strata serve, bad requests: malformed JSON, wrong field types, a wrong key, an oversized body, a prompt over the
context, unknown endpoints. Each gets the right status with the field named, and the server stays up."""
import json

import openai

from harness import WORDS, Server, check, main


def run(args, rng):
    key = "k" + str(rng.randrange(10**9))
    word = rng.choice(WORDS)
    with Server(args, "--max-body", "65536", api_key=key, ctx=256) as srv:
        chat = "/v1/chat/completions"
        good = {"messages": [{"role": "user", "content": f"Say {word}."}], "max_tokens": 2}

        def expect(status, body, param=None, contains=None, path=chat, headers=None):
            code, h, raw = srv.request("POST", path, body, headers=headers)
            try:
                err = json.loads(raw)["error"]
            except Exception:
                raise AssertionError(f"{body!r}: not a JSON error: {code} {raw[:200]!r}")
            check(code == status, f"{body!r}: status {code}, expected {status}: {err}")
            if param is not None:
                check(err.get("param") == param, f"{body!r}: param {err.get('param')!r}, expected {param!r}: {err}")
            if contains:
                check(contains in err["message"], f"{body!r}: {err['message']!r} lacks {contains!r}")
            return err, h

        # malformed JSON and bodies that are not objects
        expect(400, b'{"messages": [', "body", "not valid JSON")
        expect(400, b"", "body")
        expect(400, b"[1, 2]", "body", "JSON object")
        expect(400, b'{"a": 1, "a": 2}', "body")
        # wrong field types and values, each named
        cases = [
            ({**good, "temperature": "hot"}, "temperature", "must be a number"),
            ({**good, "temperature": -1}, "temperature", "must be in"),
            ({**good, "top_p": 3}, "top_p", None),
            ({**good, "max_tokens": "many"}, "max_tokens", "integer"),
            ({**good, "max_tokens": 0}, "max_tokens", None),
            ({**good, "max_completion_tokens": 1.5}, "max_completion_tokens", None),
            ({**good, "stream": "yes"}, "stream", "boolean"),
            ({**good, "stop": 5}, "stop", None),
            ({**good, "stop": ["a", 1]}, "stop", "stop[1]"),
            ({**good, "seed": "x"}, "seed", None),
            ({**good, "n": 2}, "n", None),
            ({**good, "stream_options": 1}, "stream_options", None),
            ({**good, "stream_options": {"include_usage": "y"}}, "stream_options.include_usage", None),
            ({**good, "tools": {}}, "tools", None),
            ({**good, "model": 7}, "model", None),
            ({"max_tokens": 2}, "messages", "non-empty array"),
            ({"messages": []}, "messages", None),
            ({"messages": "hi"}, "messages", None),
            ({"messages": [{"content": "hi"}]}, "messages", "role"),
            ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages", "wizard"),
            ({"messages": [{"role": "user"}]}, "messages", "content"),
            ({"messages": [{"role": "user", "content": 5}]}, "messages", "messages[0].content"),
            ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages",
             "only text"),
        ]
        for body, param, contains in cases:
            expect(400, body, param, contains)
        expect(400, {"prompt": 5}, "prompt", path="/v1/completions")
        expect(400, {"prompt": [1, "a"]}, "prompt", path="/v1/completions")
        expect(400, {"prompt": [10**9]}, "prompt", "token", path="/v1/completions")
        expect(400, {"tokens": "x"}, "tokens", path="/detokenize")
        expect(400, {}, "content", path="/tokenize")

        # the openai client raises BadRequestError for these
        c = srv.client()
        try:
            c.chat.completions.create(model="x", messages=good["messages"], temperature="hot")
            check(False, "temperature='hot' was accepted")
        except openai.BadRequestError as e:
            check("temperature" in str(e), e)

        # a prompt over the context: 400 with the real numbers, stream or not
        long_text = " ".join(rng.choice(WORDS) for _ in range(400))
        for stream in (False, True):
            err, _ = expect(400, {"messages": [{"role": "user", "content": long_text}], "stream": stream},
                            contains="context is 256 tokens")
            check("the prompt has" in err["message"], err)
        try:
            c.completions.create(model="x", prompt=long_text, max_tokens=4)
            check(False, "an over-long prompt was accepted")
        except openai.BadRequestError as e:
            check("256" in str(e), e)
        # max_tokens past the context is clamped, not an error
        r = c.completions.create(model="x", prompt=f"{word}", max_tokens=100000, temperature=0,
                                 extra_body={"ignore_eos": True})
        check(r.usage.prompt_tokens + r.usage.completion_tokens <= 256 and r.choices[0].finish_reason == "length",
              r.usage)

        # auth
        for h in ({"Content-Type": "application/json"}, {"Authorization": "Bearer nope"}):
            expect(401, good, headers=h)
        try:
            openai.OpenAI(base_url=srv.base + "/v1", api_key="nope", max_retries=0).chat.completions.create(
                model="x", messages=good["messages"])
            check(False, "a wrong key was accepted")
        except openai.AuthenticationError:
            pass

        # oversized bodies: 413 (read and dropped, so the client sees the status)
        big = {"messages": [{"role": "user", "content": "x" * 100000}]}
        expect(413, big, "body", "65536")
        try:
            c.chat.completions.create(model="x", messages=big["messages"])
            check(False, "an oversized body was accepted")
        except openai.APIStatusError as e:
            check(e.status_code == 413, e)

        # endpoints and methods
        code, _ = srv.json("GET", "/v1/nope")
        check(code == 404, code)
        code, _ = srv.json("GET", chat)
        check(code == 405, code)

        # still serving
        r = c.chat.completions.create(model="x", messages=good["messages"], max_tokens=2)
        check(r.usage.completion_tokens >= 1, r)
        check(srv.request("GET", "/health")[0] == 200, "health")
        check(srv.status()["engine_restarts"] == 0, "no engine restarts from bad requests")


main(run)
