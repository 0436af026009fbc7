#!/usr/bin/env python3
"""Byte-identity of our chat-template interpreter (st-jinja-render) against Python jinja2 configured
the way HF transformers renders chat templates.

  test_jinja.py templates --render BIN   real templates x conversations x add_generation_prompt
  test_jinja.py snippets  --render BIN   small expression/statement snippets
  test_jinja.py errors    --render BIN   unsupported/invalid templates fail at parse time with line/col

Exits non-zero on any mismatch and prints a diff.
"""
import argparse
import difflib
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = 1700000000  # fixed clock for strftime_now (TZ=UTC for both sides)
os.environ["TZ"] = "UTC"
time.tzset()


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    # Mirrors transformers.utils.chat_template_utils._compile_jinja_template.
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(NOW).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def render_py(src, ctx):
    try:
        return True, ENV.from_string(src).render(**ctx)
    except Exception as e:  # noqa: BLE001 - any jinja2 failure means "must fail" for us too
        return False, f"{type(e).__name__}: {e}"


def render_c(binary, tmpl_path, ctx, tmp):
    cpath = os.path.join(tmp, "ctx.json")
    with open(cpath, "w", encoding="utf-8") as f:
        json.dump(ctx, f, ensure_ascii=False)
    p = subprocess.run([binary, tmpl_path, cpath, "--now", str(NOW)], capture_output=True, timeout=60)
    if p.returncode < 0 or p.returncode > 2:
        return None, f"crashed/usage (rc {p.returncode}): {p.stderr.decode(errors='replace')}"
    if p.returncode == 0:
        return True, p.stdout.decode("utf-8", errors="surrogateescape")
    return False, p.stderr.decode(errors="replace").strip()


def show_diff(want, got):
    for line in difflib.unified_diff(want.splitlines(True), got.splitlines(True), "jinja2", "strata", n=2):
        sys.stdout.write("    " + (line if line.endswith("\n") else line + "\n"))
    if want.splitlines() == got.splitlines():
        print(f"    (line endings/trailing bytes differ: {want[-20:]!r} vs {got[-20:]!r})")


def same_error(py_msg, c_msg):
    """Both failed: jinja2's message (after the exception type) must appear in ours."""
    want = py_msg.split(": ", 1)[1] if ": " in py_msg else py_msg
    return want in c_msg or os.environ.get("JINJA_LOOSE_ERRORS") == "1"


def compare(binary, src, ctx, tmp, label):
    """Returns True when both succeed with identical bytes or both fail."""
    tpath = os.path.join(tmp, "t.jinja")
    with open(tpath, "w", encoding="utf-8", newline="") as f:
        f.write(src)
    ok_py, out_py = render_py(src, ctx)
    ok_c, out_c = render_c(binary, tpath, ctx, tmp)
    if ok_c is None:
        print(f"FAIL {label}: {out_c}")
        return False
    if ok_py and ok_c and out_py == out_c:
        return True
    if not ok_py and not ok_c and same_error(out_py, out_c):
        return True
    print(f"FAIL {label}")
    if ok_py and ok_c:
        show_diff(out_py, out_c)
    else:
        print(f"    jinja2: {'ok ' + repr(out_py[:300]) if ok_py else out_py[:300]}")
        print(f"    strata: {'ok ' + repr(out_c[:300]) if ok_c else out_c[:300]}")
    return False


# ---- templates x conversations ------------------------------------------------------------------
def context_for(conv, add_generation_prompt):
    # What transformers' apply_chat_template passes to render(): messages, tools (None when absent),
    # documents, add_generation_prompt, the special tokens, and extra kwargs.
    ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
           "add_generation_prompt": add_generation_prompt,
           "bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "pad_token": "<pad>"}
    ctx.update(conv.get("extra", {}))
    return ctx


def run_templates(binary):
    templates = sorted(glob.glob(os.path.join(HERE, "templates", "*.jinja")))
    convs = sorted(glob.glob(os.path.join(HERE, "conversations", "*.json")))
    fails = 0
    both_err = {}
    with tempfile.TemporaryDirectory() as tmp:
        for t in templates:
            src = open(t, encoding="utf-8").read()
            tname = os.path.basename(t)[:-6]
            compiled = ENV.from_string(src)
            cases = []
            for c in convs:
                conv = json.load(open(c, encoding="utf-8"))
                for agp in (False, True):
                    ctx = context_for(conv, agp)
                    cpath = os.path.join(tmp, f"{tname}.{os.path.basename(c)[:-5]}.{agp}.json")
                    with open(cpath, "w", encoding="utf-8") as f:
                        json.dump(ctx, f, ensure_ascii=False)
                    cases.append((f"{os.path.basename(c)[:-5]}/{agp}", ctx, cpath))
            # one process renders every context of this template (batch mode: CTX.out / CTX.err)
            p = subprocess.run([binary, t, *[c[2] for c in cases], "--now", str(NOW)], capture_output=True,
                               timeout=120)
            if p.returncode != 0:
                print(f"FAIL {tname}: st-jinja-render rc {p.returncode}: {p.stderr.decode(errors='replace')}")
                fails += len(cases)
                continue
            npass = 0
            for label, ctx, cpath in cases:
                try:
                    ok_py, out_py = True, compiled.render(**ctx)
                except Exception as e:  # noqa: BLE001
                    ok_py, out_py = False, f"{type(e).__name__}: {e}"
                ok_c = os.path.exists(cpath + ".out")
                out_c = open(cpath + (".out" if ok_c else ".err"), "rb").read().decode("utf-8", "surrogateescape")
                if (ok_py and ok_c and out_py == out_c) or (not ok_py and not ok_c and same_error(out_py, out_c)):
                    npass += 1
                    if not ok_py:
                        both_err.setdefault(tname, []).append(label)
                    continue
                fails += 1
                print(f"FAIL {tname} x {label}")
                if ok_py and ok_c:
                    show_diff(out_py, out_c)
                else:
                    print(f"    jinja2: {'ok ' + repr(out_py[:300]) if ok_py else out_py[:300]}")
                    print(f"    strata: {'ok ' + repr(out_c[:300]) if ok_c else out_c[:300]}")
            print(f"{tname}: {npass}/{len(cases)} identical"
                  + (f" ({len(both_err.get(tname, []))} of them: both raise)" if both_err.get(tname) else ""))
    for t, l in both_err.items():
        print(f"  {t}: both raise on {', '.join(l)}")
    return fails


# ---- snippets -----------------------------------------------------------------------------------
SNIP_CTX = {
    "d": {"a": 1, "b": [1, 2], "c": {"x": "y"}},
    "l": [1, 2, 3],
    "s": "hello",
    "e": "",
    "n": None,
    "f": 1.0,
    "g": 2.5e-8,
    "h": 1e22,
    "big": 12345678901234,
    "users": [{"name": "ann", "admin": True, "age": 31, "role": "x"},
              {"name": "bob", "admin": False, "age": 25},
              {"name": "cy", "age": 40, "role": "x"}],
    "messages": [{"role": "assistant", "content": "<think>\nplan\n</think>\n\nanswer"}],
}

SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks
    "a\n  {% if true %}\n    x\n  {% endif %}\nb",
    "{% for i in [1,2] %}\n{{ i }}\n{% endfor %}",
    "  {{- 'x' -}}  \n y",
    "{#- c -#}  a {# c2 #}\nb\n  {# c3 #}\nc",
    "{% raw %}{{ x }}{% endraw %}",
    "  {%- raw -%}  {{ y }}  {%- endraw -%}  z",
    "a\n  {% raw %}\n  {{ x }}\n  {% endraw %}\nb",
    "a {%+ if true %}b{% endif %}",
    "text\n    {% if true +%}\nkeep{% endif %}",
    " {% if true %} x {% endif %} ",
    "x {% if true %}\n y{% endif %}",
    "line\r\nwin\rmac\nend",
    "x\n", "x\n\n", "\n", "",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "{% set x = 1 %}\n\n{{ x }}",
    "\t{% if true %}x{% endif %}\n\t{% if false %}{% endif %}\ny",
    "{%- if true -%}\n\n  a  \n\n{%- endif -%}\n\nb",
    "{{- 'a' }} {{ 'b' -}} \n\t c",
    "a  {#- comment #}  b {#+ c +#}  d",
    "{% if true %}x{% else %}y{% endif %}{% if false %}x{% elif true %}z{% else %}y{% endif %}",
    "{{ '{{' }}{{ '}}' }}{{ {'a': {'b': 1}} }}",
    "{% set d2 = {'k': {'n': 1}} %}{{ d2.k.n }}",
    "{ not a tag } {% if true %}{ x }{% endif %} %} }}",
    # literals
    "{{ 1 }}{{ -1 }}{{ 1.5 }}{{ 1e3 }}{{ 0x1F }}{{ 0o17 }}{{ 0b101 }}{{ 1_000 }}{{ 'a' 'b' }}{{ \"d\\\"q\" }}",
    "{{ '\\u00e9\\x41\\n\\t\\\\' }}{{ '\\U0001F600' }}{{ 'a\\qb' }}{{ '\\101' }}",
    "{{ [1, 'a', none, true, 2.5, [], {}] }}{{ {'a': 1, 'b': [1,2], 3: 'x'} }}{{ (1,) }}{{ () }}{{ (1, 2) }}",
    "{{ \"it's\" }}{{ ['it\\'s', \"q\\\"\", 'b\\\\', \"both'\\\"\"] }}",
    "{{ ['tab\\there', 'nl\\n', 'é😀', '\\u00a0', '\\x7f', '\\x01', '\\u200b'] }}",
    "{{ True }}{{ False }}{{ None }}{{ true }}{{ none }}",
    # arithmetic and numbers
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
    "{{ 1e20 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 10 ** 16 * 1.0 }} {{ 123456789.123 }} {{ 1e16 }} {{ 0.0001 }}",
    "{{ 0.00001 }} {{ -0.0 }} {{ 2.5e-7 }} {{ 1e15 }} {{ 123456789012345678.0 }} {{ 5 % 2.5 }} {{ -7.5 // 2 }} {{ 1.5e300 * 1e10 }}",
    "{{ f }} {{ g }} {{ h }} {{ big }} {{ big * 1000 }} {{ f|tojson }} {{ g|tojson }} {{ h|tojson }}",
    "{{ 'ab' * 3 }}{{ [1] * 3 }}{{ [1] + [2] }}{{ 'a' ~ 1 ~ none ~ true ~ 1.5 }}{{ 1 + true }}{{ 3 * 'x' }}",
    "{{ 1 + 2 * 3 }}{{ (1 + 2) * 3 }}{{ -2 ** 2 }}{{ 2 ** 3 ** 2 }}{{ 'a' ~ (1 + 2) }}{{ not 1 == 2 }}{{ -1|abs }}{{ 'x' + 'abc'|upper }}",
    "{{ '%s is %d' % ('x', 3) }}{{ '%s' % 'y' }}{{ '100%%' % () }}{{ '%r' % 'z' }}",
    # comparisons and logic
    "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ 1 != 2 }}{{ none == none }}",
    "{{ 'a' in 'cat' }}{{ 2 in [1,2] }}{{ 'k' in {'k':1} }}{{ 'x' not in 'abc' }}{{ 'a' in d }}{{ 1 in d.b }}",
    "{{ 0 or 'x' }}{{ 1 and 'y' }}{{ none or [] }}{{ not 0 }}{{ not (1 and 0) }}{{ e or 'empty' }}{{ n and 1 }}",
    "{{ 'a' if true else 'b' }}{{ 'a' if false }}|{{ 1 if 0 else 2 if 1 else 3 }}",
    "{{ [1,2] == [1,2] }}{{ (1,2) == [1,2] }}{{ {'a':1} == {'a':1.0} }}{{ {1: 'a'}[1] }}{{ {1: 'a'}[1.0] }}{{ {1: 'a'}[true] }}",
    "{% if l %}L{% endif %}{% if d %}D{% endif %}{% if '' %}no{% endif %}{% if 0.0 %}no{% endif %}{% if [] %}no{% endif %}",
    # attributes, items, slices
    "{{ d.a }}{{ d['a'] }}{{ d.missing }}|{{ d['b'][0] }}{{ d.b.1 }}{{ l[-1] }}{{ l[10] }}|{{ s[0] }}{{ s[-1] }}{{ d.c.x }}",
    "{{ l[1:] }}{{ l[:-1] }}{{ l[::-1] }}{{ l[::2] }}{{ s[1:3] }}{{ s[::-1] }}{{ l[5:] }}{{ l[-10:2] }}{{ 'héllo'[1:4] }}{{ 'héllo'[1] }}",
    "{{ messages[0].content.split('</think>')[-1].lstrip('\\n') }}|{{ messages[0].content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
    "{{ messages[0]['role'] }}{{ messages[-1].role }}{{ messages|length }}",
    # methods
    "{{ '  x y  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ '\\n\\nz\\n'.strip('\\n') }}",
    "{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a-b-c'.rsplit('-', 1) }}{{ 'abc'.split('x') }}",
    "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}{{ 'aBc'.upper() }}{{ 'AbC'.lower() }}{{ 'hello world-x'.title() }}",
    "{{ 'hELLO'.capitalize() }}{{ 'aaa'.replace('a','b',2) }}{{ 'abc'.find('c') }}{{ 'abcabc'.count('bc') }}{{ ', '.join(['a','b']) }}",
    "{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'a\\nb\\r\\nc'.splitlines() }}{{ 'prefix_x'.removeprefix('prefix_') }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|list }}{{ d.values()|list }}",
    "{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 5) }}{{ l.index(2) }}{{ l.count(1) }}",
    # tests
    "{{ x is defined }}{{ d is mapping }}{{ l is iterable }}{{ s is string }}{{ 1 is number }}{{ none is none }}{{ 3 is odd }}",
    "{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ true is sameas true }}{{ 'a' is eq 'a' }}{{ 2 is gt 1 }}",
    "{{ 2 is in [1,2] }}{{ u is undefined }}{{ 'abc' is lower }}{{ l is sequence }}{{ d is not string }}{{ true is boolean }}",
    "{{ 1 is integer }}{{ 1.0 is float }}{{ true is number }}{{ s is iterable }}{{ u is iterable }}{{ u is sequence }}",
    "{{ n is none }}{{ n is not none }}{{ d is sequence }}{{ 1 is true }}{{ true is true }}{{ 0 is false }}",
    # undefined
    "{{ u }}|{{ u|default('dflt') }}|{{ none|default('x') }}|{{ ''|default('e', true) }}|{{ u is defined }}|{{ u|length }}|{{ u|list }}",
    "{% for x in u %}no{% else %}empty{% endfor %}|{{ u ~ 'a' }}|{{ 'a' in u }}|{{ u|string }}|{{ u|trim }}|{{ u|join(',') }}|{{ u == u }}",
    "{{ d.missing is defined }}{{ d['missing'] is defined }}{{ d.missing|default(7) }}{{ l[99] is defined }}",
    # filters
    "{{ l|length }}{{ s|length }}{{ d|length }}{{ '  t  '|trim }}{{ 'xtx'|trim('x') }}{{ 'ab'|upper }}{{ l|join('-') }}{{ l|join }}",
    "{{ l|first }}{{ l|last }}{{ 'abc'|list }}{{ 3|string }}{{ '42'|int + 1 }}{{ '4.7'|int }}{{ 'x'|int(7) }}{{ '0x1A'|int(0, 16) }}",
    "{{ 3.9|int }}{{ '1.5'|float }}{{ l|reverse|list }}{{ 'abc'|reverse }}{{ d|items|list }}{{ d|dictsort }}{{ none|string }}",
    "{{ [3,1,2]|sort }}{{ ['b','A','a']|sort }}{{ ['b','A','a']|sort(case_sensitive=true) }}{{ [3,1,2]|sort(reverse=true) }}",
    "{{ ['a','A','b','a']|unique|list }}{{ [1,2,3]|sum }}{{ [1,5,3]|max }}{{ [4,2,8]|min }}{{ 'hello world'|title }}",
    "{{ 'hELLO wORLD'|capitalize }}{{ 'abc'|center(9) }}|{{ 'one two  three'|wordcount }}{{ -3|abs }}{{ 2.567|round(2) }}",
    "{{ 2.5|round }}{{ 3.5|round }}{{ 2.1|round(0,'ceil') }}{{ 2.9|round(1,'floor') }}{{ 1|float }}{{ true|int }}",
    "{{ users|map(attribute='name')|join(',') }}{{ users|selectattr('admin')|map(attribute='name')|list }}",
    "{{ users|rejectattr('admin')|map(attribute='name')|list }}{{ users|selectattr('role', 'equalto', 'x')|list|length }}",
    "{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('even')|list }}{{ ['a','b']|map('upper')|list }}",
    "{{ users|map(attribute='missing', default='?')|list }}{{ users|sum(attribute='age') }}{{ users|sort(attribute='age')|map(attribute='name')|list }}",
    "{{ users|selectattr('age', 'gt', 30)|map(attribute='name')|join }}{{ users|selectattr('role', 'defined')|list|length }}",
    "{{ ['code_interpreter', 'x', 'y']|reject('equalto', 'code_interpreter')|join(', ') }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\n'|indent(3) }}|{{ 'a\\nb'|indent('> ') }}",
    "{{ 'a b'|replace(' ', '_') }}{{ 1234|replace('2', 'x') }}{{ 'aaa'|replace('a', 'b', 2) }}{{ 'ab'|replace('', '-') }}",
    "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ l|tojson }}|{{ 'é\"\\n\\u0001\\\\/'|tojson }}|{{ none|tojson }}|{{ 1.0|tojson }}",
    "{{ {'b':1,'a':2}|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}",
    "{{ [[], {}]|tojson(indent=4) }}|{{ (1,2)|tojson }}|{{ {1: 'x', none: 2, true: 3, 2.5: 4}|tojson }}|{{ users|tojson(indent='\\t') }}",
    "{{ '<a>'|e }}{{ '<a>'|safe }}{{ '<a>'|safe + '<b>' }}{{ '<a>'|safe ~ '<b>' }}{{ ('x'|safe) is escaped }}{{ 'x' is escaped }}",
    "{{ '<a>'|tojson|safe }}{{ ('<a>'|safe)|string }}{{ ['<a>'|safe] }}",
    # loops
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('a','b') }}{{ loop.depth }};{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}:{{ loop.length }};{% endfor %}{% for x in [] %}a{% else %}empty{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }}{% endfor %}",
    "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a in [1,2] %}{% for b in [3,4] %}{{ a }}{{ b }}{{ loop.index }}|{% endfor %}{{ loop.index }};{% endfor %}",
    "{% for x in [1] %}{% set outer = loop %}{% for y in [1, 2] %}{{ outer.index }}{{ loop.index }}{% endfor %}{% endfor %}",
    "{% for x in [1,2,3] %}{% if loop.first %}F{% elif loop.last %}L{% else %}M{% endif %}{% endfor %}",
    "{% for x in l if x is odd %}{{ x }}{% else %}none{% endfor %}{% for x in l if x > 9 %}{{ x }}{% else %}none{% endfor %}",
    # scoping
    "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in [1,2] %}[{{ y }}]{% set y = i %}{% endfor %}[{{ y }}]",
    "{% set x = 5 %}{% if true %}{% set x = 6 %}{% endif %}{{ x }}",
    "{% for m in [{'f': {'n': 1}}, {'n': 2}] %}{% if m.f %}{% set m = m.f %}{% endif %}{{ m.n }}{% endfor %}",
    "{% set messages = messages + [{'role': 'user', 'content': 'x'}] %}{{ messages|length }}",
    "{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns }}",
    "{% set ns = namespace(found=false) %}{% for x in l %}{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set (c, e2) = [3, 4] %}{{ c }}{{ e2 }}",
    "{% set blk %}hello {{ 1 + 1 }}{% endset %}[{{ blk }}]",
    # macros
    "{% macro greet(name, greeting='Hi') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }}{{ greet('Al', greeting='Yo') }}{{ greet(name='Z') }}{{ greet() }}",
    "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
    "{% macro m() %}{% if y is not defined %}{% set y = 'd' %}{% endif %}{{ y }}{% endmacro %}{{ m() }}",
    "{% macro m() %}{{ g }}{% endmacro %}{% set g = 1 %}{{ m() }}{% set g = 2 %}{{ m() }}",
    "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
    "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}",
    "{% macro m() -%}\n  body  \n{%- endmacro %}[{{ m() }}]{% set r = m() %}{{ r|length }}{{ m() + 'x' }}",
    "{% macro outer() %}{% for x in [1] %}{{ inner(x) }}{% endfor %}{% endmacro %}{% macro inner(v) %}<{{ v }}>{% endmacro %}{{ outer() }}",
    "{% macro m(x) %}{% for i in x %}{% if loop.last %}{{ i }}{% endif %}{% endfor %}{% endmacro %}{% for x in [[1,2]] %}{{ m(x) }}{{ loop.index }}{% endfor %}",
    # generators, iterators and views behave like jinja2's (truthy, one-shot, no len, not JSON)
    "{% if l|select('gt', 9) %}truthy{% endif %}{% if [] %}{% else %}empty{% endif %}{% if (l|select('gt', 9))|list %}no{% endif %}",
    "{% set g = l|select('odd') %}{{ g|list }}{{ g|list }}{% set h = l|map('string') %}{{ h|first }}{{ h|join }}",
    "{% set r = l|reverse %}{% for x in r %}{{ x }}{% endfor %}{% for x in r %}{{ x }}{% endfor %}{{ 'abc'|reverse }}",
    "{{ d.items() }}{{ d.keys() }}{{ d.values() }}{{ d.items()|length }}{{ d.keys()|list }}{% if d.keys() %}k{% endif %}",
    "{{ range(3)|length }}{{ range(3)[1] }}{{ range(5)[1:3]|list }}{{ 2 in range(3) }}{{ d.keys() is sequence }}",
    "{% set g = [1,2,3]|map('string') %}{{ '2' in g }}{{ g|list }}{{ users|selectattr('admin')|first }}",
    "{% for a, b in d|items %}{{ a }}{% endfor %}{% for x in d|dictsort|reverse %}{{ x }}{% endfor %}",
    "{{ n|selectattr('x')|list }}{{ n|map(attribute='x')|list }}{{ 0|reject('odd')|list }}{{ e|select|list }}",
    "!{{ l|map('string')|tojson }}", "!{{ l|select('odd')|length }}", "!{{ range(3)|tojson }}", "!{{ d.items()|tojson }}",
    "!{{ l|reverse|last }}", "!{{ l|reverse|length }}",
    # globals
    "{{ range(5)|list }}{{ range(2, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ range(0)|list }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %d %b %Y %A') }}{{ strftime_now('') }}",
    "{{ dict(a=1, b=2) }}{{ namespace(x=1).x }}{{ namespace({'y': 2}).y }}",
    "{% generation %}gen {{ 1 }}{% endgeneration %}",
    # failures that must fail on both sides ("!" prefix: jinja2 must raise too)
    "!{{ raise_exception('boom') }}",
    "!{{ u.x }}", "!{{ 'a' + 1 }}", "!{{ 1 / 0 }}", "!{{ u + 1 }}", "!{% set l2 = [] %}{{ l2.append(1) }}",
    "!{{ none|items|list }}", "!{{ 5|length }}", "!{{ x|tojson }}", "!{% for a, b in [1] %}{% endfor %}",
    "!{{ d.update({}) }}", "!{{ 1 < 'a' }}", "!{{ 'ab'.join([1]) }}", "!{{ 'x' in 1 }}", "!{{ 'a' ~ 1 + 2 }}",
    "!{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "!{{ range(1000000)|length }}", "!{{ [1,2]|sum(start='') }}",
    "!{% set ns = 1 %}{% set ns.a = 2 %}", "!{{ d.b.x.y }}", "!{{ messages[0].content + none }}",
]


def run_snippets(binary):
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, src in enumerate(SNIPPETS):
            must_fail = src.startswith("!")
            src = src[1:] if must_fail else src
            if render_py(src, SNIP_CTX)[0] == must_fail:
                print(f"FAIL snippet {i} {src[:70]!r}: jinja2 {'renders' if must_fail else 'raises'}; fix the test")
                fails += 1
                continue
            for ctx in (SNIP_CTX, dict(SNIP_CTX, y="ctx-y")) if "y" in src else (SNIP_CTX,):
                if not compare(binary, src, ctx, tmp, f"snippet {i} {src[:70]!r}"):
                    fails += 1
    print(f"snippets: {len(SNIPPETS) - fails}/{len(SNIPPETS)} identical" if not fails else f"snippets: {fails} failed")
    return fails


# ---- parse errors -------------------------------------------------------------------------------
ERRORS = [  # template, expected "line L col C: message" fragment
    ("{{ x|nosuchfilter }}", "line 1 col 6: unsupported filter 'nosuchfilter'"),
    ("line1\n  {{ x is wibble }}", "line 2 col 11: unsupported test 'wibble'"),
    ("{% extends 'base.html' %}", "line 1 col 4: unsupported tag '{% extends %}'"),
    ("a\n{% include 'x' %}", "line 2 col 4: unsupported tag '{% include %}'"),
    ("{% import 'x' as y %}", "unsupported tag '{% import %}'"),
    ("{% from 'x' import y %}", "unsupported tag '{% from %}'"),
    ("{% macro m() %}{% endmacro %}{% call m() %}x{% endcall %}", "line 1 col 33: unsupported tag '{% call %}'"),
    ("{% filter upper %}x{% endfilter %}", "unsupported tag '{% filter %}'"),
    ("{% with a = 1 %}{% endwith %}", "unsupported tag '{% with %}'"),
    ("{% block b %}{% endblock %}", "unsupported tag '{% block %}'"),
    ("{% do x %}", "unsupported tag '{% do %}'"),
    ("{% for x in y recursive %}{% endfor %}", "line 1 col 15: unsupported construct: recursive for loop"),
    ("\n\n   {{ foo(1) }}", "line 3 col 7: unsupported function 'foo'"),
    ("{{ x.format(1) }}", "line 1 col 6: unsupported method 'format'"),
    ("{% if x %}abc", "unexpected end of template, expected '{% elif %}'"),
    ("{{ x", "unexpected end of template inside a {{ }} tag"),
    ("{# unterminated", "line 1 col 1: missing end of comment tag"),
    ("{% endfor %}", "line 1 col 4: unexpected tag 'endfor'"),
    ("{{ 'abc }}", "unterminated string literal"),
    ("{% break %}", "'break' outside of a for loop"),
    ("{{ f(*args) }}", "unsupported construct: *args/**kwargs in a call"),
    ("{% set x | upper %}a{% endset %}", "unsupported construct: filtered block set"),
    ("{% frobnicate %}", "unknown tag 'frobnicate'"),
    ("{{ 1 + }}", "line 1 col 8: unexpected '}}'"),
    ("{{ (1 }}", "unexpected '}', expected ')'"),
    ("{{ x|map('upper')|nope(1) }}", "unsupported filter 'nope'"),
    ("{% raw %}never closed", "missing end of raw directive"),
    ("{{ '\\xZZ' }}", "truncated \\x escape"),
    ("{{ " + "(" * 300 + "1" + ")" * 300 + " }}", "nested too deeply"),
]


def run_errors(binary):
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        tpath = os.path.join(tmp, "t.jinja")
        for src, want in ERRORS:
            with open(tpath, "w", encoding="utf-8") as f:
                f.write(src)
            p = subprocess.run([binary, tpath, "--parse-only"], capture_output=True, timeout=30)
            msg = p.stderr.decode(errors="replace").strip()
            if p.returncode != 2 or want not in msg or not msg.startswith("chat template line "):
                print(f"FAIL error case {src[:60]!r}: rc {p.returncode}, got {msg!r}, want {want!r}")
                fails += 1
    print(f"errors: {len(ERRORS) - fails}/{len(ERRORS)} rejected at parse time as expected")
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["templates", "snippets", "errors", "all"])
    ap.add_argument("--render", required=True, help="path to st-jinja-render")
    a = ap.parse_args()
    fails = 0
    if a.mode in ("templates", "all"):
        fails += run_templates(a.render)
    if a.mode in ("snippets", "all"):
        fails += run_snippets(a.render)
    if a.mode in ("errors", "all"):
        fails += run_errors(a.render)
    if fails:
        print(f"{fails} failure(s)")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
