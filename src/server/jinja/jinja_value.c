// Values of the chat-template interpreter with Python semantics: str()/repr() formatting, equality
// and ordering, truthiness, json.dumps-compatible tojson, and conversion from jansson.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja_internal.h"

void jfail(jrender *R, const char *fmt, ...) {
    char msg[ST_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = 1;
    for (uint32_t i = 0; i < R->pos && i < R->T->len; i++) line += R->T->src[i] == '\n';
    st_err("%s line %d: %s", R->T->name, line, msg);
    longjmp(R->jb, 1);
}

void jstep(jrender *R, uint64_t n) {
    R->steps += n;
    if (R->steps > R->o.max_steps)
        jfail(R, "template exceeded the step limit (%llu); it loops too long", (unsigned long long)R->o.max_steps);
}

void *jalloc(jrender *R, size_t n) {
    void *p = jarena_alloc(&R->A, n);
    if (!p) jfail(R, "template exceeded the memory limit (%zu bytes)", R->o.max_memory);
    jstep(R, n >> 8);  // charge big allocations as work so copying loops stay bounded in time too
    return p;
}

jv jv_none(void) { jv v = {.t = JV_NONE}; return v; }
jv jv_bool(bool b) { jv v = {.t = JV_BOOL}; v.u.i = b; return v; }
jv jv_int(int64_t i) { jv v = {.t = JV_INT}; v.u.i = i; return v; }
jv jv_float(double f) { jv v = {.t = JV_FLOAT}; v.u.f = f; return v; }

jv jv_undef(jrender *R, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
    char *h = jalloc(R, (size_t)n + 1);
    memcpy(h, msg, (size_t)n + 1);
    jv v = {.t = JV_UNDEF};
    v.u.hint = h;
    return v;
}

jv jv_strn(jrender *R, const char *s, size_t n) {
    jstr *p = jalloc(R, sizeof(jstr) + n + 1);
    p->len = n;
    if (n) memcpy(p->s, s, n);
    p->s[n] = 0;
    jv v = {.t = JV_STR};
    v.u.s = p;
    return v;
}
jv jv_cstr(jrender *R, const char *s) { return jv_strn(R, s, strlen(s)); }

jv jv_list(jrender *R, size_t cap) {
    jlist *l = jalloc(R, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->v = cap ? jalloc(R, sizeof(jv) * cap) : NULL;
    jv v = {.t = JV_LIST};
    v.u.l = l;
    return v;
}

void list_push(jrender *R, jlist *l, jv x) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        jv *nv = jalloc(R, sizeof(jv) * nc);
        if (l->n) memcpy(nv, l->v, sizeof(jv) * l->n);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = x;
}

jv jv_dict(jrender *R, size_t cap) {
    jdict *d = jalloc(R, sizeof *d);
    d->n = 0;
    d->cap = cap;
    d->k = cap ? jalloc(R, sizeof(jv) * cap) : NULL;
    d->v = cap ? jalloc(R, sizeof(jv) * cap) : NULL;
    jv v = {.t = JV_DICT};
    v.u.d = d;
    return v;
}

static bool hashable(jv k) {
    return k.t == JV_NONE || k.t == JV_BOOL || k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_STR ||
           (k.t == JV_LIST && (k.flags & JVF_TUPLE));
}

jv *dict_get(jrender *R, const jdict *d, jv key) {
    if (key.t == JV_STR) {
        for (size_t i = 0; i < d->n; i++)
            if (d->k[i].t == JV_STR && d->k[i].u.s->len == key.u.s->len &&
                !memcmp(d->k[i].u.s->s, key.u.s->s, key.u.s->len))
                return &d->v[i];
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(R, d->k[i], key)) return &d->v[i];
    return NULL;
}

jv *dict_get_s(const jdict *d, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == n && !memcmp(d->k[i].u.s->s, key, n)) return &d->v[i];
    return NULL;
}

void dict_set(jrender *R, jdict *d, jv key, jv val) {
    if (!hashable(key)) jfail(R, "unhashable type: '%s'", jv_typename(key));
    jv *e = dict_get(R, d, key);
    if (e) {
        *e = val;
        return;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        jv *nk = jalloc(R, sizeof(jv) * nc), *nv = jalloc(R, sizeof(jv) * nc);
        if (d->n) {
            memcpy(nk, d->k, sizeof(jv) * d->n);
            memcpy(nv, d->v, sizeof(jv) * d->n);
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
}

// ---- string builder ---------------------------------------------------------------------------
void sb_put(jrender *R, jsb *b, const char *s, size_t n) {
    if (!n) return;
    if (b->n + n > R->o.max_output)
        jfail(R, "rendered text exceeds the output limit (%zu bytes)", R->o.max_output);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = jalloc(R, nc);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
void sb_puts(jrender *R, jsb *b, const char *s) { sb_put(R, b, s, strlen(s)); }
void sb_putc(jrender *R, jsb *b, char c) { sb_put(R, b, &c, 1); }

jv sb_take(jrender *R, jsb *b) {
    // the builder's buffer becomes the string (jstr header copied in front)
    jv v = jv_strn(R, b->p ? b->p : "", b->n);
    return v;
}

void put_utf8_cp(jrender *R, jsb *b, uint32_t cp) {
    char o[4];
    size_t n = 0;
    if (cp >= 0xdc80 && cp <= 0xdcff) {  // an undecodable byte carried through (see jinja_utf8_next)
        o[n++] = (char)(cp - 0xdc00);
    } else if (cp < 0x80) {
        o[n++] = (char)cp;
    } else if (cp < 0x800) {
        o[n++] = (char)(0xc0 | cp >> 6);
        o[n++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[n++] = (char)(0xe0 | cp >> 12);
        o[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[n++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[n++] = (char)(0xf0 | cp >> 18);
        o[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[n++] = (char)(0x80 | (cp & 0x3f));
    }
    sb_put(R, b, o, n);
}

// Code points as the decoder sees them (an invalid byte counts as one, like surrogateescape).
size_t jv_cplen(const jstr *s) {
    size_t n = 0, i = 0;
    bool ascii = true;
    for (size_t k = 0; k < s->len && ascii; k++) ascii = (unsigned char)s->s[k] < 0x80;
    if (ascii) return s->len;
    while (i < s->len) {
        jinja_utf8_next(s->s, s->len, &i);
        n++;
    }
    return n;
}

// ---- Python formatting ------------------------------------------------------------------------
void jinja_float_repr(double x, char *buf) {
    if (isnan(x)) {
        strcpy(buf, "nan");
        return;
    }
    if (isinf(x)) {
        strcpy(buf, x < 0 ? "-inf" : "inf");
        return;
    }
    if (x == 0) {
        strcpy(buf, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    // shortest round-tripping digits, then Python's repr layout (fixed for 1e-4 <= |x| < 1e16)
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    char digits[24];
    int nd = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') neg = true, p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = buf;
    if (neg) *o++ = '-';
    if (exp >= -5 + 1 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) *o++ = digits[i];
            else
                *o++ = '0';
        } else {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp - 1; i++) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = digits[i];
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++) *o++ = digits[i];
        }
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

const char *jv_typename(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST:
        if (v.flags & JVF_TUPLE) return "tuple";
        if (v.flags & JVF_GEN) return "generator";
        if (v.flags & JVF_REVITER) return "list_reverseiterator";
        if (v.flags & JVF_VIEW_ITEMS) return "dict_items";
        if (v.flags & JVF_VIEW_KEYS) return "dict_keys";
        if (v.flags & JVF_VIEW_VALUES) return "dict_values";
        if (v.flags & JVF_RANGE) return "range";
        return "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_BUILTIN: return "function";
    case JV_METHOD: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

_Noreturn void jv_undef_fail(jrender *R, jv v) { jfail(R, "%s", v.u.hint ? v.u.hint : "undefined value"); }

static bool cp_printable(uint32_t c) {
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x7f) return true;
    if (c <= 0xa0 || c == 0xad) return false;
    if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x206f)) return false;
    if (c == 0x3000 || c == 0xfeff || c == 0x1680 || c == 0x180e || (c >= 0xfff9 && c <= 0xfffb)) return false;
    if ((c >= 0xd800 && c <= 0xdfff) || (c >= 0xe000 && c <= 0xf8ff) || c >= 0xf0000) return false;
    return true;
}

static void repr_str(jrender *R, jsb *b, const jstr *s) {
    bool sq = memchr(s->s, '\'', s->len) != NULL, dq = memchr(s->s, '"', s->len) != NULL;
    char q = sq && !dq ? '"' : '\'';
    sb_putc(R, b, q);
    size_t i = 0;
    while (i < s->len) {
        size_t st = i;
        uint32_t c = jinja_utf8_next(s->s, s->len, &i);
        char esc[16];
        if (c == (uint32_t)q || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(R, b, esc, 2);
        } else if (c == '\n') sb_puts(R, b, "\\n");
        else if (c == '\r') sb_puts(R, b, "\\r");
        else if (c == '\t') sb_puts(R, b, "\\t");
        else if (c >= 0xdc80 && c <= 0xdcff) {
            snprintf(esc, sizeof esc, "\\udc%02x", c - 0xdc00);
            sb_puts(R, b, esc);
        } else if (!cp_printable(c)) {
            if (c <= 0xff) snprintf(esc, sizeof esc, "\\x%02x", c);
            else if (c <= 0xffff) snprintf(esc, sizeof esc, "\\u%04x", c);
            else snprintf(esc, sizeof esc, "\\U%08x", c);
            sb_puts(R, b, esc);
        } else {
            sb_put(R, b, s->s + st, i - st);
        }
    }
    sb_putc(R, b, q);
}

static void repr_dict_body(jrender *R, jsb *b, const jdict *d) {
    sb_putc(R, b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) sb_puts(R, b, ", ");
        jv_repr_append(R, b, d->k[i]);
        sb_puts(R, b, ": ");
        jv_repr_append(R, b, d->v[i]);
    }
    sb_putc(R, b, '}');
}

void jv_repr_append(jrender *R, jsb *b, jv v) {
    jstep(R, 1);
    switch (v.t) {
    case JV_UNDEF:
        if (v.flags & JVF_UNSAFE) jv_undef_fail(R, v);
        sb_puts(R, b, "Undefined");
        return;
    case JV_STR:
        if (v.flags & JVF_MARKUP) {
            sb_puts(R, b, "Markup(");
            repr_str(R, b, v.u.s);
            sb_putc(R, b, ')');
        } else {
            repr_str(R, b, v.u.s);
        }
        return;
    case JV_LIST: {
        bool tup = v.flags & JVF_TUPLE;
        if (v.flags & JVF_ONESHOT) {  // CPython prints an address here; no byte-identity possible
            sb_puts(R, b, "<");
            sb_puts(R, b, jv_typename(v));
            sb_puts(R, b, " object>");
            return;
        }
        if (v.flags & JVF_VIEW) {
            sb_puts(R, b, jv_typename(v));
            sb_putc(R, b, '(');
            jv plain = v;
            plain.flags = 0;
            jv_repr_append(R, b, plain);
            sb_putc(R, b, ')');
            return;
        }
        sb_putc(R, b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_puts(R, b, ", ");
            jv_repr_append(R, b, v.u.l->v[i]);
        }
        if (tup && v.u.l->n == 1) sb_putc(R, b, ',');
        sb_putc(R, b, tup ? ')' : ']');
        return;
    }
    case JV_DICT: repr_dict_body(R, b, v.u.d); return;
    case JV_NS:
        sb_puts(R, b, "<Namespace ");
        repr_dict_body(R, b, v.u.d);
        sb_putc(R, b, '>');
        return;
    default: jv_str_append(R, b, v); return;
    }
}

void jv_str_append(jrender *R, jsb *b, jv v) {
    char buf[48];
    switch (v.t) {
    case JV_UNDEF:
        if (v.flags & JVF_UNSAFE) jv_undef_fail(R, v);
        return;
    case JV_NONE: sb_puts(R, b, "None"); return;
    case JV_BOOL: sb_puts(R, b, v.u.i ? "True" : "False"); return;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); sb_puts(R, b, buf); return;
    case JV_FLOAT: jinja_float_repr(v.u.f, buf); sb_puts(R, b, buf); return;
    case JV_STR: sb_put(R, b, v.u.s->s, v.u.s->len); return;
    case JV_LIST: case JV_DICT: case JV_NS: jv_repr_append(R, b, v); return;
    case JV_MACRO:
        sb_puts(R, b, "<Macro '");
        sb_puts(R, b, v.u.m->def->u.macro.name);
        sb_puts(R, b, "'>");
        return;
    case JV_BUILTIN:
        sb_puts(R, b, "<function ");
        sb_puts(R, b, jinja_builtin_names[v.u.i]);
        sb_puts(R, b, ">");
        return;
    case JV_METHOD: sb_puts(R, b, "<built-in method>"); return;
    case JV_LOOP: sb_puts(R, b, "<LoopContext>"); return;
    }
}

jv jv_to_string(jrender *R, jv v) {
    if (v.t == JV_STR) return v;
    jsb b = {0};
    jv_str_append(R, &b, v);
    return sb_take(R, &b);
}

// ---- truthiness, equality, ordering -----------------------------------------------------------
bool jv_truthy(jrender *R, jv v) {
    switch (v.t) {
    case JV_UNDEF:
        if (v.flags & JVF_UNSAFE) jv_undef_fail(R, v);
        return false;
    case JV_NONE: return false;
    case JV_BOOL: case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return (v.flags & JVF_ONESHOT) || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }

bool jv_eq(jrender *R, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i == b.u.i;
        double x = a.t == JV_FLOAT ? a.u.f : (double)a.u.i, y = b.t == JV_FLOAT ? b.u.f : (double)b.u.i;
        return x == y;
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR:
        jstep(R, a.u.s->len >> 8);
        return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JV_LIST:
        if ((a.flags & (JVF_TUPLE | JVF_PYOBJ)) != (b.flags & (JVF_TUPLE | JVF_PYOBJ))) return false;
        if (a.u.l == b.u.l) return true;
        if (a.flags & JVF_ONESHOT) return false;  // iterators compare by identity
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_eq(R, a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        if (a.u.d == b.u.d) return true;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = dict_get(R, b.u.d, a.u.d->k[i]);
            if (!o || !jv_eq(R, a.u.d->v[i], *o)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_BUILTIN: return a.u.i == b.u.i;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

int jv_cmp(jrender *R, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        double x = a.t == JV_FLOAT ? a.u.f : (double)a.u.i, y = b.t == JV_FLOAT ? b.u.f : (double)b.u.i;
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        jstep(R, n >> 8);
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE) &&
        !((a.flags | b.flags) & JVF_PYOBJ)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(R, a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_cmp(R, a.u.l->v[i], b.u.l->v[i]);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == JV_UNDEF) jv_undef_fail(R, a);
    if (b.t == JV_UNDEF) jv_undef_fail(R, b);
    jfail(R, "'<' not supported between instances of '%s' and '%s'", jv_typename(a), jv_typename(b));
}

// ---- tojson (json.dumps) ------------------------------------------------------------------------
static void json_str(jrender *R, jsb *b, const char *s, size_t n, bool ensure_ascii) {
    sb_putc(R, b, '"');
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char buf[16];
        if (c == '"') e = "\\\"";
        else if (c == '\\') e = "\\\\";
        else if (c == '\n') e = "\\n";
        else if (c == '\r') e = "\\r";
        else if (c == '\t') e = "\\t";
        else if (c == '\b') e = "\\b";
        else if (c == '\f') e = "\\f";
        else if (c < 0x20) {
            snprintf(buf, sizeof buf, "\\u%04x", c);
            e = buf;
        } else if (c >= 0x80 && ensure_ascii) {
            sb_put(R, b, s + run, i - run);
            uint32_t cp = jinja_utf8_next(s, n, &i);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(buf, sizeof buf, "\\u%04x", cp);
            }
            sb_puts(R, b, buf);
            run = i;
            continue;
        }
        if (e) {
            sb_put(R, b, s + run, i - run);
            sb_puts(R, b, e);
            run = i + 1;
        }
        i++;
    }
    sb_put(R, b, s + run, n - run);
    sb_putc(R, b, '"');
}

static void json_newline(jrender *R, jsb *b, const char *indent, int level) {
    sb_putc(R, b, '\n');
    for (int i = 0; i < level; i++) sb_puts(R, b, indent);
}

static _Noreturn void json_bad(jrender *R, jv v) {
    if (v.t == JV_UNDEF && (v.flags & JVF_UNSAFE)) jv_undef_fail(R, v);
    jfail(R, "Object of type %s is not JSON serializable", jv_typename(v));
}

static jv json_key(jrender *R, jv k) {
    char buf[48];
    switch (k.t) {
    case JV_STR: return k;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)k.u.i); return jv_cstr(R, buf);
    case JV_FLOAT: jinja_float_repr(k.u.f, buf); return jv_cstr(R, buf);
    case JV_BOOL: return jv_cstr(R, k.u.i ? "true" : "false");
    case JV_NONE: return jv_cstr(R, "null");
    default: jfail(R, "keys must be str, int, float, bool or None, not %s", jv_typename(k));
    }
}

void jv_tojson(jrender *R, jsb *b, jv v, const char *indent, const char *isep, const char *ksep, bool sort_keys,
               bool ensure_ascii, int level) {
    char buf[48];
    jstep(R, 1);
    if (level > 1000) jfail(R, "tojson: value nested too deeply");
    switch (v.t) {
    case JV_NONE: sb_puts(R, b, "null"); return;
    case JV_BOOL: sb_puts(R, b, v.u.i ? "true" : "false"); return;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); sb_puts(R, b, buf); return;
    case JV_FLOAT:
        if (isnan(v.u.f)) sb_puts(R, b, "NaN");
        else if (isinf(v.u.f)) sb_puts(R, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            jinja_float_repr(v.u.f, buf);
            sb_puts(R, b, buf);
        }
        return;
    case JV_STR: json_str(R, b, v.u.s->s, v.u.s->len, ensure_ascii); return;
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (v.flags & JVF_PYOBJ) json_bad(R, v);
        if (!l->n) {
            sb_puts(R, b, "[]");
            return;
        }
        sb_putc(R, b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) sb_puts(R, b, isep);
            if (indent) json_newline(R, b, indent, level + 1);
            jv_tojson(R, b, l->v[i], indent, isep, ksep, sort_keys, ensure_ascii, level + 1);
        }
        if (indent) json_newline(R, b, indent, level);
        sb_putc(R, b, ']');
        return;
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (!d->n) {
            sb_puts(R, b, "{}");
            return;
        }
        size_t *ord = jalloc(R, sizeof(size_t) * d->n);
        for (size_t i = 0; i < d->n; i++) ord[i] = i;
        if (sort_keys) {  // insertion sort keeps it simple; tool schemas are small
            for (size_t i = 1; i < d->n; i++) {
                size_t x = ord[i], j = i;
                while (j > 0 && jv_cmp(R, d->k[ord[j - 1]], d->k[x]) > 0) {
                    ord[j] = ord[j - 1];
                    j--;
                }
                ord[j] = x;
            }
        }
        sb_putc(R, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) sb_puts(R, b, isep);
            if (indent) json_newline(R, b, indent, level + 1);
            jv k = json_key(R, d->k[ord[i]]);
            json_str(R, b, k.u.s->s, k.u.s->len, ensure_ascii);
            sb_puts(R, b, ksep);
            jv_tojson(R, b, d->v[ord[i]], indent, isep, ksep, sort_keys, ensure_ascii, level + 1);
        }
        if (indent) json_newline(R, b, indent, level);
        sb_putc(R, b, '}');
        return;
    }
    default: json_bad(R, v);
    }
}

jv jv_from_json(jrender *R, const json_t *j, int depth) {
    if (depth > 2000) jfail(R, "context JSON nested too deeply");
    if (!j) return jv_none();
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_strn(R, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jv l = jv_list(R, n);
        for (size_t i = 0; i < n; i++) l.u.l->v[i] = jv_from_json(R, json_array_get(j, i), depth + 1);
        l.u.l->n = n;
        return l;
    }
    case JSON_OBJECT: {
        jv d = jv_dict(R, json_object_size(j));
        const char *k;
        json_t *val;
        void *tmp;
        size_t klen;
        json_object_keylen_foreach_safe((json_t *)j, tmp, k, klen, val) {
            jdict *dd = d.u.d;
            dd->k[dd->n] = jv_strn(R, k, klen);
            dd->v[dd->n] = jv_from_json(R, val, depth + 1);
            dd->n++;
        }
        return d;
    }
    }
    return jv_none();
}
