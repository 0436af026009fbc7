"""strata serve, an agent-style conversation through the official clients on the demo model: the client resends the
whole conversation every turn (system prompt, tools, the assistant's tool calls, the tool results), and every
follow-up turn must reuse the KV of the earlier prompt (prefix cache: cached_tokens > 0, and most of the prompt).

The first two assistant turns are scripted tool calls (test hook: the demo model rarely calls tools); the later turns
are the real model's own answers. The same loop runs with the openai client (tool_calls / role "tool") and with the
anthropic client (tool_use / tool_result). The per-turn numbers are printed."""
import json

from harness import WORDS, Server, anthropic_client, check, main

SYSTEM = "You are a coding agent. Use the tools to inspect the project, then answer briefly."
TOOLS = [
    {"type": "function", "function": {"name": "list_files", "description": "List the files in a directory",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "read_file", "description": "Read a text file",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                     "required": ["path"]}}},
]


def fake_tool(name, args, word):
    if name == "list_files":
        return f"README.md\nsrc/main.c\nsrc/{word}.c\n(RESULT-LIST)"
    return f"# Project {word}\nA tiny demo that prints the word {word}. (RESULT-READ)"


def script(word):
    call = "<tool_call>\n{{\"name\": \"{}\", \"arguments\": {}}}\n</tool_call><|im_end|>"
    return [  # each used once, in conversation order; unmarked turns are the real model's
        {"when": "AGENT-TASK", "once": True,
         "text": "I'll look at the files first.\n" + call.format("list_files", json.dumps({"path": "."}))},
        {"when": "RESULT-LIST", "once": True, "text": call.format("read_file", json.dumps({"path": "README.md"}))},
    ]


def max_tokens(turn):
    """Room for the scripted calls; the real model's own answers are kept short (CI has two slow cores)."""
    return 40 if turn <= 2 else 16


def openai_agent(srv, word):
    c = srv.client()
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"AGENT-TASK: what does the {word} project do?"}]
    rows, prev_prompt, n_calls = [], 0, 0
    for turn in range(1, 7):
        r = c.chat.completions.create(model="x", messages=msgs, tools=TOOLS, max_tokens=max_tokens(turn),
                                      temperature=0)
        m = r.choices[0].message
        cached = r.usage.prompt_tokens_details.cached_tokens
        rows.append((turn, r.usage.prompt_tokens, cached, r.usage.prompt_tokens - cached,
                     f"{len(m.tool_calls or [])} call(s)" if m.tool_calls else repr((m.content or "")[:40])))
        if turn > 1:
            check(cached > 0, f"turn {turn}: no prefix-cache hit ({r.usage})")
            check(cached >= 0.9 * prev_prompt, f"turn {turn}: only {cached} of the earlier {prev_prompt} prompt "
                                               "tokens reused")
        prev_prompt = r.usage.prompt_tokens
        msgs.append({"role": "assistant", "content": m.content,
                     **({"tool_calls": [tc.model_dump() for tc in m.tool_calls]} if m.tool_calls else {})})
        if m.tool_calls:
            n_calls += len(m.tool_calls)
            for tc in m.tool_calls:
                msgs.append({"role": "tool", "tool_call_id": tc.id,
                             "content": fake_tool(tc.function.name, json.loads(tc.function.arguments), word)})
        elif turn >= 4:
            break
        else:
            msgs.append({"role": "user", "content": "Thanks. Now say it in five words."})
    check(n_calls >= 2, f"the scripted tool calls did not happen ({n_calls}): {rows}")
    return rows


def anthropic_agent(srv, word):
    c = anthropic_client(srv)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    msgs = [{"role": "user", "content": f"AGENT-TASK: what does the {word} project do?"}]
    rows, prev_prompt, n_calls = [], 0, 0
    for turn in range(1, 7):
        r = c.messages.create(model="x", system=SYSTEM, messages=msgs, tools=tools, max_tokens=max_tokens(turn),
                              extra_body={"temperature": 0})
        u = r.usage
        total = u.input_tokens + u.cache_read_input_tokens
        uses = [b for b in r.content if b.type == "tool_use"]
        rows.append((turn, total, u.cache_read_input_tokens, u.input_tokens,
                     f"{len(uses)} tool_use" if uses else repr("".join(b.text for b in r.content if b.type == "text")[:40])))
        if turn > 1:
            check(u.cache_read_input_tokens > 0, f"turn {turn}: no prefix-cache hit ({u})")
            check(u.cache_read_input_tokens >= 0.9 * prev_prompt, f"turn {turn}: only {u.cache_read_input_tokens} "
                                                                  f"of {prev_prompt} reused")
        prev_prompt = total
        msgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]})
        if uses:
            n_calls += len(uses)
            msgs.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": fake_tool(b.name, b.input, word)} for b in uses]})
        elif turn >= 4:
            break
        else:
            msgs.append({"role": "user", "content": "Thanks. Now say it in five words."})
    check(n_calls >= 2, f"the scripted tool calls did not happen ({n_calls}): {rows}")
    return rows


def show(title, rows):
    print(f"{title}:\n  turn  prompt  cached  new  answer")
    for t, p, c, n, a in rows:
        print(f"  {t:4d}  {p:6d}  {c:6d}  {n:3d}  {a}")


def run(args, rng):
    word = rng.choice(WORDS)
    with Server(args, script=script(word)) as srv:
        show("openai client", openai_agent(srv, word))
    with Server(args, script=script(word)) as srv:
        show("anthropic client", anthropic_agent(srv, word))
        st = srv.status()["prefix_cache"]
        print("prefix cache:", st)


main(run)
