// Evaluator of the chat-template Jinja subset: statements, expressions, and the filters, tests,
// methods and globals that chat templates use, each with the semantics of jinja2 3.1 running in
// transformers' ImmutableSandboxedEnvironment (see jinja.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/jinja/jinja_internal.h"

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

// ---- tables -----------------------------------------------------------------------------------
enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE, F_FIRST,
    F_FLOAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN,
    F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT,
    F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT, F_COUNT_
};
static const char *const filter_names[F_COUNT_] = {
    "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first",
    "float", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
    "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount",
};

enum {
    T_BOOLEAN, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_ESCAPED, T_EVEN, T_FALSE, T_FILTER,
    T_FLOAT, T_GE, T_GREATERTHAN, T_GT, T_IN, T_INTEGER, T_ITERABLE, T_LE, T_LESSTHAN, T_LOWER, T_LT,
    T_MAPPING, T_NE, T_NONE, T_NUMBER, T_ODD, T_SAMEAS, T_SEQUENCE, T_STRING, T_TEST, T_TRUE, T_UNDEFINED,
    T_UPPER, T_COUNT_
};
static const char *const test_names[T_COUNT_] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
    "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt",
    "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined",
    "upper",
};

// Methods reachable as attributes. Mutating ones are listed so that calling them gives the same
// "unsafe" error as transformers' immutable sandbox instead of a parse error.
static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "rfind", "count", "join", "isdigit", "isalpha", "isalnum", "isspace",
    "islower", "isupper", "splitlines", "removeprefix", "removesuffix", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const dict_unsafe[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};
static const char *const list_methods[] = {"index", "count", "copy", NULL};
static const char *const list_unsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort",
                                          "clear", NULL};

static int find_name(const char *const *tab, int n, const char *name) {
    for (int i = 0; n < 0 ? tab[i] != NULL : i < n; i++)
        if (!strcmp(tab[i], name)) return i;
    return -1;
}
int jinja_filter_id(const char *name) { return find_name(filter_names, F_COUNT_, name); }
int jinja_test_id(const char *name) { return find_name(test_names, T_COUNT_, name); }
bool jinja_method_known(const char *name) {
    return find_name(str_methods, -1, name) >= 0 || find_name(dict_methods, -1, name) >= 0 ||
           find_name(dict_unsafe, -1, name) >= 0 || find_name(list_methods, -1, name) >= 0 ||
           find_name(list_unsafe, -1, name) >= 0 || !strcmp(name, "cycle");
}
const char *const jinja_builtin_names[BI_COUNT] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
int jinja_builtin_id(const char *name) { return find_name(jinja_builtin_names, BI_COUNT, name); }

// ---- helpers ----------------------------------------------------------------------------------
typedef struct jloop {
    jlist *items;
    size_t i;
} jloop;

typedef struct jmethod {
    jv self;
    const char *name;
} jmethod;

typedef struct jargs {  // evaluated call arguments
    jv *pos;
    int npos;
    const char **kwn;
    jv *kw;
    int nkw;
    const char *what;  // "filter 'join'" for messages
} jargs;

// Argument `idx` (positional) or `name` (keyword); NULL when absent.
static jv *arg(jargs *a, int idx, const char *name) {
    if (idx >= 0 && idx < a->npos) return &a->pos[idx];
    for (int i = 0; name && i < a->nkw; i++)
        if (!strcmp(a->kwn[i], name)) return &a->kw[i];
    return NULL;
}

static void check_args(jrender *R, jargs *a, int maxpos, const char *const *kwok) {
    if (a->npos > maxpos) jfail(R, "%s takes at most %d argument(s) (%d given)", a->what, maxpos, a->npos);
    for (int i = 0; i < a->nkw; i++) {
        bool ok = false;
        for (int k = 0; kwok && kwok[k] && !ok; k++) ok = !strcmp(kwok[k], a->kwn[i]);
        if (!ok) jfail(R, "%s got an unexpected keyword argument '%s'", a->what, a->kwn[i]);
    }
}

static bool is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.u.f : (double)v.u.i; }

static jv need_str(jrender *R, jv v, const char *what) {
    if (v.t == JV_UNDEF) jv_undef_fail(R, v);
    if (v.t != JV_STR) jfail(R, "%s: expected a string, got %s", what, jv_typename(v));
    return v;
}

static int64_t need_int(jrender *R, jv v, const char *what) {
    if (v.t == JV_UNDEF) jv_undef_fail(R, v);
    if (v.t != JV_INT && v.t != JV_BOOL)
        jfail(R, "%s: '%s' object cannot be interpreted as an integer", what, jv_typename(v));
    return v.u.i;
}

// Items of an iterable as Python's iter() yields them: list items, dict keys, string characters.
static jlist *iter_list(jrender *R, jv v) {
    switch (v.t) {
    case JV_LIST:
        if (v.flags & JVF_ONESHOT) {  // iterating a generator exhausts it
            jv c = jv_list(R, v.u.l->n);
            if (v.u.l->n) memcpy(c.u.l->v, v.u.l->v, sizeof(jv) * v.u.l->n);
            c.u.l->n = v.u.l->n;
            v.u.l->n = 0;
            return c.u.l;
        }
        return v.u.l;
    case JV_DICT: {
        jv l = jv_list(R, v.u.d->n);
        memcpy(l.u.l->v, v.u.d->k, sizeof(jv) * v.u.d->n);
        l.u.l->n = v.u.d->n;
        return l.u.l;
    }
    case JV_STR: {
        jv l = jv_list(R, 0);
        size_t i = 0;
        while (i < v.u.s->len) {
            size_t st = i;
            jinja_utf8_next(v.u.s->s, v.u.s->len, &i);
            list_push(R, l.u.l, jv_strn(R, v.u.s->s + st, i - st));
        }
        return l.u.l;
    }
    case JV_UNDEF:
        if (v.flags & JVF_UNSAFE) jv_undef_fail(R, v);
        return jv_list(R, 0).u.l;
    default: jfail(R, "'%s' object is not iterable", jv_typename(v));
    }
}

static jv as_gen(jv l) {
    l.flags = JVF_GEN;
    return l;
}

static jv mk_tuple2(jrender *R, jv a, jv b) {
    jv t = jv_list(R, 2);
    t.flags = JVF_TUPLE;
    t.u.l->v[0] = a;
    t.u.l->v[1] = b;
    t.u.l->n = 2;
    return t;
}


// Code point offsets of a string: off[k] is the byte offset of code point k, off[n] = len.
static size_t *cp_offsets(jrender *R, const jstr *s, size_t *n) {
    size_t cnt = jv_cplen(s);
    size_t *off = jalloc(R, sizeof(size_t) * (cnt + 1));
    size_t i = 0, k = 0;
    while (i < s->len && k < cnt) {
        off[k++] = i;
        jinja_utf8_next(s->s, s->len, &i);
    }
    off[k] = s->len;
    *n = k;
    return off;
}

// ---- case mapping (ASCII, Latin-1, Greek and Cyrillic basic blocks) ---------------------------
static uint32_t cp_upper(uint32_t c) {
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
    if (c == 0xff) return 0x178;
    if (c == 0xb5) return 0x39c;
    if (c >= 0x3b1 && c <= 0x3cb && c != 0x3c2) return c - 32;
    if (c == 0x3c2) return 0x3a3;
    if (c >= 0x430 && c <= 0x44f) return c - 32;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    return c;
}
static uint32_t cp_lower(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
    if (c >= 0x391 && c <= 0x3ab && c != 0x3a2) return c + 32;
    if (c >= 0x410 && c <= 0x42f) return c + 32;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    return c;
}
static bool cp_alpha(uint32_t c) {
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    return cp_upper(c) != c || cp_lower(c) != c || c == 0xdf || c == 0xaa || c == 0xba ||
           (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3040 && c <= 0x30ff) || (c >= 0xac00 && c <= 0xd7a3);
}

enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_JINJA, CASE_TITLE_PY };
static jv str_case(jrender *R, const jstr *s, int mode) {
    jsb b = {0};
    size_t i = 0;
    bool first = true, prev_cased = false;
    while (i < s->len) {
        uint32_t c = jinja_utf8_next(s->s, s->len, &i), o;
        switch (mode) {
        case CASE_UPPER: o = cp_upper(c); break;
        case CASE_LOWER: o = cp_lower(c); break;
        case CASE_CAPITALIZE: o = first ? cp_upper(c) : cp_lower(c); break;
        case CASE_TITLE_JINJA: {
            // jinja2's title: words split at runs of [-\s({[<]; first char upper, rest lower
            bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || jinja_py_space(c);
            o = sep ? c : (prev_cased ? cp_lower(c) : cp_upper(c));
            prev_cased = !sep;
            break;
        }
        default: {
            bool cased = cp_alpha(c);
            o = cased ? (prev_cased ? cp_lower(c) : cp_upper(c)) : c;
            prev_cased = cased;
        }
        }
        first = false;
        put_utf8_cp(R, &b, o);
    }
    return sb_take(R, &b);
}

// ---- string methods ---------------------------------------------------------------------------
// Decodes `chars` into a code point set for strip(); NULL set = whitespace.
static bool in_cpset(uint32_t c, const uint32_t *set, size_t n) {
    if (!set) return jinja_py_space(c);
    for (size_t i = 0; i < n; i++)
        if (set[i] == c) return true;
    return false;
}

static jv str_strip(jrender *R, jv sv, jv *chars, bool left, bool right) {
    const jstr *s = sv.u.s;
    uint32_t *set = NULL;
    size_t nset = 0;
    if (chars && chars->t != JV_NONE) {
        jv c = need_str(R, *chars, "strip");
        set = jalloc(R, sizeof(uint32_t) * (c.u.s->len + 1));
        size_t i = 0;
        while (i < c.u.s->len) set[nset++] = jinja_utf8_next(c.u.s->s, c.u.s->len, &i);
    }
    size_t a = 0, e = s->len;
    if (left) {
        while (a < e) {
            size_t i = a;
            if (!in_cpset(jinja_utf8_next(s->s, s->len, &i), set, nset)) break;
            a = i;
        }
    }
    if (right) {
        size_t i = a, keep = a;
        while (i < e) {
            uint32_t c = jinja_utf8_next(s->s, s->len, &i);
            if (!in_cpset(c, set, nset)) keep = i;
        }
        e = keep;
    }
    if (a == 0 && e == s->len) return sv;
    return jv_strn(R, s->s + a, e - a);
}

static const char *memfind(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    return memmem(h, hn, n, nn);
}

static const char *memrfind(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

static jv str_split(jrender *R, const jstr *s, jv *sepv, jv *maxv, bool from_right) {
    int64_t maxsplit = -1;
    if (maxv && maxv->t != JV_NONE) maxsplit = need_int(R, *maxv, "split");
    jv out = jv_list(R, 0);
    if (!sepv || sepv->t == JV_NONE) {
        // runs of whitespace separate; empty strings dropped
        size_t i = 0, n = s->len;
        if (!from_right) {
            int64_t done = 0;
            while (i < n) {
                size_t j = i;
                while (j < n) {
                    size_t k = j;
                    if (!jinja_py_space(jinja_utf8_next(s->s, n, &k))) break;
                    j = k;
                }
                i = j;
                if (i >= n) break;
                if (maxsplit >= 0 && done >= maxsplit) {
                    // the rest, with trailing whitespace removed
                    size_t e = i, k = i;
                    while (k < n) {
                        uint32_t c = jinja_utf8_next(s->s, n, &k);
                        if (!jinja_py_space(c)) e = k;
                    }
                    list_push(R, out.u.l, jv_strn(R, s->s + i, e - i));
                    break;
                }
                size_t st = i;
                while (i < n) {
                    size_t k = i;
                    if (jinja_py_space(jinja_utf8_next(s->s, n, &k))) break;
                    i = k;
                }
                list_push(R, out.u.l, jv_strn(R, s->s + st, i - st));
                done++;
            }
            return out;
        }
        if (maxsplit >= 0) jfail(R, "rsplit() with maxsplit and no separator is not supported");
        return str_split(R, s, NULL, NULL, false);
    }
    jv sep = need_str(R, *sepv, "split");
    size_t sn = sep.u.s->len;
    if (!sn) jfail(R, "ValueError: empty separator");
    if (!from_right) {
        const char *p = s->s, *e = s->s + s->len;
        int64_t done = 0;
        for (;;) {
            const char *f = (maxsplit < 0 || done < maxsplit) ? memfind(p, (size_t)(e - p), sep.u.s->s, sn) : NULL;
            if (!f) {
                list_push(R, out.u.l, jv_strn(R, p, (size_t)(e - p)));
                break;
            }
            list_push(R, out.u.l, jv_strn(R, p, (size_t)(f - p)));
            p = f + sn;
            done++;
        }
        return out;
    }
    // rsplit: collect from the right, then reverse
    jv rev = jv_list(R, 0);
    size_t end = s->len;
    int64_t done = 0;
    for (;;) {
        const char *f = (maxsplit < 0 || done < maxsplit) ? memrfind(s->s, end, sep.u.s->s, sn) : NULL;
        if (!f) {
            list_push(R, rev.u.l, jv_strn(R, s->s, end));
            break;
        }
        size_t fo = (size_t)(f - s->s);
        list_push(R, rev.u.l, jv_strn(R, f + sn, end - fo - sn));
        end = fo;
        done++;
    }
    for (size_t i = rev.u.l->n; i-- > 0;) list_push(R, out.u.l, rev.u.l->v[i]);
    return out;
}

static jv str_replace(jrender *R, const jstr *s, const jstr *old, const jstr *nw, int64_t count) {
    jsb b = {0};
    if (old->len == 0) {
        // Python inserts `new` before every code point and at the end
        size_t i = 0;
        int64_t done = 0;
        while (true) {
            if (count < 0 || done < count) {
                sb_put(R, &b, nw->s, nw->len);
                done++;
            }
            if (i >= s->len) break;
            size_t st = i;
            jinja_utf8_next(s->s, s->len, &i);
            sb_put(R, &b, s->s + st, i - st);
        }
        return sb_take(R, &b);
    }
    const char *p = s->s, *e = s->s + s->len;
    int64_t done = 0;
    while (count < 0 || done < count) {
        const char *f = memfind(p, (size_t)(e - p), old->s, old->len);
        if (!f) break;
        sb_put(R, &b, p, (size_t)(f - p));
        sb_put(R, &b, nw->s, nw->len);
        p = f + old->len;
        done++;
    }
    sb_put(R, &b, p, (size_t)(e - p));
    return sb_take(R, &b);
}

static bool str_affix(jrender *R, const jstr *s, jv a, bool suffix) {
    if (a.t == JV_LIST && (a.flags & JVF_TUPLE)) {
        for (size_t i = 0; i < a.u.l->n; i++)
            if (str_affix(R, s, a.u.l->v[i], suffix)) return true;
        return false;
    }
    if (a.t != JV_STR)
        jfail(R, "%s first arg must be str or a tuple of str, not %s", suffix ? "endswith" : "startswith",
              jv_typename(a));
    size_t n = a.u.s->len;
    if (n > s->len) return false;
    return !memcmp(suffix ? s->s + s->len - n : s->s, a.u.s->s, n);
}

static bool is_line_break(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
}

static jv str_splitlines(jrender *R, const jstr *s) {
    jv out = jv_list(R, 0);
    size_t i = 0, st = 0;
    while (i < s->len) {
        size_t k = i;
        uint32_t c = jinja_utf8_next(s->s, s->len, &k);
        if (is_line_break(c)) {
            list_push(R, out.u.l, jv_strn(R, s->s + st, i - st));
            if (c == '\r' && k < s->len && s->s[k] == '\n') k++;
            st = k;
        }
        i = k;
    }
    if (st < s->len) list_push(R, out.u.l, jv_strn(R, s->s + st, s->len - st));
    return out;
}

static jv str_join(jrender *R, jv sep, jv seq, bool convert) {
    jlist *l = iter_list(R, seq);
    jsb b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i) jv_str_append(R, &b, sep);
        jv x = l->v[i];
        if (!convert && x.t != JV_STR)
            jfail(R, "sequence item %zu: expected str instance, %s found", i, jv_typename(x));
        jv_str_append(R, &b, x);
    }
    return sb_take(R, &b);
}

static bool str_all(const jstr *s, int kind) {
    if (!s->len) return false;
    bool any_cased = false;
    size_t i = 0;
    while (i < s->len) {
        uint32_t c = jinja_utf8_next(s->s, s->len, &i);
        switch (kind) {
        case 0: if (!(c >= '0' && c <= '9')) return false; break;
        case 1: if (!cp_alpha(c)) return false; break;
        case 2: if (!cp_alpha(c) && !(c >= '0' && c <= '9')) return false; break;
        case 3: if (!jinja_py_space(c)) return false; break;
        case 4: if (cp_lower(c) != c) return false; if (cp_upper(c) != c) any_cased = true; break;
        case 5: if (cp_upper(c) != c) return false; if (cp_lower(c) != c) any_cased = true; break;
        }
    }
    return kind < 4 || any_cased;
}

static jv call_str_method(jrender *R, jv self, const char *m, jargs *a) {
    const jstr *s = self.u.s;
    a->what = m;
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        check_args(R, a, 1, NULL);
        return str_strip(R, self, arg(a, 0, NULL), m[0] != 'r', m[0] != 'l');
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        static const char *const kw[] = {"sep", "maxsplit", NULL};
        check_args(R, a, 2, kw);
        return str_split(R, s, arg(a, 0, "sep"), arg(a, 1, "maxsplit"), m[0] == 'r');
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        check_args(R, a, 1, NULL);
        jv *p = arg(a, 0, NULL);
        if (!p) jfail(R, "%s() takes at least 1 argument (0 given)", m);
        return jv_bool(str_affix(R, s, *p, m[0] == 'e'));
    }
    if (!strcmp(m, "upper")) return check_args(R, a, 0, NULL), str_case(R, s, CASE_UPPER);
    if (!strcmp(m, "lower")) return check_args(R, a, 0, NULL), str_case(R, s, CASE_LOWER);
    if (!strcmp(m, "title")) return check_args(R, a, 0, NULL), str_case(R, s, CASE_TITLE_PY);
    if (!strcmp(m, "capitalize")) return check_args(R, a, 0, NULL), str_case(R, s, CASE_CAPITALIZE);
    if (!strcmp(m, "replace")) {
        check_args(R, a, 3, NULL);
        jv *o = arg(a, 0, NULL), *n = arg(a, 1, NULL), *c = arg(a, 2, NULL);
        if (!o || !n) jfail(R, "replace() takes at least 2 arguments");
        return str_replace(R, s, need_str(R, *o, m).u.s, need_str(R, *n, m).u.s, c ? need_int(R, *c, m) : -1);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "count")) {
        check_args(R, a, 1, NULL);
        jv *x = arg(a, 0, NULL);
        if (!x) jfail(R, "%s() takes at least 1 argument", m);
        const jstr *n = need_str(R, *x, m).u.s;
        if (m[0] == 'c') {
            if (!n->len) return jv_int((int64_t)jv_cplen(s) + 1);
            int64_t cnt = 0;
            const char *p = s->s, *e = s->s + s->len, *f;
            while ((f = memfind(p, (size_t)(e - p), n->s, n->len))) cnt++, p = f + n->len;
            return jv_int(cnt);
        }
        const char *f = m[0] == 'r' ? memrfind(s->s, s->len, n->s, n->len) : memfind(s->s, s->len, n->s, n->len);
        if (!f) return jv_int(-1);
        size_t cps = 0, q = 0, fo = (size_t)(f - s->s);
        while (q < fo) {
            jinja_utf8_next(s->s, fo, &q);
            cps++;
        }
        return jv_int((int64_t)cps);
    }
    if (!strcmp(m, "join")) {
        check_args(R, a, 1, NULL);
        jv *x = arg(a, 0, NULL);
        if (!x) jfail(R, "join() takes exactly one argument (0 given)");
        return str_join(R, self, *x, false);
    }
    if (!strcmp(m, "isdigit")) return jv_bool(str_all(s, 0));
    if (!strcmp(m, "isalpha")) return jv_bool(str_all(s, 1));
    if (!strcmp(m, "isalnum")) return jv_bool(str_all(s, 2));
    if (!strcmp(m, "isspace")) return jv_bool(str_all(s, 3));
    if (!strcmp(m, "islower")) return jv_bool(str_all(s, 4));
    if (!strcmp(m, "isupper")) return jv_bool(str_all(s, 5));
    if (!strcmp(m, "splitlines")) return check_args(R, a, 0, NULL), str_splitlines(R, s);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        check_args(R, a, 1, NULL);
        jv *x = arg(a, 0, NULL);
        if (!x) jfail(R, "%s() takes exactly one argument (0 given)", m);
        const jstr *p = need_str(R, *x, m).u.s;
        bool suf = m[6] == 's';
        if (!p->len || !str_affix(R, s, *x, suf)) return self;
        return jv_strn(R, suf ? s->s : s->s + p->len, s->len - p->len);
    }
    jfail(R, "'str' object has no attribute '%s'", m);
}

// ---- attribute / item access (jinja2 sandbox getattr / getitem) -------------------------------
static jv bound(jrender *R, jv self, const char *name) {
    jmethod *m = jalloc(R, sizeof *m);
    m->self = self;
    m->name = name;
    jv v = {.t = JV_METHOD};
    v.u.meth = m;
    return v;
}

static jv unsafe_attr(jrender *R, jv obj, const char *name) {
    jv u = jv_undef(R, "access to attribute '%s' of '%s' object is unsafe.", name, jv_typename(obj));
    u.flags = JVF_UNSAFE;
    return u;
}

static jv loop_attr(jrender *R, jv lv, const char *name, bool *found);

// obj.name: Python attributes (methods) first, then the item — what jinja2's getattr does.
static jv get_attr(jrender *R, jv obj, const char *name) {
    switch (obj.t) {
    case JV_UNDEF: jv_undef_fail(R, obj);
    case JV_DICT: {
        if (find_name(dict_methods, -1, name) >= 0) return bound(R, obj, name);
        if (find_name(dict_unsafe, -1, name) >= 0) return unsafe_attr(R, obj, name);
        jv *v = dict_get_s(obj.u.d, name);
        if (v) return *v;
        return jv_undef(R, "'dict object' has no attribute '%s'", name);
    }
    case JV_NS: {
        jv *v = dict_get_s(obj.u.d, name);
        if (v) return *v;
        return jv_undef(R, "'Namespace object' has no attribute '%s'", name);
    }
    case JV_STR:
        if (find_name(str_methods, -1, name) >= 0) return bound(R, obj, name);
        return jv_undef(R, "'str object' has no attribute '%s'", name);
    case JV_LIST:
        if (obj.flags & JVF_PYOBJ) return jv_undef(R, "'%s object' has no attribute '%s'", jv_typename(obj), name);
        if (find_name(list_methods, -1, name) >= 0 && !(obj.flags & JVF_TUPLE && !strcmp(name, "copy")))
            return bound(R, obj, name);
        if (!(obj.flags & JVF_TUPLE) && find_name(list_unsafe, -1, name) >= 0) return unsafe_attr(R, obj, name);
        return jv_undef(R, "'%s object' has no attribute '%s'", jv_typename(obj), name);
    case JV_LOOP: {
        bool found;
        jv v = loop_attr(R, obj, name, &found);
        if (found) return v;
        return jv_undef(R, "'LoopContext object' has no attribute '%s'", name);
    }
    default: return jv_undef(R, "'%s object' has no attribute '%s'", jv_typename(obj), name);
    }
}

static jv slice_of(jrender *R, jv obj, jv *startv, jv *stopv, jv *stepv);

// obj[key]: the item first, then (for string keys) the attribute — jinja2's getitem.
static jv get_item(jrender *R, jv obj, jv key) {
    if (obj.t == JV_UNDEF) jv_undef_fail(R, obj);
    if (key.t == JV_UNDEF && (key.flags & JVF_UNSAFE)) jv_undef_fail(R, key);
    switch (obj.t) {
    case JV_DICT: {
        if (key.t == JV_LIST && !(key.flags & JVF_TUPLE)) break;
        if (key.t == JV_DICT) break;
        jv *v = dict_get(R, obj.u.d, key);
        if (v) return *v;
        break;
    }
    case JV_LIST:
    case JV_STR:
        if (obj.t == JV_LIST && (obj.flags & (JVF_ONESHOT | JVF_VIEW)))
            return jv_undef(R, "'%s' object is not subscriptable", jv_typename(obj));
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = key.u.i;
            if (obj.t == JV_LIST) {
                int64_t n = (int64_t)obj.u.l->n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) return obj.u.l->v[i];
            } else {
                size_t n;
                size_t *off = cp_offsets(R, obj.u.s, &n);
                if (i < 0) i += (int64_t)n;
                if (i >= 0 && i < (int64_t)n) return jv_strn(R, obj.u.s->s + off[i], off[i + 1] - off[i]);
            }
            return jv_undef(R, "%s object has no element %lld", jv_typename(obj), (long long)key.u.i);
        }
        break;
    default: break;
    }
    if (key.t == JV_STR) {
        jv v = get_attr(R, obj, key.u.s->s);
        if (v.t == JV_UNDEF && !(v.flags & JVF_UNSAFE) && obj.t == JV_DICT)
            return jv_undef(R, "'dict object' has no attribute '%s'", key.u.s->s);
        return v;
    }
    jsb b = {0};
    jv_repr_append(R, &b, key);
    sb_putc(R, &b, 0);
    return jv_undef(R, "'%s object' has no attribute %s", jv_typename(obj), b.p);
}

static int64_t slice_arg(jrender *R, jv *v, bool *given) {
    *given = false;
    if (!v || v->t == JV_NONE) return 0;
    *given = true;
    return need_int(R, *v, "slice indices");
}

static jv slice_of(jrender *R, jv obj, jv *startv, jv *stopv, jv *stepv) {
    if (obj.t == JV_UNDEF) jv_undef_fail(R, obj);
    if ((obj.t != JV_LIST && obj.t != JV_STR) || (obj.t == JV_LIST && (obj.flags & (JVF_ONESHOT | JVF_VIEW))))
        return jv_undef(R, "'%s object' is not subscriptable", jv_typename(obj));
    bool gs, ge, gt;
    int64_t start = slice_arg(R, startv, &gs), stop = slice_arg(R, stopv, &ge), step = slice_arg(R, stepv, &gt);
    if (!gt) step = 1;
    if (step == 0) jfail(R, "slice step cannot be zero");
    size_t *off = NULL, ncp;
    int64_t n;
    if (obj.t == JV_LIST) n = (int64_t)obj.u.l->n;
    else {
        off = cp_offsets(R, obj.u.s, &ncp);
        n = (int64_t)ncp;
    }
    // Python's slice.indices()
    if (!gs) start = step < 0 ? n - 1 : 0;
    else {
        if (start < 0) start += n;
        if (start < 0) start = step < 0 ? -1 : 0;
        if (start >= n) start = step < 0 ? n - 1 : n;
    }
    if (!ge) stop = step < 0 ? -1 : n;
    else {
        if (stop < 0) stop += n;
        if (stop < 0) stop = step < 0 ? -1 : 0;
        if (stop >= n) stop = step < 0 ? n - 1 : n;
    }
    if (obj.t == JV_LIST) {
        jv out = jv_list(R, 0);
        out.flags = obj.flags & (JVF_TUPLE | JVF_RANGE);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) list_push(R, out.u.l, obj.u.l->v[i]);
        return out;
    }
    if (step == 1) return jv_strn(R, obj.u.s->s + off[start], start < stop ? off[stop] - off[start] : 0);
    jsb b = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        sb_put(R, &b, obj.u.s->s + off[i], off[i + 1] - off[i]);
    return sb_take(R, &b);
}

// ---- loop object ------------------------------------------------------------------------------
static jv loop_attr(jrender *R, jv lv, const char *name, bool *found) {
    jloop *L = lv.u.loop;
    int64_t i = (int64_t)L->i, n = (int64_t)L->items->n;
    *found = true;
    if (!strcmp(name, "index")) return jv_int(i + 1);
    if (!strcmp(name, "index0")) return jv_int(i);
    if (!strcmp(name, "revindex")) return jv_int(n - i);
    if (!strcmp(name, "revindex0")) return jv_int(n - i - 1);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(n);
    if (!strcmp(name, "depth")) return jv_int(1);
    if (!strcmp(name, "depth0")) return jv_int(0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? L->items->v[i - 1] : jv_undef(R, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? L->items->v[i + 1] : jv_undef(R, "there is no next item");
    if (!strcmp(name, "cycle")) return bound(R, lv, "cycle");
    if (!strcmp(name, "changed")) jfail(R, "unsupported: loop.changed()");
    *found = false;
    return jv_none();
}

// ---- tests ------------------------------------------------------------------------------------
static bool run_test(jrender *R, int id, jv v, jargs *a);
static jv apply_filter(jrender *R, int id, jv v, jargs *a);

static bool contains(jrender *R, jv container, jv item) {
    switch (container.t) {
    case JV_STR:
        if (item.t == JV_UNDEF) jv_undef_fail(R, item);
        if (item.t != JV_STR) jfail(R, "'in <string>' requires string as left operand, not %s", jv_typename(item));
        jstep(R, container.u.s->len >> 8);
        return memfind(container.u.s->s, container.u.s->len, item.u.s->s, item.u.s->len) != NULL;
    case JV_LIST: {
        if (container.flags & JVF_ONESHOT) {  // `in` consumes a generator up to the match
            jlist *g = container.u.l;
            for (size_t i = 0; i < g->n; i++)
                if (jv_eq(R, g->v[i], item)) {
                    memmove(g->v, g->v + i + 1, sizeof(jv) * (g->n - i - 1));
                    g->n -= i + 1;
                    return true;
                }
            g->n = 0;
            return false;
        }
        jlist *l = iter_list(R, container);
        for (size_t i = 0; i < l->n; i++)
            if (jv_eq(R, l->v[i], item)) return true;
        return false;
    }
    case JV_DICT:
        if (!(item.t == JV_NONE || item.t == JV_BOOL || item.t == JV_INT || item.t == JV_FLOAT ||
              item.t == JV_STR || (item.t == JV_LIST && (item.flags & JVF_TUPLE)) || item.t == JV_UNDEF))
            jfail(R, "unhashable type: '%s'", jv_typename(item));
        return dict_get(R, container.u.d, item) != NULL;
    case JV_UNDEF:
        if (container.flags & JVF_UNSAFE) jv_undef_fail(R, container);
        return false;
    default: jfail(R, "argument of type '%s' is not iterable", jv_typename(container));
    }
}

static jv *need_arg(jrender *R, jargs *a, int idx, const char *name) {
    jv *v = arg(a, idx, name);
    if (!v) jfail(R, "%s: missing argument '%s'", a->what, name);
    return v;
}

static bool run_test(jrender *R, int id, jv v, jargs *a) {
    a->what = test_names[id];
    switch (id) {
    case T_DEFINED: return v.t != JV_UNDEF;
    case T_UNDEFINED: return v.t == JV_UNDEF;
    case T_NONE: return v.t == JV_NONE;
    case T_BOOLEAN: return v.t == JV_BOOL;
    case T_FALSE: return v.t == JV_BOOL && !v.u.i;
    case T_TRUE: return v.t == JV_BOOL && v.u.i;
    case T_INTEGER: return v.t == JV_INT;
    case T_FLOAT: return v.t == JV_FLOAT;
    case T_NUMBER: return is_num(v);
    case T_STRING: return v.t == JV_STR;
    case T_MAPPING: return v.t == JV_DICT;
    case T_ITERABLE: return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    case T_SEQUENCE:
        return v.t == JV_STR || (v.t == JV_LIST && !(v.flags & (JVF_ONESHOT | JVF_VIEW))) || v.t == JV_DICT ||
               v.t == JV_UNDEF;
    case T_CALLABLE: return v.t == JV_MACRO || v.t == JV_BUILTIN || v.t == JV_METHOD;
    case T_ESCAPED: return v.t == JV_STR && (v.flags & JVF_MARKUP);
    case T_SAMEAS: {
        jv o = *need_arg(R, a, 0, "other");
        if (v.t != o.t) return false;
        switch (v.t) {
        case JV_NONE: case JV_UNDEF: return v.t == JV_NONE;
        case JV_BOOL: return v.u.i == o.u.i;
        case JV_INT: return v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256;  // CPython's small-int cache
        case JV_STR: return v.u.s == o.u.s;
        case JV_LIST: return v.u.l == o.u.l;
        case JV_DICT: case JV_NS: return v.u.d == o.u.d;
        default: return jv_eq(R, v, o);
        }
    }
    case T_EQ: case T_EQUALTO: return jv_eq(R, v, *need_arg(R, a, 0, "other"));
    case T_NE: return !jv_eq(R, v, *need_arg(R, a, 0, "other"));
    case T_LT: case T_LESSTHAN: return jv_cmp(R, v, *need_arg(R, a, 0, "other")) < 0;
    case T_LE: return jv_cmp(R, v, *need_arg(R, a, 0, "other")) <= 0;
    case T_GT: case T_GREATERTHAN: return jv_cmp(R, v, *need_arg(R, a, 0, "other")) > 0;
    case T_GE: return jv_cmp(R, v, *need_arg(R, a, 0, "other")) >= 0;
    case T_IN: return contains(R, *need_arg(R, a, 0, "seq"), v);
    case T_ODD: case T_EVEN: {
        int64_t i = need_int(R, v, test_names[id]);
        return (i % 2 != 0) == (id == T_ODD);
    }
    case T_DIVISIBLEBY: {
        jv d = *need_arg(R, a, 0, "num");
        if (v.t == JV_UNDEF) jv_undef_fail(R, v);
        if (!is_num(v) || !is_num(d)) jfail(R, "divisibleby: expected numbers");
        if (v.t != JV_FLOAT && d.t != JV_FLOAT) {
            if (!d.u.i) jfail(R, "integer division or modulo by zero");
            return v.u.i % d.u.i == 0;
        }
        if (num_f(d) == 0) jfail(R, "float modulo");
        return fmod(num_f(v), num_f(d)) == 0;
    }
    case T_LOWER: case T_UPPER: {
        jv s = jv_to_string(R, v);
        return str_all(s.u.s, id == T_LOWER ? 4 : 5);
    }
    case T_FILTER: {
        jv n = *need_arg(R, a, 0, "value");
        return n.t == JV_STR && jinja_filter_id(n.u.s->s) >= 0;
    }
    case T_TEST: {
        jv n = *need_arg(R, a, 0, "value");
        return n.t == JV_STR && jinja_test_id(n.u.s->s) >= 0;
    }
    }
    return false;
}

// ---- filters ----------------------------------------------------------------------------------
static jv html_escape(jrender *R, jv v) {
    if (v.t == JV_STR && (v.flags & JVF_MARKUP)) return v;
    jv s = jv_to_string(R, v);
    jsb b = {0};
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = s.u.s->s[i];
        switch (c) {
        case '&': sb_puts(R, &b, "&amp;"); break;
        case '<': sb_puts(R, &b, "&lt;"); break;
        case '>': sb_puts(R, &b, "&gt;"); break;
        case '"': sb_puts(R, &b, "&#34;"); break;
        case '\'': sb_puts(R, &b, "&#39;"); break;
        default: sb_putc(R, &b, c);
        }
    }
    jv r = sb_take(R, &b);
    r.flags = JVF_MARKUP;
    return r;
}

// Follows a dotted attribute path ("a.b", "0") like jinja2's make_attrgetter.
static jv attr_path(jrender *R, jv item, jv attr) {
    if (attr.t == JV_INT) return get_item(R, item, attr);
    jv s = need_str(R, attr, "attribute");
    const char *p = s.u.s->s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++) digits = digits && p[i] >= '0' && p[i] <= '9';
        jv key = digits ? jv_int(strtoll(p, NULL, 10)) : jv_strn(R, p, n);
        item = get_item(R, item, key);
        if (!dot) return item;
        p = dot + 1;
    }
}

// Sort key for sort/unique/min/max: lowercased strings unless case-sensitive.
static jv fold_key(jrender *R, jv v, bool case_sensitive) {
    if (!case_sensitive && v.t == JV_STR) return str_case(R, v.u.s, CASE_LOWER);
    return v;
}

static void stable_sort(jrender *R, jv *vals, jv *keys, size_t n, bool reverse) {
    // merge sort keeps equal keys in order, as Python's sorted() does
    if (n < 2) return;
    jv *tv = jalloc(R, sizeof(jv) * n), *tk = jalloc(R, sizeof(jv) * n);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c = jv_cmp(R, keys[j], keys[i]);
                bool take_j = reverse ? c > 0 : c < 0;
                if (take_j) tv[k] = vals[j], tk[k++] = keys[j++];
                else tv[k] = vals[i], tk[k++] = keys[i++];
            }
            while (i < mid) tv[k] = vals[i], tk[k++] = keys[i++];
            while (j < hi) tv[k] = vals[j], tk[k++] = keys[j++];
        }
        memcpy(vals, tv, sizeof(jv) * n);
        memcpy(keys, tk, sizeof(jv) * n);
    }
}

static jv int_from_str(const jstr *s, int64_t base, bool *ok) {
    // Python int(str, base): optional whitespace and sign, digits with single underscores
    *ok = false;
    const char *p = s->s, *e = s->s + s->len;
    while (p < e && is_num(jv_none()) == false && (*p == ' ' || (*p >= 9 && *p <= 13))) p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13))) e--;
    bool neg = false;
    if (p < e && (*p == '+' || *p == '-')) neg = *p++ == '-';
    if (base == 16 && e - p > 2 && p[0] == '0' && (p[1] | 32) == 'x') p += 2;
    if (base == 8 && e - p > 2 && p[0] == '0' && (p[1] | 32) == 'o') p += 2;
    if (base == 2 && e - p > 2 && p[0] == '0' && (p[1] | 32) == 'b') p += 2;
    if (p >= e) return jv_none();
    int64_t v = 0;
    bool prev_us = true;
    for (; p < e; p++) {
        if (*p == '_') {
            if (prev_us) return jv_none();
            prev_us = true;
            continue;
        }
        int d = *p >= '0' && *p <= '9' ? *p - '0' : (*p | 32) >= 'a' && (*p | 32) <= 'z' ? (*p | 32) - 'a' + 10 : 99;
        if (d >= base) return jv_none();
        if (v > (INT64_MAX - d) / base) return jv_none();
        v = v * base + d;
        prev_us = false;
    }
    if (prev_us) return jv_none();
    *ok = true;
    return jv_int(neg ? -v : v);
}

static bool float_from_str(const jstr *s, double *out) {
    char buf[128];
    size_t a = 0, e = s->len;
    while (a < e && jinja_py_space((unsigned char)s->s[a])) a++;
    while (e > a && jinja_py_space((unsigned char)s->s[e - 1])) e--;
    if (e - a == 0 || e - a >= sizeof buf) return false;
    size_t n = 0;
    for (size_t i = a; i < e; i++)
        if (s->s[i] != '_') buf[n++] = s->s[i];
    buf[n] = 0;
    for (size_t i = 0; i < n; i++)  // reject hex floats and other strtod extensions Python lacks
        if ((buf[i] | 32) == 'x' || (buf[i] | 32) == 'p') return false;
    char *end;
    *out = strtod(buf, &end);
    return *end == 0;
}

static jv to_int(jrender *R, jv v, jv dflt, int64_t base) {
    switch (v.t) {
    case JV_BOOL: case JV_INT: return jv_int(v.u.i);
    case JV_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f) || fabs(v.u.f) >= 9.2e18) return dflt;
        return jv_int((int64_t)v.u.f);
    case JV_STR: {
        bool ok;
        jv r = int_from_str(v.u.s, base, &ok);
        if (ok) return r;
        double f;
        if (float_from_str(v.u.s, &f) && !isnan(f) && !isinf(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
        return dflt;
    }
    default: return dflt;
    }
}

static jv filter_select(jrender *R, jv seq, jargs *a, bool by_attr, bool select) {
    if (!jv_truthy(R, seq)) return as_gen(jv_list(R, 0));  // jinja2: `if value:` before iterating
    jlist *l = iter_list(R, seq);
    jv out = jv_list(R, 0);
    int first_test = by_attr ? 1 : 0;
    jv attr = jv_none();
    if (by_attr) attr = *need_arg(R, a, 0, "attribute");
    int tid = -1;
    jargs ta = {0};
    if (a->npos > first_test) {
        jv tn = need_str(R, a->pos[first_test], a->what);
        tid = jinja_test_id(tn.u.s->s);
        if (tid < 0) jfail(R, "%s: unsupported test '%s'", a->what, tn.u.s->s);
        ta.pos = a->pos + first_test + 1;
        ta.npos = a->npos - first_test - 1;
        ta.kwn = a->kwn;
        ta.kw = a->kw;
        ta.nkw = a->nkw;
    }
    for (size_t i = 0; i < l->n; i++) {
        jstep(R, 1);
        jv x = by_attr ? attr_path(R, l->v[i], attr) : l->v[i];
        bool r = tid < 0 ? jv_truthy(R, x) : run_test(R, tid, x, &ta);
        if (r == select) list_push(R, out.u.l, l->v[i]);
    }
    return as_gen(out);
}

static jv filter_indent(jrender *R, jv v, jargs *a) {
    static const char *const kw[] = {"width", "first", "blank", NULL};
    check_args(R, a, 3, kw);
    jv *w = arg(a, 0, "width"), *f = arg(a, 1, "first"), *bl = arg(a, 2, "blank");
    jv ind;
    if (w && w->t == JV_STR) ind = *w;
    else {
        int64_t n = w ? need_int(R, *w, "indent") : 4;
        jsb b = {0};
        for (int64_t i = 0; i < n; i++) sb_putc(R, &b, ' ');
        ind = sb_take(R, &b);
    }
    jv s = jv_to_string(R, v);
    // jinja2 appends "\n" before splitlines(), so a trailing newline survives as an empty line
    jsb t = {0};
    sb_put(R, &t, s.u.s->s, s.u.s->len);
    sb_putc(R, &t, '\n');
    jv lines = str_splitlines(R, sb_take(R, &t).u.s);
    jsb b = {0};
    bool blank = bl && jv_truthy(R, *bl);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        jv ln = lines.u.l->v[i];
        if (i) {
            sb_putc(R, &b, '\n');
            if (blank || ln.u.s->len) jv_str_append(R, &b, ind);
        }
        sb_put(R, &b, ln.u.s->s, ln.u.s->len);
    }
    jv r = sb_take(R, &b);
    if (f && jv_truthy(R, *f)) {
        jsb c = {0};
        jv_str_append(R, &c, ind);
        sb_put(R, &c, r.u.s->s, r.u.s->len);
        r = sb_take(R, &c);
    }
    return r;
}

static jv filter_tojson(jrender *R, jv v, jargs *a) {
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    check_args(R, a, 4, kw);
    jv *ea = arg(a, 0, "ensure_ascii"), *ind = arg(a, 1, "indent"), *sep = arg(a, 2, "separators"),
       *sk = arg(a, 3, "sort_keys");
    const char *indent = NULL;
    if (ind && ind->t != JV_NONE) {
        if (ind->t == JV_STR) indent = ind->u.s->s;
        else {
            int64_t n = need_int(R, *ind, "tojson indent");
            if (n > 1000) jfail(R, "tojson: indent too large");
            char *s = jalloc(R, (size_t)(n > 0 ? n : 0) + 1);
            for (int64_t i = 0; i < n; i++) s[i] = ' ';
            s[n > 0 ? n : 0] = 0;
            indent = s;
        }
    }
    const char *isep = indent ? "," : ", ", *ksep = ": ";
    if (sep && sep->t != JV_NONE) {
        if (sep->t != JV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != JV_STR || sep->u.l->v[1].t != JV_STR)
            jfail(R, "tojson: separators must be a pair of strings");
        isep = sep->u.l->v[0].u.s->s;
        ksep = sep->u.l->v[1].u.s->s;
    }
    jsb b = {0};
    jv_tojson(R, &b, v, indent, isep, ksep, sk && jv_truthy(R, *sk), ea && jv_truthy(R, *ea), 0);
    return sb_take(R, &b);
}

static jv call_value(jrender *R, jv fn, jargs *a);
static jv arith(jrender *R, int op, jv a, jv b);

static jv apply_filter(jrender *R, int id, jv v, jargs *a) {
    a->what = filter_names[id];
    jstep(R, 1);
    switch (id) {
    case F_SAFE: {
        check_args(R, a, 0, NULL);
        jv s = jv_to_string(R, v);
        s.flags = JVF_MARKUP;
        return s;
    }
    case F_STRING: {
        check_args(R, a, 0, NULL);
        jv s = jv_to_string(R, v);
        if (v.t == JV_STR) s.flags = v.flags;
        return s;
    }
    case F_TOJSON: return filter_tojson(R, v, a);
    case F_INDENT: return filter_indent(R, v, a);
    case F_TRIM: {
        static const char *const kw[] = {"chars", NULL};
        check_args(R, a, 1, kw);
        jv s = jv_to_string(R, v);
        s.flags = 0;
        return str_strip(R, s, arg(a, 0, "chars"), true, true);
    }
    case F_LENGTH: case F_COUNT:
        check_args(R, a, 0, NULL);
        switch (v.t) {
        case JV_STR: return jv_int((int64_t)jv_cplen(v.u.s));
        case JV_LIST:
            if (v.flags & JVF_ONESHOT) jfail(R, "object of type '%s' has no len()", jv_typename(v));
            return jv_int((int64_t)v.u.l->n);
        case JV_DICT: return jv_int((int64_t)v.u.d->n);
        case JV_UNDEF: if (v.flags & JVF_UNSAFE) jv_undef_fail(R, v); return jv_int(0);
        default: jfail(R, "object of type '%s' has no len()", jv_typename(v));
        }
    case F_UPPER: return check_args(R, a, 0, NULL), str_case(R, jv_to_string(R, v).u.s, CASE_UPPER);
    case F_LOWER: return check_args(R, a, 0, NULL), str_case(R, jv_to_string(R, v).u.s, CASE_LOWER);
    case F_CAPITALIZE: return check_args(R, a, 0, NULL), str_case(R, jv_to_string(R, v).u.s, CASE_CAPITALIZE);
    case F_TITLE: return check_args(R, a, 0, NULL), str_case(R, jv_to_string(R, v).u.s, CASE_TITLE_JINJA);
    case F_D: case F_DEFAULT: {
        static const char *const kw[] = {"default_value", "boolean", NULL};
        check_args(R, a, 2, kw);
        jv *d = arg(a, 0, "default_value"), *b = arg(a, 1, "boolean");
        bool use = v.t == JV_UNDEF || (b && jv_truthy(R, *b) && !jv_truthy(R, v));
        if (use) return d ? *d : jv_strn(R, "", 0);
        return v;
    }
    case F_JOIN: {
        static const char *const kw[] = {"d", "attribute", NULL};
        check_args(R, a, 2, kw);
        jv *d = arg(a, 0, "d"), *at = arg(a, 1, "attribute");
        jv sep = d ? *d : jv_strn(R, "", 0);
        if (at && at->t != JV_NONE) {
            jlist *l = iter_list(R, v);
            jv m = jv_list(R, l->n);
            for (size_t i = 0; i < l->n; i++) list_push(R, m.u.l, attr_path(R, l->v[i], *at));
            v = m;
        }
        return str_join(R, jv_to_string(R, sep), v, true);
    }
    case F_REPLACE: {
        static const char *const kw[] = {"old", "new", "count", NULL};
        check_args(R, a, 3, kw);
        jv s = jv_to_string(R, v);
        jv o = jv_to_string(R, *need_arg(R, a, 0, "old")), n = jv_to_string(R, *need_arg(R, a, 1, "new"));
        jv *c = arg(a, 2, "count");
        return str_replace(R, s.u.s, o.u.s, n.u.s, c && c->t != JV_NONE ? need_int(R, *c, "replace") : -1);
    }
    case F_ITEMS: {
        check_args(R, a, 0, NULL);
        if (v.t == JV_UNDEF) return jv_list(R, 0);
        if (v.t != JV_DICT) jfail(R, "Can only get item pairs from a mapping.");
        jv out = jv_list(R, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) out.u.l->v[i] = mk_tuple2(R, v.u.d->k[i], v.u.d->v[i]);
        out.u.l->n = v.u.d->n;
        return as_gen(out);
    }
    case F_LIST: {
        check_args(R, a, 0, NULL);
        jlist *l = iter_list(R, v);
        jv out = jv_list(R, l->n);
        if (l->n) memcpy(out.u.l->v, l->v, sizeof(jv) * l->n);
        out.u.l->n = l->n;
        return out;
    }
    case F_FIRST: case F_LAST: {
        check_args(R, a, 0, NULL);
        if (v.t == JV_LIST && (v.flags & JVF_ONESHOT)) {
            if (id == F_LAST) jfail(R, "'%s' object is not reversible", jv_typename(v));
            if (!v.u.l->n) return jv_undef(R, "No first item, sequence was empty.");
            jv x = v.u.l->v[0];  // next() takes one item off the generator
            memmove(v.u.l->v, v.u.l->v + 1, sizeof(jv) * (v.u.l->n - 1));
            v.u.l->n--;
            return x;
        }
        jlist *l = iter_list(R, v);
        if (!l->n) return jv_undef(R, "No %s item, sequence was empty.", id == F_FIRST ? "first" : "last");
        return l->v[id == F_FIRST ? 0 : l->n - 1];
    }
    case F_INT: {
        static const char *const kw[] = {"default", "base", NULL};
        check_args(R, a, 2, kw);
        jv *d = arg(a, 0, "default"), *b = arg(a, 1, "base");
        return to_int(R, v, d ? *d : jv_int(0), b ? need_int(R, *b, "int") : 10);
    }
    case F_FLOAT: {
        static const char *const kw[] = {"default", NULL};
        check_args(R, a, 1, kw);
        jv *d = arg(a, 0, "default");
        if (is_num(v)) return jv_float(num_f(v));
        double f;
        if (v.t == JV_STR && float_from_str(v.u.s, &f)) return jv_float(f);
        return d ? *d : jv_float(0);
    }
    case F_ABS:
        check_args(R, a, 0, NULL);
        if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
        if (v.t == JV_INT || v.t == JV_BOOL) {
            if (v.u.i == INT64_MIN) jfail(R, "integer overflow");
            return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.t == JV_UNDEF) jv_undef_fail(R, v);
        jfail(R, "bad operand type for abs(): '%s'", jv_typename(v));
    case F_ROUND: {
        static const char *const kw[] = {"precision", "method", NULL};
        check_args(R, a, 2, kw);
        jv *p = arg(a, 0, "precision"), *m = arg(a, 1, "method");
        int64_t prec = p ? need_int(R, *p, "round") : 0;
        const char *meth = m ? need_str(R, *m, "round").u.s->s : "common";
        if (v.t == JV_UNDEF) jv_undef_fail(R, v);
        if (!is_num(v)) jfail(R, "round: expected a number, got %s", jv_typename(v));
        double x = num_f(v), sc = pow(10.0, (double)prec), r;
        if (!strcmp(meth, "common")) {
            // Python's round(): correctly rounded decimal, ties to even
            char buf[64];
            snprintf(buf, sizeof buf, "%.*f", (int)(prec < 0 ? 0 : prec > 30 ? 30 : prec), x);
            r = prec >= 0 ? strtod(buf, NULL) : nearbyint(x * sc) / sc;
        } else if (!strcmp(meth, "ceil")) r = ceil(x * sc) / sc;
        else if (!strcmp(meth, "floor")) r = floor(x * sc) / sc;
        else jfail(R, "method must be common, ceil or floor");
        return jv_float(r);
    }
    case F_REVERSE: {
        check_args(R, a, 0, NULL);
        if (v.t == JV_STR) {
            jv none = jv_none(), step = jv_int(-1);
            return slice_of(R, v, &none, &none, &step);
        }
        // reversed() works on lists, tuples, dicts and views (an iterator); a generator is listed first
        bool was_gen = v.t == JV_LIST && (v.flags & JVF_ONESHOT);
        jlist *l = iter_list(R, v);
        jv out = jv_list(R, l->n);
        for (size_t i = 0; i < l->n; i++) out.u.l->v[i] = l->v[l->n - 1 - i];
        out.u.l->n = l->n;
        if (!was_gen) out.flags = JVF_REVITER;
        return out;
    }
    case F_CENTER: {
        static const char *const kw[] = {"width", NULL};
        check_args(R, a, 1, kw);
        jv *w = arg(a, 0, "width");
        int64_t width = w ? need_int(R, *w, "center") : 80;
        jv s = jv_to_string(R, v);
        int64_t len = (int64_t)jv_cplen(s.u.s);
        if (width <= len) return s;
        if (width > 1 << 20) jfail(R, "center: width too large");
        int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
        jsb b = {0};
        for (int64_t i = 0; i < left; i++) sb_putc(R, &b, ' ');
        sb_put(R, &b, s.u.s->s, s.u.s->len);
        for (int64_t i = 0; i < marg - left; i++) sb_putc(R, &b, ' ');
        return sb_take(R, &b);
    }
    case F_WORDCOUNT: {
        check_args(R, a, 0, NULL);
        jv s = jv_to_string(R, v);
        int64_t n = 0;
        bool in = false;
        size_t i = 0;
        while (i < s.u.s->len) {
            uint32_t c = jinja_utf8_next(s.u.s->s, s.u.s->len, &i);
            bool w = cp_alpha(c) || (c >= '0' && c <= '9') || c == '_' || (c >= 0x80 && !jinja_py_space(c));
            if (w && !in) n++;
            in = w;
        }
        return jv_int(n);
    }
    case F_E: case F_ESCAPE: return check_args(R, a, 0, NULL), html_escape(R, v);
    case F_ATTR: {
        check_args(R, a, 1, NULL);
        jv n = need_str(R, *need_arg(R, a, 0, "name"), "attr");
        return get_attr(R, v, n.u.s->s);
    }
    case F_MAP: {
        if (!jv_truthy(R, v)) return as_gen(jv_list(R, 0));  // jinja2: `if value:` before iterating
        jlist *l = iter_list(R, v);
        jv out = jv_list(R, l->n);
        jv *at = arg(a, -1, "attribute");
        if (at) {
            jv *d = arg(a, -1, "default");
            for (size_t i = 0; i < l->n; i++) {
                jv x = attr_path(R, l->v[i], *at);
                if (x.t == JV_UNDEF && d) x = *d;
                list_push(R, out.u.l, x);
            }
            return as_gen(out);
        }
        if (a->npos < 1) jfail(R, "map: expected a filter name or attribute=");
        jv fn = need_str(R, a->pos[0], "map");
        int fid = jinja_filter_id(fn.u.s->s);
        if (fid < 0) jfail(R, "map: unsupported filter '%s'", fn.u.s->s);
        for (size_t i = 0; i < l->n; i++) {
            jargs fa = {a->pos + 1, a->npos - 1, a->kwn, a->kw, a->nkw, NULL};
            list_push(R, out.u.l, apply_filter(R, fid, l->v[i], &fa));
        }
        return as_gen(out);
    }
    case F_SELECT: return filter_select(R, v, a, false, true);
    case F_REJECT: return filter_select(R, v, a, false, false);
    case F_SELECTATTR: return filter_select(R, v, a, true, true);
    case F_REJECTATTR: return filter_select(R, v, a, true, false);
    case F_UNIQUE: case F_SORT: case F_MIN: case F_MAX: {
        static const char *const kw_sort[] = {"reverse", "case_sensitive", "attribute", NULL};
        static const char *const kw_u[] = {"case_sensitive", "attribute", NULL};
        bool is_sort = id == F_SORT;
        check_args(R, a, is_sort ? 3 : 2, is_sort ? kw_sort : kw_u);
        int o = is_sort ? 1 : 0;
        jv *rv = is_sort ? arg(a, 0, "reverse") : NULL, *cs = arg(a, o, "case_sensitive"),
           *at = arg(a, o + 1, "attribute");
        bool csens = cs && jv_truthy(R, *cs);
        jlist *l = iter_list(R, v);
        jv *keys = jalloc(R, sizeof(jv) * (l->n + 1));
        for (size_t i = 0; i < l->n; i++) {
            jv x = at && at->t != JV_NONE ? attr_path(R, l->v[i], *at) : l->v[i];
            keys[i] = fold_key(R, x, csens);
        }
        if (id == F_UNIQUE) {
            jv out = jv_list(R, 0), seen = jv_list(R, 0);
            for (size_t i = 0; i < l->n; i++) {
                jstep(R, seen.u.l->n / 16 + 1);
                if (contains(R, seen, keys[i])) continue;
                list_push(R, seen.u.l, keys[i]);
                list_push(R, out.u.l, l->v[i]);
            }
            return as_gen(out);
        }
        if (id == F_MIN || id == F_MAX) {
            if (!l->n) return jv_undef(R, "No aggregated item, sequence was empty.");
            size_t best = 0;
            for (size_t i = 1; i < l->n; i++) {
                int c = jv_cmp(R, keys[i], keys[best]);
                if (id == F_MIN ? c < 0 : c > 0) best = i;
            }
            return l->v[best];
        }
        jv out = jv_list(R, l->n);
        if (l->n) memcpy(out.u.l->v, l->v, sizeof(jv) * l->n);
        out.u.l->n = l->n;
        stable_sort(R, out.u.l->v, keys, l->n, rv && jv_truthy(R, *rv));
        return out;
    }
    case F_DICTSORT: {
        static const char *const kw[] = {"case_sensitive", "by", "reverse", NULL};
        check_args(R, a, 3, kw);
        jv *cs = arg(a, 0, "case_sensitive"), *by = arg(a, 1, "by"), *rv = arg(a, 2, "reverse");
        if (v.t != JV_DICT) jfail(R, "dictsort: expected a mapping");
        bool by_value = by && by->t == JV_STR && !strcmp(by->u.s->s, "value");
        size_t n = v.u.d->n;
        jv out = jv_list(R, n);
        jv *keys = jalloc(R, sizeof(jv) * (n + 1));
        for (size_t i = 0; i < n; i++) {
            out.u.l->v[i] = mk_tuple2(R, v.u.d->k[i], v.u.d->v[i]);
            keys[i] = fold_key(R, by_value ? v.u.d->v[i] : v.u.d->k[i], cs && jv_truthy(R, *cs));
        }
        out.u.l->n = n;
        stable_sort(R, out.u.l->v, keys, n, rv && jv_truthy(R, *rv));
        return out;
    }
    case F_SUM: {
        static const char *const kw[] = {"attribute", "start", NULL};
        check_args(R, a, 2, kw);
        jv *at = arg(a, 0, "attribute"), *st = arg(a, 1, "start");
        jlist *l = iter_list(R, v);
        jv acc = st ? *st : jv_int(0);
        if (acc.t == JV_STR) jfail(R, "sum() can't sum strings [use ''.join(seq) instead]");
        for (size_t i = 0; i < l->n; i++) {
            jv x = at && at->t != JV_NONE ? attr_path(R, l->v[i], *at) : l->v[i];
            acc = arith(R, OP_ADD, acc, x);
        }
        return acc;
    }
    }
    jfail(R, "unsupported filter");
}

// ---- calls ------------------------------------------------------------------------------------
static int exec_body(jrender *R, jscope *S, const jbody *b);

static jscope *new_scope(jrender *R, jscope *parent) {
    jscope *s = jalloc(R, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(jrender *R, jscope *S, const char *name, jv v) {
    for (int i = 0; i < S->n; i++)
        if (!strcmp(S->names[i], name)) {
            S->vals[i] = v;
            return;
        }
    if (S->n == S->cap) {
        int nc = S->cap ? S->cap * 2 : 8;
        const char **nn = jalloc(R, sizeof(char *) * nc);
        jv *nv = jalloc(R, sizeof(jv) * nc);
        if (S->n) {
            memcpy(nn, S->names, sizeof(char *) * S->n);
            memcpy(nv, S->vals, sizeof(jv) * S->n);
        }
        S->names = nn;
        S->vals = nv;
        S->cap = nc;
    }
    S->names[S->n] = name;
    S->vals[S->n] = v;
    S->n++;
}

static jv lookup(jrender *R, jscope *S, const char *name) {
    for (; S; S = S->parent)
        for (int i = S->n; i-- > 0;)
            if (!strcmp(S->names[i], name)) return S->vals[i];
    jv *v = dict_get_s(R->vars, name);
    if (v) return *v;
    int b = jinja_builtin_id(name);
    if (b >= 0) {
        jv f = {.t = JV_BUILTIN};
        f.u.i = b;
        return f;
    }
    return jv_undef(R, "'%s' is undefined", name);
}

static jv call_macro(jrender *R, jmacro *m, jargs *a) {
    const jnode *d = m->def;
    if (R->depth >= R->o.max_depth) jfail(R, "macro calls nested deeper than %d", R->o.max_depth);
    jscope *S = new_scope(R, m->scope);
    int np = d->u.macro.nparams;
    if (a->npos > np && !d->u.macro.varargs)
        jfail(R, "macro '%s' takes not more than %d argument(s)", d->u.macro.name, np);
    bool *used = jalloc(R, sizeof(bool) * (a->nkw + 1));
    memset(used, 0, sizeof(bool) * (a->nkw + 1));
    for (int i = 0; i < np; i++) {
        const char *pn = d->u.macro.params[i];
        jv v;
        bool have = false;
        if (i < a->npos) {
            v = a->pos[i];
            have = true;
        }
        for (int k = 0; k < a->nkw; k++)
            if (!strcmp(a->kwn[k], pn)) {
                if (have) jfail(R, "macro '%s' got multiple values for argument '%s'", d->u.macro.name, pn);
                v = a->kw[k];
                used[k] = true;
                have = true;
            }
        if (!have) {
            if (d->u.macro.defaults[i]) {
                extern jv jinja_eval_expr(jrender * R, jscope * S, const jnode *n);
                v = jinja_eval_expr(R, S, d->u.macro.defaults[i]);
            } else {
                v = jv_undef(R, "parameter '%s' was not provided", pn);
            }
        }
        scope_set(R, S, pn, v);
    }
    if (d->u.macro.varargs) {
        jv t = jv_list(R, 0);
        t.flags = JVF_TUPLE;
        for (int i = np; i < a->npos; i++) list_push(R, t.u.l, a->pos[i]);
        scope_set(R, S, "varargs", t);
    }
    jv kw = jv_dict(R, 0);
    for (int k = 0; k < a->nkw; k++)
        if (!used[k]) {
            if (!d->u.macro.kwargs)
                jfail(R, "macro '%s' takes no keyword argument '%s'", d->u.macro.name, a->kwn[k]);
            dict_set(R, kw.u.d, jv_cstr(R, a->kwn[k]), a->kw[k]);
        }
    if (d->u.macro.kwargs) scope_set(R, S, "kwargs", kw);
    jsb buf = {0}, *saved = R->out;
    uint32_t savedpos = R->pos;
    R->out = &buf;
    R->depth++;
    exec_body(R, S, &d->u.macro.body);
    R->depth--;
    R->out = saved;
    R->pos = savedpos;
    return sb_take(R, &buf);
}

static jv call_builtin(jrender *R, int id, jargs *a) {
    a->what = jinja_builtin_names[id];
    switch (id) {
    case BI_RANGE: {
        check_args(R, a, 3, NULL);
        int64_t start = 0, stop, step = 1;
        if (a->npos == 0) jfail(R, "range expected at least 1 argument, got 0");
        if (a->npos == 1) stop = need_int(R, a->pos[0], "range");
        else {
            start = need_int(R, a->pos[0], "range");
            stop = need_int(R, a->pos[1], "range");
            if (a->npos == 3) step = need_int(R, a->pos[2], "range");
        }
        if (step == 0) jfail(R, "range() arg 3 must not be zero");
        // the sandbox caps ranges at 100000 items (jinja2.sandbox.MAX_RANGE)
        double cnt = step > 0 ? ceil(((double)stop - (double)start) / (double)step)
                              : ceil(((double)start - (double)stop) / (double)-step);
        if (cnt > 100000) jfail(R, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jv out = jv_list(R, cnt > 0 ? (size_t)cnt : 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) list_push(R, out.u.l, jv_int(i));
        out.flags = JVF_RANGE;
        return out;
    }
    case BI_NAMESPACE: case BI_DICT: {
        jv d = jv_dict(R, 0);
        if (a->npos > 1) jfail(R, "%s expected at most 1 positional argument", a->what);
        if (a->npos == 1) {
            jv src = a->pos[0];
            if (src.t == JV_DICT || src.t == JV_NS) {
                for (size_t i = 0; i < src.u.d->n; i++) dict_set(R, d.u.d, src.u.d->k[i], src.u.d->v[i]);
            } else {
                jlist *l = iter_list(R, src);
                for (size_t i = 0; i < l->n; i++) {
                    jv p = l->v[i];
                    if (p.t != JV_LIST || p.u.l->n != 2) jfail(R, "%s: sequence elements must be pairs", a->what);
                    dict_set(R, d.u.d, p.u.l->v[0], p.u.l->v[1]);
                }
            }
        }
        for (int i = 0; i < a->nkw; i++) dict_set(R, d.u.d, jv_cstr(R, a->kwn[i]), a->kw[i]);
        if (id == BI_NAMESPACE) d.t = JV_NS;
        return d;
    }
    case BI_RAISE: {
        jv m = a->npos ? jv_to_string(R, a->pos[0]) : jv_cstr(R, "");
        jfail(R, "%s", m.u.s->s);
    }
    case BI_STRFTIME: {
        check_args(R, a, 1, NULL);
        jv f = need_str(R, *need_arg(R, a, 0, "format"), "strftime_now");
        time_t now = R->o.now ? (time_t)R->o.now : time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[512];
        size_t n = f.u.s->len ? strftime(buf, sizeof buf, f.u.s->s, &tm) : 0;
        if (f.u.s->len && n == 0) jfail(R, "strftime_now: format too long");
        return jv_strn(R, buf, n);
    }
    }
    jfail(R, "unknown builtin");
}

static jv call_method(jrender *R, jv self, const char *name, jargs *a) {
    switch (self.t) {
    case JV_STR:
        if (find_name(str_methods, -1, name) >= 0) return call_str_method(R, self, name, a);
        break;
    case JV_DICT:
        a->what = name;
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values") || !strcmp(name, "copy")) {
            check_args(R, a, 0, NULL);
            const jdict *d = self.u.d;
            if (name[0] == 'c') {
                jv c = jv_dict(R, d->n);
                for (size_t i = 0; i < d->n; i++) dict_set(R, c.u.d, d->k[i], d->v[i]);
                return c;
            }
            jv out = jv_list(R, d->n);
            for (size_t i = 0; i < d->n; i++)
                out.u.l->v[i] = name[0] == 'i' ? mk_tuple2(R, d->k[i], d->v[i]) : name[0] == 'k' ? d->k[i] : d->v[i];
            out.u.l->n = d->n;
            out.flags = name[0] == 'i' ? JVF_VIEW_ITEMS : name[0] == 'k' ? JVF_VIEW_KEYS : JVF_VIEW_VALUES;
            return out;
        }
        if (!strcmp(name, "get")) {
            check_args(R, a, 2, NULL);
            jv *k = need_arg(R, a, 0, "key"), *d = arg(a, 1, NULL);
            jv *v = dict_get(R, self.u.d, *k);
            return v ? *v : d ? *d : jv_none();
        }
        if (find_name(dict_unsafe, -1, name) >= 0)
            jfail(R, "access to attribute '%s' of 'dict' object is unsafe.", name);
        break;
    case JV_LIST:
        a->what = name;
        if (self.flags & JVF_PYOBJ) break;
        if (!strcmp(name, "index") || !strcmp(name, "count")) {
            check_args(R, a, 1, NULL);
            jv x = *need_arg(R, a, 0, "value");
            int64_t cnt = 0;
            for (size_t i = 0; i < self.u.l->n; i++)
                if (jv_eq(R, self.u.l->v[i], x)) {
                    if (name[0] == 'i') return jv_int((int64_t)i);
                    cnt++;
                }
            if (name[0] == 'i') jfail(R, "list.index(x): x not in list");
            return jv_int(cnt);
        }
        if (!strcmp(name, "copy") && !(self.flags & JVF_TUPLE)) {
            jv c = jv_list(R, self.u.l->n);
            if (self.u.l->n) memcpy(c.u.l->v, self.u.l->v, sizeof(jv) * self.u.l->n);
            c.u.l->n = self.u.l->n;
            return c;
        }
        if (find_name(list_unsafe, -1, name) >= 0 && !(self.flags & JVF_TUPLE))
            jfail(R, "access to attribute '%s' of '%s' object is unsafe.", name, jv_typename(self));
        break;
    case JV_LOOP:
        if (!strcmp(name, "cycle")) {
            if (!a->npos) jfail(R, "no items for cycling given");
            return a->pos[self.u.loop->i % (size_t)a->npos];
        }
        break;
    case JV_UNDEF: jv_undef_fail(R, self);
    default: break;
    }
    jv f = get_attr(R, self, name);
    if (f.t == JV_UNDEF) jv_undef_fail(R, f);
    return call_value(R, f, a);
}

static jv call_value(jrender *R, jv fn, jargs *a) {
    jstep(R, 1);
    switch (fn.t) {
    case JV_MACRO: return call_macro(R, fn.u.m, a);
    case JV_BUILTIN: return call_builtin(R, (int)fn.u.i, a);
    case JV_METHOD: return call_method(R, fn.u.meth->self, fn.u.meth->name, a);
    case JV_UNDEF: jv_undef_fail(R, fn);
    default: jfail(R, "'%s' object is not callable", jv_typename(fn));
    }
}

// ---- expressions ------------------------------------------------------------------------------
static jv eval(jrender *R, jscope *S, const jnode *n);
jv jinja_eval_expr(jrender *R, jscope *S, const jnode *n) { return eval(R, S, n); }

static void eval_args(jrender *R, jscope *S, const jnode *n, jargs *a) {
    memset(a, 0, sizeof *a);
    a->npos = n->u.call.nargs;
    a->nkw = n->u.call.nkw;
    a->kwn = n->u.call.kwnames;
    if (a->npos) a->pos = jalloc(R, sizeof(jv) * a->npos);
    if (a->nkw) a->kw = jalloc(R, sizeof(jv) * a->nkw);
    for (int i = 0; i < a->npos; i++) a->pos[i] = eval(R, S, n->u.call.args[i]);
    for (int i = 0; i < a->nkw; i++) a->kw[i] = eval(R, S, n->u.call.kwargs[i]);
}

static jv undef_check(jrender *R, jv v) {
    if (v.t == JV_UNDEF) jv_undef_fail(R, v);
    return v;
}

static jv arith(jrender *R, int op, jv a, jv b) {
    undef_check(R, a);
    undef_check(R, b);
    static const char *const opname[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (is_num(a) && is_num(b)) {
        bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
        if (!fl && op != OP_DIV) {
            int64_t x = a.u.i, y = b.u.i, r;
            switch (op) {
            case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto ovf; return jv_int(r);
            case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto ovf; return jv_int(r);
            case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto ovf; return jv_int(r);
            case OP_FLOORDIV: case OP_MOD: {
                if (y == 0) jfail(R, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) goto ovf;
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) q--, m += y;
                return jv_int(op == OP_MOD ? m : q);
            }
            case OP_POW: {
                if (y < 0) return jv_float(pow((double)x, (double)y));
                int64_t res = 1;
                for (int64_t i = 0; i < y; i++) {
                    if (__builtin_mul_overflow(res, x, &res)) goto ovf;
                    if (res == 0 || res == 1) break;
                }
                if (res == 1 && x == -1) res = (y % 2) ? -1 : 1;
                return jv_int(res);
            }
            }
        }
        double x = num_f(a), y = num_f(b);
        switch (op) {
        case OP_ADD: return jv_float(x + y);
        case OP_SUB: return jv_float(x - y);
        case OP_MUL: return jv_float(x * y);
        case OP_DIV:
            if (y == 0) jfail(R, "division by zero");
            return jv_float(x / y);
        case OP_FLOORDIV:
            if (y == 0) jfail(R, "float floor division by zero");
            return jv_float(floor(x / y));
        case OP_MOD: {
            if (y == 0) jfail(R, "float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return jv_float(m);
        }
        case OP_POW: return jv_float(pow(x, y));
        }
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        // Markup + str escapes the plain side (markupsafe), plain + plain is plain
        bool mk = (a.flags | b.flags) & JVF_MARKUP;
        if (mk) {
            if (!(a.flags & JVF_MARKUP)) a = html_escape(R, a);
            if (!(b.flags & JVF_MARKUP)) b = html_escape(R, b);
        }
        jsb s = {0};
        sb_put(R, &s, a.u.s->s, a.u.s->len);
        sb_put(R, &s, b.u.s->s, b.u.s->len);
        jv r = sb_take(R, &s);
        if (mk) r.flags = JVF_MARKUP;
        return r;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && a.flags == b.flags && !(a.flags & JVF_PYOBJ)) {
        jv r = jv_list(R, a.u.l->n + b.u.l->n);
        r.flags = a.flags & JVF_TUPLE;
        if (a.u.l->n) memcpy(r.u.l->v, a.u.l->v, sizeof(jv) * a.u.l->n);
        if (b.u.l->n) memcpy(r.u.l->v + a.u.l->n, b.u.l->v, sizeof(jv) * b.u.l->n);
        r.u.l->n = a.u.l->n + b.u.l->n;
        return r;
    }
    if (op == OP_MUL && (((a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL)) ||
                         ((b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL)))) {
        jv s = a.t == JV_INT || a.t == JV_BOOL ? b : a;
        if (s.t == JV_LIST && (s.flags & JVF_PYOBJ))
            jfail(R, "unsupported operand type(s) for *: '%s' and 'int'", jv_typename(s));
        int64_t k = a.t == JV_INT || a.t == JV_BOOL ? a.u.i : b.u.i;
        if (k < 0) k = 0;
        size_t unit = s.t == JV_STR ? s.u.s->len : s.u.l->n * sizeof(jv);
        if (unit && (uint64_t)k > R->o.max_memory / unit) jfail(R, "template exceeded the memory limit");
        if (s.t == JV_STR) {
            jsb o = {0};
            for (int64_t i = 0; i < k; i++) sb_put(R, &o, s.u.s->s, s.u.s->len);
            return sb_take(R, &o);
        }
        jv r = jv_list(R, s.u.l->n * (size_t)k);
        r.flags = s.flags & JVF_TUPLE;
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < s.u.l->n; j++) r.u.l->v[r.u.l->n++] = s.u.l->v[j];
        return r;
    }
    if (op == OP_MOD && a.t == JV_STR) {
        // printf-style formatting: %s %d %i %r %% only
        jlist *args;
        if (b.t == JV_LIST && (b.flags & JVF_TUPLE)) args = b.u.l;
        else {
            jv l = jv_list(R, 1);
            list_push(R, l.u.l, b);
            args = l.u.l;
        }
        size_t ai = 0;
        jsb o = {0};
        const jstr *f = a.u.s;
        for (size_t i = 0; i < f->len; i++) {
            if (f->s[i] != '%') {
                sb_putc(R, &o, f->s[i]);
                continue;
            }
            char c = i + 1 < f->len ? f->s[++i] : 0;
            if (c == '%') {
                sb_putc(R, &o, '%');
                continue;
            }
            if (c != 's' && c != 'd' && c != 'i' && c != 'r')
                jfail(R, "unsupported string format conversion '%%%c'", c ? c : ' ');
            if (ai >= args->n) jfail(R, "not enough arguments for format string");
            jv x = args->v[ai++];
            if (c == 's') jv_str_append(R, &o, x);
            else if (c == 'r') jv_repr_append(R, &o, x);
            else {
                if (!is_num(x)) jfail(R, "%%d format: a real number is required, not %s", jv_typename(x));
                jv_str_append(R, &o, x.t == JV_FLOAT ? jv_int((int64_t)x.u.f) : jv_int(x.u.i));
            }
        }
        if (ai < args->n) jfail(R, "not all arguments converted during string formatting");
        return sb_take(R, &o);
    }
    if (op == OP_ADD && a.t == JV_STR)
        jfail(R, "can only concatenate str (not \"%s\") to str", jv_typename(b));
    jfail(R, "unsupported operand type(s) for %s: '%s' and '%s'", opname[op], jv_typename(a), jv_typename(b));
ovf:
    jfail(R, "integer overflow in '%s'", opname[op]);
}

static jv eval(jrender *R, jscope *S, const jnode *n) {
    R->pos = n->pos;
    jstep(R, 1);
    switch (n->kind) {
    case E_CONST: return n->u.cval;
    case E_NAME: return lookup(R, S, n->u.name);
    case E_LIST: case E_TUPLE: {
        jv l = jv_list(R, (size_t)n->u.seq.n);
        if (n->kind == E_TUPLE) l.flags = JVF_TUPLE;
        for (int i = 0; i < n->u.seq.n; i++) l.u.l->v[i] = eval(R, S, n->u.seq.v[i]);
        l.u.l->n = (size_t)n->u.seq.n;
        return l;
    }
    case E_DICT: {
        jv d = jv_dict(R, (size_t)n->u.seq.n);
        for (int i = 0; i < n->u.seq.n; i++) {
            jv k = eval(R, S, n->u.seq.v[2 * i]);
            jv v = eval(R, S, n->u.seq.v[2 * i + 1]);
            R->pos = n->pos;
            dict_set(R, d.u.d, k, v);
        }
        return d;
    }
    case E_ATTR: {
        jv o = eval(R, S, n->u.attr.obj);
        R->pos = n->pos;
        return get_attr(R, o, n->u.attr.name);
    }
    case E_ITEM: {
        jv o = eval(R, S, n->u.item.obj);
        jv k = eval(R, S, n->u.item.idx);
        R->pos = n->pos;
        return get_item(R, o, k);
    }
    case E_SLICE: {
        jv o = eval(R, S, n->u.slice.obj);
        jv a, b, c;
        jv *pa = NULL, *pb = NULL, *pc = NULL;
        if (n->u.slice.start) a = eval(R, S, n->u.slice.start), pa = &a;
        if (n->u.slice.stop) b = eval(R, S, n->u.slice.stop), pb = &b;
        if (n->u.slice.step) c = eval(R, S, n->u.slice.step), pc = &c;
        R->pos = n->pos;
        return slice_of(R, o, pa, pb, pc);
    }
    case E_CALL: {
        const jnode *fn = n->u.call.fn;
        jargs a;
        if (fn->kind == E_ATTR) {
            jv self = eval(R, S, fn->u.attr.obj);
            eval_args(R, S, n, &a);
            R->pos = n->pos;
            if (self.t == JV_NS || (self.t == JV_DICT && find_name(dict_methods, -1, fn->u.attr.name) < 0 &&
                                    find_name(dict_unsafe, -1, fn->u.attr.name) < 0)) {
                jv f = get_attr(R, self, fn->u.attr.name);
                return call_value(R, f, &a);
            }
            jstep(R, 1);
            return call_method(R, self, fn->u.attr.name, &a);
        }
        jv f = eval(R, S, fn);
        eval_args(R, S, n, &a);
        R->pos = n->pos;
        return call_value(R, f, &a);
    }
    case E_FILTER: {
        jv v = eval(R, S, n->u.call.fn);
        jargs a;
        eval_args(R, S, n, &a);
        R->pos = n->pos;
        if (v.t == JV_UNDEF && (v.flags & JVF_UNSAFE)) jv_undef_fail(R, v);
        return apply_filter(R, n->op, v, &a);
    }
    case E_TEST: {
        jv v = eval(R, S, n->u.call.fn);
        jargs a;
        eval_args(R, S, n, &a);
        R->pos = n->pos;
        bool r = run_test(R, n->op, v, &a);
        return jv_bool(n->u.call.neg ? !r : r);
    }
    case E_BIN: {
        jv a = eval(R, S, n->u.ops.a);
        jv b = eval(R, S, n->u.ops.b);
        R->pos = n->pos;
        return arith(R, n->op, a, b);
    }
    case E_NEG: case E_POS: {
        jv a = undef_check(R, eval(R, S, n->u.ops.a));
        R->pos = n->pos;
        if (a.t == JV_FLOAT) return jv_float(n->kind == E_NEG ? -a.u.f : a.u.f);
        if (a.t == JV_INT || a.t == JV_BOOL) {
            if (n->kind == E_POS) return jv_int(a.u.i);
            if (a.u.i == INT64_MIN) jfail(R, "integer overflow");
            return jv_int(-a.u.i);
        }
        jfail(R, "bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+', jv_typename(a));
    }
    case E_NOT: return jv_bool(!jv_truthy(R, eval(R, S, n->u.ops.a)));
    case E_AND: {
        jv a = eval(R, S, n->u.ops.a);
        return jv_truthy(R, a) ? eval(R, S, n->u.ops.b) : a;
    }
    case E_OR: {
        jv a = eval(R, S, n->u.ops.a);
        return jv_truthy(R, a) ? a : eval(R, S, n->u.ops.b);
    }
    case E_COND:
        if (jv_truthy(R, eval(R, S, n->u.ops.b))) return eval(R, S, n->u.ops.a);
        if (n->u.ops.c) return eval(R, S, n->u.ops.c);
        return jv_undef(R, "the inline if-expression evaluated to false and no else section was defined.");
    case E_CMP: {
        jv left = eval(R, S, n->u.cmp.v[0]);
        for (int i = 0; i < n->u.cmp.n; i++) {
            jv right = eval(R, S, n->u.cmp.v[i + 1]);
            R->pos = n->pos;
            bool r;
            switch (n->u.cmp.ops[i]) {
            case CMP_EQ: r = jv_eq(R, left, right); break;
            case CMP_NE: r = !jv_eq(R, left, right); break;
            case CMP_LT: r = jv_cmp(R, left, right) < 0; break;
            case CMP_LE: r = jv_cmp(R, left, right) <= 0; break;
            case CMP_GT: r = jv_cmp(R, left, right) > 0; break;
            case CMP_GE: r = jv_cmp(R, left, right) >= 0; break;
            case CMP_IN: r = contains(R, right, left); break;
            default: r = !contains(R, right, left); break;
            }
            if (!r) return jv_bool(false);
            left = right;
        }
        return jv_bool(true);
    }
    case E_CONCAT: {
        jsb b = {0};
        for (int i = 0; i < n->u.seq.n; i++) {
            jv v = eval(R, S, n->u.seq.v[i]);
            R->pos = n->pos;
            jv_str_append(R, &b, v);
        }
        return sb_take(R, &b);
    }
    }
    jfail(R, "internal error: bad expression node %d", n->kind);
}

// ---- statements -------------------------------------------------------------------------------
static void assign_targets(jrender *R, jscope *S, const char **targets, int nt, jv v) {
    if (nt == 1) {
        scope_set(R, S, targets[0], v);
        return;
    }
    jlist *l;
    if (v.t == JV_LIST || v.t == JV_STR || v.t == JV_DICT) l = iter_list(R, v);
    else {
        if (v.t == JV_UNDEF) jv_undef_fail(R, v);
        jfail(R, "cannot unpack non-iterable %s object", jv_typename(v));
    }
    if ((int)l->n != nt) {
        if ((int)l->n > nt) jfail(R, "too many values to unpack (expected %d)", nt);
        jfail(R, "not enough values to unpack (expected %d, got %zu)", nt, l->n);
    }
    for (int i = 0; i < nt; i++) scope_set(R, S, targets[i], l->v[i]);
}

static int exec_for(jrender *R, jscope *S, const jnode *n) {
    jv it = eval(R, S, n->u.fors.iter);
    R->pos = n->pos;
    jlist *items = iter_list(R, it);
    if (n->u.fors.filter) {
        jscope *fs = new_scope(R, S);
        jv kept = jv_list(R, 0);
        for (size_t i = 0; i < items->n; i++) {
            jstep(R, 1);
            fs->n = 0;
            assign_targets(R, fs, n->u.fors.targets, n->u.fors.ntargets, items->v[i]);
            if (jv_truthy(R, eval(R, fs, n->u.fors.filter))) list_push(R, kept.u.l, items->v[i]);
        }
        items = kept.u.l;
    }
    if (!items->n) {
        if (n->u.fors.els.n) return exec_body(R, new_scope(R, S), &n->u.fors.els);
        return FLOW_NORMAL;
    }
    jloop *L = jalloc(R, sizeof *L);
    L->items = items;
    jv lv = {.t = JV_LOOP};
    lv.u.loop = L;
    // one scope per iteration: jinja2 starts every iteration from the enclosing values
    jscope *is = new_scope(R, S);
    for (size_t i = 0; i < items->n; i++) {
        jstep(R, 1);
        L->i = i;
        is->n = 0;
        R->pos = n->pos;
        assign_targets(R, is, n->u.fors.targets, n->u.fors.ntargets, items->v[i]);
        scope_set(R, is, "loop", lv);
        int f = exec_body(R, is, &n->u.fors.body);
        if (f == FLOW_BREAK) break;
    }
    return FLOW_NORMAL;
}

static int exec_stmt(jrender *R, jscope *S, const jnode *n) {
    R->pos = n->pos;
    jstep(R, 1);
    switch (n->kind) {
    case S_TEXT: sb_put(R, R->out, n->u.text.s, n->u.text.len); return FLOW_NORMAL;
    case S_OUT: {
        jv v = eval(R, S, n->u.expr);
        R->pos = n->pos;
        jv_str_append(R, R->out, v);
        return FLOW_NORMAL;
    }
    case S_IF:
        if (jv_truthy(R, eval(R, S, n->u.ifs.cond))) return exec_body(R, S, &n->u.ifs.body);
        return exec_body(R, S, &n->u.ifs.els);
    case S_FOR: return exec_for(R, S, n);
    case S_SET: {
        jv v = eval(R, S, n->u.set.value);
        R->pos = n->pos;
        if (n->u.set.attr) {
            jv ns = lookup(R, S, n->u.set.targets[0]);
            if (ns.t != JV_NS)
                jfail(R, "cannot assign attribute on non-namespace object (setting '%s')", n->u.set.attr);
            dict_set(R, ns.u.d, jv_cstr(R, n->u.set.attr), v);
        } else {
            assign_targets(R, S, n->u.set.targets, n->u.set.ntargets, v);
        }
        return FLOW_NORMAL;
    }
    case S_SETBLOCK: {
        jsb buf = {0}, *saved = R->out;
        R->out = &buf;
        int f = exec_body(R, S, &n->u.set.body);
        R->out = saved;
        scope_set(R, S, n->u.set.targets[0], sb_take(R, &buf));
        return f;
    }
    case S_MACRO: {
        jmacro *m = jalloc(R, sizeof *m);
        m->def = n;
        m->scope = S;
        jv v = {.t = JV_MACRO};
        v.u.m = m;
        scope_set(R, S, n->u.macro.name, v);
        return FLOW_NORMAL;
    }
    case S_BREAK: return FLOW_BREAK;
    case S_CONTINUE: return FLOW_CONTINUE;
    case S_BLOCK: return exec_body(R, S, &n->u.block);
    }
    jfail(R, "internal error: bad statement node %d", n->kind);
}

static int exec_body(jrender *R, jscope *S, const jbody *b) {
    for (int i = 0; i < b->n; i++) {
        int f = exec_stmt(R, S, b->v[i]);
        if (f != FLOW_NORMAL) return f;
    }
    return FLOW_NORMAL;
}

// ---- entry points -----------------------------------------------------------------------------
int st_jinja_render_ex(const st_jinja_template *t, const json_t *context, const st_jinja_opts *opts, char **out,
                       size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return st_err("st_jinja_render: no template");
    if (context && !json_is_object(context)) return st_err("%s: render context must be a JSON object", t->name);
    jrender *R = calloc(1, sizeof *R);
    if (!R) return st_err("%s: out of memory", t->name);
    R->T = t;
    if (opts) R->o = *opts;
    if (!R->o.max_output) R->o.max_output = (size_t)64 << 20;
    if (!R->o.max_memory) R->o.max_memory = (size_t)512 << 20;
    if (!R->o.max_steps) R->o.max_steps = 50000000;
    if (!R->o.max_depth) R->o.max_depth = 64;
    R->A.cap = R->o.max_memory;
    if (setjmp(R->jb)) {
        jarena_free(&R->A);
        free(R);
        return -1;
    }
    jv ctx = context ? jv_from_json(R, context, 0) : jv_dict(R, 0);
    R->vars = ctx.u.d;
    R->root = new_scope(R, NULL);
    jsb top = {0};
    R->out = &top;
    exec_body(R, R->root, &t->body);
    char *res = malloc(top.n + 1);
    if (!res) {
        jarena_free(&R->A);
        free(R);
        return st_err("%s: out of memory for the rendered text", t->name);
    }
    if (top.n) memcpy(res, top.p, top.n);
    res[top.n] = 0;
    *out = res;
    if (out_len) *out_len = top.n;
    jarena_free(&R->A);
    free(R);
    return 0;
}

int st_jinja_render(const st_jinja_template *t, const json_t *context, char **out, size_t *out_len) {
    return st_jinja_render_ex(t, context, NULL, out, out_len);
}
