"""strata serve, the Anthropic Messages API through the official anthropic client: plain chat on the real model
(non-stream and stream agree under greedy sampling; the streaming event sequence), system blocks, stop sequences,
max_tokens, tool_use blocks from a scripted completion (test hook, see test_tools.py) streamed as input_json_delta,
tool_result turns, thinking blocks (Qwen3 template), count_tokens, and errors in Anthropic's shape (x-api-key auth)."""
import json

import anthropic

from harness import WORDS, Server, anthropic_client, check, main, template

WEATHER = {"name": "get_weather", "description": "Current weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
GREEDY = {"temperature": 0}


def stream_events(c, **kw):
    """Streams a request; returns (event types, final message) after checking the event grammar."""
    types, blocks, open_idx = [], {}, None
    with c.messages.stream(**kw) as s:
        for ev in s:
            t = ev.type
            if t in ("text", "thinking", "input_json", "citation", "signature"):
                continue  # the client's own convenience events
            types.append(t)
            if t == "content_block_start":
                check(open_idx is None and ev.index == len(blocks), f"block {ev.index} opened while {open_idx} open")
                open_idx = ev.index
                blocks[ev.index] = ev.content_block.type
            elif t == "content_block_delta":
                check(ev.index == open_idx, "delta for a block that is not open")
                want = {"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}
                check(ev.delta.type == want[blocks[ev.index]], (ev.delta.type, blocks[ev.index]))
            elif t == "content_block_stop":
                check(ev.index == open_idx, "stop for a block that is not open")
                open_idx = None
        final = s.get_final_message()
    check(types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"], types)
    check(open_idx is None, "a block was left open")
    return types, final


def run(args, rng):
    key = "sk-ant-test-" + "".join(rng.choice("abcdef0123456789") for _ in range(12))
    word = rng.choice(WORDS)
    city = rng.choice(["Paris", "Oslo", "Lima", "Kyoto"])
    script = [  # the first entry whose marker is in the prompt wins: later turns' markers first
        {"when": "RESULT-" + word, "text": f"It is sunny in {city}.<|im_end|>"},
        {"when": "TOOL1", "text": "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" +
                                  city + "\"}}\n</tool_call><|im_end|>"},
    ]
    with Server(args, api_key=key, script=script) as srv:
        c = anthropic_client(srv)
        # plain chat on the real model, greedy: non-stream and stream agree
        kw = dict(model="claude-test", max_tokens=10, system=f"You are terse. Topic: {word}.",
                  messages=[{"role": "user", "content": f"Say something about a {word}."}], extra_body=GREEDY)
        m = c.messages.create(**kw)
        print("messages:", m.content, m.stop_reason, m.usage)
        check(m.type == "message" and m.role == "assistant" and m.model == "claude-test" and m.id.startswith("msg_"), m)
        check(len(m.content) == 1 and m.content[0].type == "text" and m.content[0].text, m.content)
        check(m.stop_reason in ("end_turn", "max_tokens") and m.usage.output_tokens <= 10, m)
        check(m.usage.input_tokens > 5, m.usage)
        types, f = stream_events(c, **kw)
        check("content_block_start" in types and types.count("content_block_stop") == 1, types)
        # the raw event stream (the client hides pings): event names match the data's type
        code, h, raw = srv.request("POST", "/v1/messages", {**{k: v for k, v in kw.items() if k != "extra_body"},
                                                             **GREEDY, "stream": True}, headers={"x-api-key": key})
        check(code == 200 and h["Content-Type"] == "text/event-stream", (code, h))
        names = []
        for ev in raw.decode().split("\n\n"):
            lines = ev.strip().split("\n")
            if not lines[0].startswith("event: "):
                continue
            name, data = lines[0][7:], json.loads(lines[1][6:])
            check(data["type"] == name, (name, data))
            names.append(name)
        check(names[:2] == ["message_start", "ping"] and names[2:] == types[1:], (names, types))
        check(f.content[0].text == m.content[0].text and f.stop_reason == m.stop_reason, (f, m))
        check(f.usage.cache_read_input_tokens > 0 and f.usage.output_tokens == m.usage.output_tokens, f.usage)

        # system blocks and stop_sequences: the text ends before the stop sequence
        text = m.content[0].text
        words = text.split()
        if len(words) >= 3:
            stop = " " + words[2]
            m2 = c.messages.create(**{**kw, "system": [{"type": "text", "text": f"You are terse. Topic: {word}."}],
                                      "stop_sequences": [stop]})
            check(m2.stop_reason == "stop_sequence" and m2.stop_sequence == stop and
                  m2.content[0].text == text[:text.index(stop)], (m2, stop, text))
        m3 = c.messages.create(**{**kw, "max_tokens": 1})
        check(m3.stop_reason == "max_tokens" and m3.usage.output_tokens == 1, m3)

        # a tool call (scripted model text): text block + tool_use block, streamed as input_json_delta
        tkw = dict(model="x", max_tokens=100, tools=[WEATHER],
                   messages=[{"role": "user", "content": f"TOOL1: weather in {city}?"}])
        m = c.messages.create(**tkw)
        check([b.type for b in m.content] == ["text", "tool_use"] and m.stop_reason == "tool_use", m)
        tu = m.content[1]
        check(tu.name == "get_weather" and tu.input == {"city": city} and tu.id.startswith("toolu_"), tu)
        check(m.content[0].text == "Checking.\n", m.content[0])
        types, f = stream_events(c, **tkw)
        check(types.count("content_block_start") == 2 and f.stop_reason == "tool_use", types)
        check(f.content[1].input == {"city": city} and f.content[0].text == "Checking.\n", f.content)
        # the tool's result goes back; the follow-up reuses the cached prefix
        follow = c.messages.create(model="x", max_tokens=50, tools=[WEATHER], messages=[
            tkw["messages"][0], {"role": "assistant", "content": m.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id,
                                          "content": [{"type": "text", "text": f"RESULT-{word}: 21 C, sunny"}]}]}])
        check(follow.content[0].text == f"It is sunny in {city}." and follow.stop_reason == "end_turn", follow)
        check(follow.usage.cache_read_input_tokens > 0, follow.usage)
        print("tool round trip:", follow.usage)
        # count_tokens
        n = c.messages.count_tokens(model="x", messages=[{"role": "user", "content": "hello"}], tools=[WEATHER])
        check(n.input_tokens > 20, n)

        # errors: Anthropic's shape, field named
        def bad(body, status, etype, words_in_msg):
            code, b = srv.json("POST", "/v1/messages", body, headers={"x-api-key": key,
                                                                       "anthropic-version": "2023-06-01"})
            check(code == status and b["type"] == "error" and b["error"]["type"] == etype and
                  all(w in b["error"]["message"] for w in words_in_msg), (body, code, b))
        msg = [{"role": "user", "content": "hi"}]
        bad({"model": "x", "messages": msg}, 400, "invalid_request_error", ["max_tokens"])
        bad({"model": "x", "max_tokens": 5, "messages": []}, 400, "invalid_request_error", ["messages"])
        bad({"model": "x", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]},
            400, "invalid_request_error", ["image", "not supported"])
        bad({"model": "x", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, 400,
            "invalid_request_error", ["role"])
        bad({"model": "x", "max_tokens": 5, "messages": msg, "thinking": {"type": "sometimes"}}, 400,
            "invalid_request_error", ["thinking"])
        bad({"model": "x", "max_tokens": 5, "messages": msg, "tools": [WEATHER],
             "tool_choice": {"type": "tool", "name": "nope"}}, 400, "invalid_request_error", ["tool_choice"])
        bad({"model": "x", "max_tokens": 5, "messages": msg, "stop_sequences": "x"}, 400, "invalid_request_error",
            ["stop_sequences"])
        code, _, b = srv.request("POST", "/v1/messages", b"{not json", headers={"x-api-key": key})
        b = json.loads(b)
        check(code == 400 and b["error"]["type"] == "invalid_request_error" and "JSON" in b["error"]["message"], b)
        try:
            anthropic.Anthropic(base_url=srv.base, api_key="wrong", max_retries=0).messages.create(
                model="x", max_tokens=5, messages=msg)
            check(False, "a wrong key was accepted")
        except anthropic.AuthenticationError as e:
            check(e.body["error"]["type"] == "authentication_error", e.body)
        try:
            c.messages.create(model="x", max_tokens=5, messages=[{"role": "user", "content": "x " * 3000}])
            check(False, "a prompt over the context was accepted")
        except anthropic.BadRequestError as e:
            check("context" in e.body["error"]["message"], e.body)

    # thinking blocks with a template that thinks (Qwen3); thinking disabled reaches the template
    script = [{"when": "<think>\n\n</think>", "text": "no thinking<|im_end|>"},
              {"when": "THINK", "text": "<think>\nLet me reason.\n</think>\n\nThe answer.<|im_end|>"}]
    with Server(args, script=script, template=template("Qwen-Qwen3-0.6B.jinja")) as srv:
        c = anthropic_client(srv)
        kw = dict(model="x", max_tokens=2048, messages=[{"role": "user", "content": "THINK: why?"}],
                  thinking={"type": "enabled", "budget_tokens": 1024})
        m = c.messages.create(**kw)
        check([b.type for b in m.content] == ["thinking", "text"], m.content)
        check(m.content[0].thinking == "Let me reason." and m.content[1].text == "The answer.", m.content)
        types, f = stream_events(c, **kw)
        check(f.content[0].thinking == "Let me reason." and f.content[1].text == "The answer.", f.content)
        m = c.messages.create(**{**kw, "thinking": {"type": "disabled"}})
        check([b.type for b in m.content] == ["text"] and m.content[0].text == "no thinking", m.content)
        # an assistant turn with thinking + text goes back into the conversation
        m2 = c.messages.create(model="x", max_tokens=20, messages=[
            {"role": "user", "content": "THINK: why?"}, {"role": "assistant", "content": m.content},
            {"role": "user", "content": "THINK: and then?"}])
        check(m2.content[-1].text == "The answer.", m2.content)


main(run)
