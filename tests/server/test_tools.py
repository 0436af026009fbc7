"""strata serve, tool calls and reasoning through the official openai client, end to end.

The demo model rarely calls a tool, so the worker's test hook (STRATA_SERVE_TEST_SCRIPT) makes it "generate" scripted
model text for marked prompts: the text goes through the whole server path (tokens, KV, detokenizer, the template
family's parser, OpenAI deltas). Each template family runs on its own server with the family's chat template (hook
STRATA_SERVE_TEST_TEMPLATE): the demo model's own SmolLM2 template (no tool support: the server describes the tools
itself), Qwen3 (Hermes <tool_call> + <think>), Qwen3-Coder (XML), Llama-3.1 (JSON), gpt-oss (harmony channels).
Non-stream and stream must agree; markup must never reach content; malformed calls come back as content.
Unmarked prompts run the real model (plain text with tools present)."""
import json
import time

import openai

from harness import WORDS, Server, check, main, template

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
SHELL = {"type": "function", "function": {
    "name": "run", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}}}}}
TOOLS = [WEATHER, SHELL]
MARKUP = ("<tool_call>", "</tool_call>", "<function=", "<parameter=", "<|channel|>", "<|message|>", "<|call|>",
          "<think>", "</think>", "<|python_tag|>")


def ask(c, marker, **kw):
    """The same request non-stream and stream; returns (message, finish, streamed dict) after checking they agree."""
    msgs = kw.pop("messages", None) or [{"role": "user", "content": f"{marker}: what is the weather in Paris?"}]
    base = dict(model="x", messages=msgs, max_tokens=200, temperature=0)
    base.update(kw)
    r = c.chat.completions.create(**base)
    ch = r.choices[0]
    # stream: rebuild content, reasoning and calls from the deltas
    content, reasoning, calls, finish, first_role = "", "", {}, None, None
    for chunk in c.chat.completions.create(stream=True, **base):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        if first_role is None:
            first_role = d.role
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                check(tc.id and tc.type == "function" and tc.function.name, f"first delta of a call: {tc}")
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments or ""}
            else:
                check(tc.id is None and tc.function.name is None, f"later delta of a call repeats id/name: {tc}")
                calls[tc.index]["arguments"] += tc.function.arguments or ""
        if chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    check(first_role == "assistant", "the first delta carries the role")
    for m in MARKUP:
        if ch.message.tool_calls:
            check(m not in (ch.message.content or "") and m not in content, f"markup {m!r} leaked into content")
    mc = ch.message.content or ""
    check(content == mc, f"streamed content {content!r} != {mc!r}")
    check(reasoning == (getattr(ch.message, "reasoning_content", None) or ""),
          f"streamed reasoning {reasoning!r} != {getattr(ch.message, 'reasoning_content', None)!r}")
    check(finish == ch.finish_reason, (finish, ch.finish_reason))
    nc = ch.message.tool_calls or []
    check(len(calls) == len(nc), (calls, nc))
    for i, tc in enumerate(nc):
        s = calls[i]
        check(s["name"] == tc.function.name and json.loads(s["arguments"]) == json.loads(tc.function.arguments),
              (s, tc))
        check(tc.id.startswith("call_") and s["id"].startswith("call_"), tc.id)
    return ch.message, ch.finish_reason, r.usage


def expect_calls(msg, finish, want):
    got = [(tc.function.name, json.loads(tc.function.arguments)) for tc in msg.tool_calls or []]
    check(got == want, f"calls {got} != {want}")
    check(finish == "tool_calls", finish)
    check(len({tc.id for tc in msg.tool_calls}) == len(want), "call ids must be unique")


def family(args, name, tmpl, script, fn):
    t0 = time.time()
    with Server(args, script=script, template=template(tmpl) if tmpl else None) as srv:
        fn(srv.client())
        st = srv.status()["requests"]
    print(f"{name}: ok in {time.time() - t0:.1f} s ({st['prompt_tokens']} prompt tokens)")


def run(args, rng):
    city = rng.choice(["Paris", "Oslo", "Lima", "Kyoto"])
    word = rng.choice(WORDS)

    # 1. the demo model's own template (GENERIC): the server describes the tools and parses Hermes-style calls
    def generic(c):
        msg, fin, _ = ask(c, "W1", tools=TOOLS)
        check(msg.content == "Let me look up the weather.\n", msg.content)
        expect_calls(msg, fin, [("get_weather", {"city": city, "days": 2})])
        msg, fin, _ = ask(c, "BAD", tools=TOOLS)  # malformed JSON: plain content, markup included
        check(not msg.tool_calls and fin == "stop" and msg.content.startswith("<tool_call>") and "{city:" in msg.content,
              msg)
        msg, fin, _ = ask(c, "W1", tools=TOOLS, tool_choice="none")  # no parsing: the text is content
        check(not msg.tool_calls and "<tool_call>" in msg.content and fin == "stop", msg)
        # tool_choice names a function: the prompt ends with the call's start; the script continues it
        msg, fin, _ = ask(c, "NAMED", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "run"}})
        expect_calls(msg, fin, [("run", {"cmd": f"echo {word}"})])
        msg, fin, _ = ask(c, "REQ", tools=TOOLS, tool_choice="required")
        expect_calls(msg, fin, [("get_weather", {"city": "Rome"})])
        # the real model with tools present: a well-formed answer (text, or a call if it ever makes one)
        r = c.chat.completions.create(model="x", tools=TOOLS, max_tokens=12, temperature=0,
                                      messages=[{"role": "user", "content": f"Say one word about a {word}."}])
        check(r.choices[0].message.content or r.choices[0].message.tool_calls, r)
        print("  real model with tools:", repr(r.choices[0].message.content), r.choices[0].finish_reason)
        # bad tool definitions and choices are 400s naming the field
        for bad, param in (({"tools": {"x": 1}}, "tools"), ({"tools": [{"type": "function"}]}, "tools"),
                           ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
                           ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                            "tool_choice"),
                           ({"tool_choice": "required"}, "tool_choice"),
                           ({"reasoning_effort": "extreme"}, "reasoning_effort"),
                           ({"chat_template_kwargs": [1]}, "chat_template_kwargs")):
            try:
                c.chat.completions.create(model="x", max_tokens=2, messages=[{"role": "user", "content": "hi"}],
                                          extra_body=bad)
                check(False, f"accepted {bad}")
            except openai.BadRequestError as e:
                check(e.body["param"] == param, (bad, e.body))

    family(args, "generic (SmolLM2 template)", None, [
        {"when": "W1", "text": "Let me look up the weather.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                               f"{{\"city\": \"{city}\", \"days\": 2}}}}\n</tool_call><|im_end|>"},
        {"when": "BAD", "text": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city: Paris}}\n</tool_call>"},
        {"when": "NAMED", "text": f"{{\"cmd\": \"echo {word}\"}}}}\n</tool_call>"},
        {"when": "REQ", "text": "get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"},
    ], generic)

    # 2. Qwen3: <think> reasoning and Hermes calls; enable_thinking / reasoning_effort reach the template
    def qwen3(c):
        msg, fin, _ = ask(c, "W2", tools=[WEATHER])
        check(msg.reasoning_content == "The user wants the weather in two cities.", msg)
        check(msg.content == "I'll check both.\n", msg.content)
        expect_calls(msg, fin, [("get_weather", {"city": city}), ("get_weather", {"city": "Bergen", "days": 5})])
        msg, fin, _ = ask(c, "T1", extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        check(msg.content == "thinking is off" and not getattr(msg, "reasoning_content", None), msg)
        msg, fin, _ = ask(c, "T2", reasoning_effort="none")
        check(msg.content == "thinking is off", msg)
        msg, fin, _ = ask(c, "T3")
        check(msg.content == "the answer" and msg.reasoning_content == "thinking on", msg)

    family(args, "qwen3 (hermes + think)", "Qwen-Qwen3-0.6B.jinja", [
        {"when": "<think>\n\n</think>", "text": "thinking is off<|im_end|>"},
        {"when": "W2", "text": "<think>\nThe user wants the weather in two cities.\n</think>\n\nI'll check both.\n"
                               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" + city +
                               "\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                               "{\"city\": \"Bergen\", \"days\": 5}}\n</tool_call><|im_end|>"},
        {"when": "T3", "text": "<think>thinking on</think>\n\nthe answer<|im_end|>"},
    ], qwen3)

    # 3. Qwen3-Coder: XML calls, values typed by the tool's schema
    def coder(c):
        msg, fin, _ = ask(c, "X1", tools=[SHELL])
        check(msg.content == "Running it.\n", msg.content)
        expect_calls(msg, fin, [("run", {"cmd": "ls -la\n/tmp", "timeout": 30}), ("run", {"cmd": "42"})])

    family(args, "qwen3-coder (xml)", "Qwen3-Coder.jinja", [
        {"when": "X1", "text": "Running it.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -la\n/tmp\n</parameter>\n"
                               "<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                               "<function=run>\n<parameter=cmd>\n42\n</parameter>\n</function>\n</tool_call>"
                               "<|im_end|>"},
    ], coder)

    # 4. Llama-3.1: a JSON object as the whole answer
    def llama3(c):
        msg, fin, _ = ask(c, "L1", tools=[WEATHER])
        check(not msg.content, msg.content)
        expect_calls(msg, fin, [("get_weather", {"city": city})])
        msg, fin, _ = ask(c, "L2", tools=[WEATHER])  # JSON that is no call is the answer
        check(msg.content == "{\"temperature\": 21}" and fin == "stop", msg)

    family(args, "llama-3.1 (json)", "meta-llama-Llama-3.1-8B-Instruct.jinja", [
        {"when": "L1", "text": "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"" + city + "\"}}"},
        {"when": "L2", "text": "{\"temperature\": 21}"},
    ], llama3)

    # 5. gpt-oss: harmony channels (analysis -> reasoning, commentary to=functions.X -> call, final -> content)
    def harmony(c):
        msg, fin, _ = ask(c, "H1", tools=[WEATHER])
        check(msg.reasoning_content == "Need the weather." and not msg.content, msg)
        expect_calls(msg, fin, [("get_weather", {"city": city})])
        msg, fin, _ = ask(c, "H2", reasoning_effort="high")
        check(msg.reasoning_content == "High effort." and msg.content == "It is sunny.", msg)

    family(args, "gpt-oss (harmony)", "openai-gpt-oss-120b.jinja", [
        {"when": "H1", "text": "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
                               "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"" + city +
                               "\"}<|call|>"},
        {"when": "Reasoning: high", "text": "<|channel|>analysis<|message|>High effort.<|end|><|start|>assistant"
                                            "<|channel|>final<|message|>It is sunny.<|return|>"},
    ], harmony)


main(run)
