// Lexer and parser of the chat-template Jinja subset. The lexer follows jinja2's own rules (its
// regexes in lexer.py, as configured by transformers: trim_blocks + lstrip_blocks), because the
// whitespace handling is what makes or breaks byte-identical prompts. The parser is a recursive
// descent with jinja2's operator precedence (parser.py: condexpr < or < and < not < compare <
// +,- < ~ < *,/,//,% < ** < unary < postfix/filter/test).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja_internal.h"
#include "util/err.h"

// ---- arena ------------------------------------------------------------------------------------
void *jarena_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jchunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t sz = n > 65536 / 4 ? n : 65536;
        if (a->total + sz > a->cap) return NULL;
        c = malloc(sizeof(jchunk) + sz);
        if (!c) return NULL;
        c->size = sz;
        c->used = 0;
        a->total += sz;
        if (n >= 65536 / 4 && a->head) {
            // a big block gets its own chunk behind the current one, so the current keeps its space
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *r = c->data + c->used;
    c->used += n;
    return r;
}

void jarena_free(jarena *a) {
    jchunk *c = a->head;
    while (c) {
        jchunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->total = 0;
}

// ---- shared helpers ---------------------------------------------------------------------------
bool jinja_py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

uint32_t jinja_utf8_next(const char *str, size_t len, size_t *i) {
    const unsigned char *s = (const unsigned char *)str;
    size_t p = *i;
    unsigned c = s[p];
    int n = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
    if (n == 0) {
        *i = p + 1;
        return c;
    }
    if (n > 0 && p + (size_t)n < len) {
        uint32_t cp = c & (0x3fu >> n);
        int k;
        for (k = 1; k <= n; k++) {
            if ((s[p + k] & 0xc0) != 0x80) break;
            cp = (cp << 6) | (s[p + k] & 0x3f);
        }
        if (k > n) {
            *i = p + (size_t)n + 1;
            return cp;
        }
    }
    // Invalid byte: map it like Python's surrogateescape so it round-trips and is never "space".
    *i = p + 1;
    return 0xdc00 + c;
}

// ---- lexer ------------------------------------------------------------------------------------
enum { T_EOF, T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

typedef struct jtok {
    int t;
    uint32_t pos;
    const char *s;  // TEXT/STR: decoded text (arena); NAME/OP: points into the source
    size_t len;
    int64_t i;
    double f;
} jtok;

typedef struct jp {
    st_jinja_template *T;
    jarena *A;
    const char *src;
    size_t len;
    jtok *toks;
    size_t ntok, captok, ti;
    jmp_buf jb;
    int depth;      // recursion guard for nested expressions/statements
    int loopdepth;  // for break/continue checks
    // calls of plain names (checked after parsing: must be a builtin or assigned in the template)
    struct { const char *name; uint32_t pos; } *calls;
    size_t ncalls, capcalls;
    const char **assigned;
    size_t nassigned, capassigned;
} jp;

static void line_col(const char *src, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < pos && src[i]; i++) {
        if (src[i] == '\n') l++, c = 1;
        else c++;
    }
    *line = l;
    *col = c;
}

static _Noreturn void ST_PRINTF(3, 4) pfail(jp *p, size_t pos, const char *fmt, ...) {
    char msg[ST_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int l, c;
    line_col(p->src, pos, &l, &c);
    st_err("%s line %d col %d: %s", p->T->name, l, c, msg);
    longjmp(p->jb, 1);
}

static void *palloc(jp *p, size_t n) {
    void *r = jarena_alloc(p->A, n);
    if (!r) pfail(p, 0, "template too large (parse memory limit)");
    memset(r, 0, n);
    return r;
}

static char *pstrdup(jp *p, const char *s, size_t n) {
    char *r = palloc(p, n + 1);
    memcpy(r, s, n);
    r[n] = 0;
    return r;
}

static void grow(jp *p, void **arr, size_t *cap, size_t need, size_t elsz) {
    if (need <= *cap) return;
    size_t nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *r = realloc(*arr, nc * elsz);
    if (!r) pfail(p, 0, "out of memory");
    *arr = r;
    *cap = nc;
}

static jtok *push_tok(jp *p, int t, size_t pos) {
    grow(p, (void **)&p->toks, &p->captok, p->ntok + 1, sizeof(jtok));
    jtok *k = &p->toks[p->ntok++];
    memset(k, 0, sizeof *k);
    k->t = t;
    k->pos = (uint32_t)pos;
    return k;
}


// Python's str.rstrip() length (Unicode whitespace).
static size_t py_rstrip_len(const char *s, size_t n) {
    size_t i = 0, keep = 0;
    while (i < n) {
        uint32_t cp = jinja_utf8_next(s, n, &i);
        if (!jinja_py_space(cp)) keep = i;
    }
    return keep;
}

// Length of the Python `\s*` match at s[i..].
static size_t py_space_run(const char *s, size_t len, size_t i) {
    size_t j = i;
    while (j < len) {
        size_t k = j;
        uint32_t cp = jinja_utf8_next(s, len, &k);
        if (!jinja_py_space(cp)) break;
        j = k;
    }
    return j - i;
}

// Emits template text src[a..b) after applying the whitespace control of the tag that follows it.
static void emit_text(jp *p, size_t a, size_t b, char sign, bool lstrip_ok, bool line_starting) {
    const char *s = p->src + a;
    size_t n = b - a;
    if (sign == '-') {
        n = py_rstrip_len(s, n);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = 0;
        for (size_t i = n; i > 0; i--)
            if (s[i - 1] == '\n') { l_pos = i; break; }
        if (l_pos > 0 || line_starting) {
            size_t run = py_space_run(s, n, l_pos);
            if (run > 0 && l_pos + run == n) n = l_pos;
        }
    }
    if (n == 0) return;
    jtok *k = push_tok(p, T_TEXT, a);
    k->s = s;
    k->len = n;
}

static bool match_at(const char *s, size_t len, size_t i, const char *lit) {
    size_t n = strlen(lit);
    return i + n <= len && memcmp(s + i, lit, n) == 0;
}

static bool name_start(unsigned char c) { return c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0x80; }
static bool name_char(unsigned char c) { return name_start(c) || (c >= '0' && c <= '9'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static void put_utf8(char *o, size_t *n, uint32_t cp) {
    if (cp < 0x80) o[(*n)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*n)++] = (char)(0xc0 | cp >> 6);
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[(*n)++] = (char)(0xe0 | cp >> 12);
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[(*n)++] = (char)(0xf0 | cp >> 18);
        o[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 32;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// Decodes a string literal body like jinja2 does (Python "unicode-escape" on the raw text).
static void lex_string(jp *p, size_t start, size_t *ip) {
    const char *s = p->src;
    char q = s[start];
    size_t i = start + 1;
    while (i < p->len && s[i] != q) {
        if (s[i] == '\\' && i + 1 < p->len) i++;
        i++;
    }
    if (i >= p->len) pfail(p, start, "unterminated string literal");
    size_t end = i;  // closing quote
    char *o = palloc(p, end - start + 1);
    size_t n = 0;
    for (size_t j = start + 1; j < end;) {
        if (s[j] != '\\') {
            o[n++] = s[j++];
            continue;
        }
        char e = s[j + 1];
        j += 2;
        switch (e) {
        case '\n': break;
        case '\\': o[n++] = '\\'; break;
        case '\'': o[n++] = '\''; break;
        case '"': o[n++] = '"'; break;
        case 'a': o[n++] = 7; break;
        case 'b': o[n++] = 8; break;
        case 'f': o[n++] = 12; break;
        case 'n': o[n++] = 10; break;
        case 'r': o[n++] = 13; break;
        case 't': o[n++] = 9; break;
        case 'v': o[n++] = 11; break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++) {
                int h = j + k < end ? hexval(s[j + k]) : -1;
                if (h < 0) pfail(p, j - 2, "truncated \\%c escape in string literal", e);
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10ffff) pfail(p, j - 2, "invalid \\U escape in string literal");
            j += nd;
            put_utf8(o, &n, cp);
            break;
        }
        case 'N': pfail(p, j - 2, "unsupported \\N{...} escape in string literal");
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && j < end && s[j] >= '0' && s[j] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[j++] - '0');
                put_utf8(o, &n, cp);
            } else {
                // unknown escapes stay as written (Python keeps the backslash)
                o[n++] = '\\';
                j--;
            }
        }
    }
    o[n] = 0;
    jtok *k = push_tok(p, T_STR, start);
    k->s = o;
    k->len = n;
    *ip = end + 1;
}

static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char ops1[] = "+-/*%~[](){}><=.:|,;";

// Lexes the inside of {{ }} / {% %} starting at i; returns the position after the end delimiter.
static size_t lex_tag(jp *p, size_t i, bool block, bool *line_starting) {
    const char *s = p->src;
    size_t len = p->len;
    char stack[256];
    int sp = 0;
    size_t open = i;
    for (;;) {
        i += py_space_run(s, len, i);
        if (i >= len) pfail(p, open, "unexpected end of template inside a %s tag", block ? "{% %}" : "{{ }}");
        if (sp == 0) {
            if (block) {
                if (match_at(s, len, i, "+%}")) {
                    push_tok(p, T_BEND, i);
                    *line_starting = false;
                    return i + 3;
                }
                if (match_at(s, len, i, "-%}")) {
                    push_tok(p, T_BEND, i);
                    size_t r = py_space_run(s, len, i + 3);
                    *line_starting = r > 0 && s[i + 3 + r - 1] == '\n';
                    return i + 3 + r;
                }
                if (match_at(s, len, i, "%}")) {
                    push_tok(p, T_BEND, i);
                    bool nl = i + 2 < len && s[i + 2] == '\n';
                    *line_starting = nl;
                    return i + 2 + nl;
                }
            } else {
                if (match_at(s, len, i, "-}}")) {
                    push_tok(p, T_VEND, i);
                    size_t r = py_space_run(s, len, i + 3);
                    *line_starting = r > 0 && s[i + 3 + r - 1] == '\n';
                    return i + 3 + r;
                }
                if (match_at(s, len, i, "}}")) {
                    push_tok(p, T_VEND, i);
                    *line_starting = false;
                    return i + 2;
                }
            }
        }
        char c = s[i];
        if (is_digit(c)) {
            // integer or float (digits may be separated by '_' as in Python)
            size_t j = i;
            bool isfloat = false;
            if (c == '0' && j + 1 < len && strchr("bBoOxX", s[j + 1]) && j + 2 < len && hexval(s[j + 2]) >= 0) {
                int base = (s[j + 1] | 32) == 'b' ? 2 : (s[j + 1] | 32) == 'o' ? 8 : 16;
                j += 2;
                int64_t v = 0;
                while (j < len && (s[j] == '_' || (hexval(s[j]) >= 0 && hexval(s[j]) < base))) {
                    if (s[j] != '_') {
                        if (v > (INT64_MAX - 15) / base) pfail(p, i, "integer literal too large");
                        v = v * base + hexval(s[j]);
                    }
                    j++;
                }
                jtok *k = push_tok(p, T_INT, i);
                k->i = v;
                i = j;
                continue;
            }
            while (j < len && (is_digit(s[j]) || (s[j] == '_' && j + 1 < len && is_digit(s[j + 1])))) j++;
            bool after_dot = i > 0 && s[i - 1] == '.';  // jinja2: (?<!\.) — `x.0.1` is two lookups
            if (!after_dot && j + 1 < len && s[j] == '.' && is_digit(s[j + 1])) {
                isfloat = true;
                j++;
                while (j < len && (is_digit(s[j]) || (s[j] == '_' && j + 1 < len && is_digit(s[j + 1])))) j++;
            }
            if (!after_dot && j < len && (s[j] | 32) == 'e') {
                size_t k2 = j + 1;
                if (k2 < len && (s[k2] == '+' || s[k2] == '-')) k2++;
                if (k2 < len && is_digit(s[k2])) {
                    isfloat = true;
                    j = k2;
                    while (j < len && (is_digit(s[j]) || (s[j] == '_' && j + 1 < len && is_digit(s[j + 1])))) j++;
                }
            }
            char buf[128];
            size_t bn = 0;
            for (size_t k = i; k < j && bn < sizeof buf - 1; k++)
                if (s[k] != '_') buf[bn++] = s[k];
            buf[bn] = 0;
            if (j - i >= sizeof buf - 1) pfail(p, i, "number literal too long");
            jtok *k = push_tok(p, isfloat ? T_FLOAT : T_INT, i);
            if (isfloat) k->f = strtod(buf, NULL);
            else {
                char *e;
                unsigned long long v = strtoull(buf, &e, 10);
                if (v > (unsigned long long)INT64_MAX) pfail(p, i, "integer literal too large");
                k->i = (int64_t)v;
            }
            i = j;
            continue;
        }
        if (name_start((unsigned char)c)) {
            size_t j = i;
            while (j < len && name_char((unsigned char)s[j])) j++;
            jtok *k = push_tok(p, T_NAME, i);
            k->s = s + i;
            k->len = j - i;
            i = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            lex_string(p, i, &i);
            continue;
        }
        size_t ol = 0;
        for (int k = 0; ops2[k]; k++)
            if (match_at(s, len, i, ops2[k])) ol = 2;
        if (!ol && strchr(ops1, c) && c) ol = 1;
        if (!ol) pfail(p, i, "unexpected character '%c'", c);
        if (ol == 1 && (c == '(' || c == '[' || c == '{')) {
            if (sp >= (int)sizeof stack) pfail(p, i, "brackets nested too deeply");
            stack[sp++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (ol == 1 && (c == ')' || c == ']' || c == '}')) {
            if (sp == 0) pfail(p, i, "unexpected '%c'", c);
            if (stack[sp - 1] != c) pfail(p, i, "unexpected '%c', expected '%c'", c, stack[sp - 1]);
            sp--;
        }
        jtok *k = push_tok(p, T_OP, i);
        k->s = s + i;
        k->len = ol;
        i += ol;
    }
}

// Matches `\s*<word>\s*` at i; returns the position after it or 0.
static size_t match_word(const char *s, size_t len, size_t i, const char *w) {
    i += py_space_run(s, len, i);
    if (!match_at(s, len, i, w)) return 0;
    i += strlen(w);
    if (i < len && name_char((unsigned char)s[i])) return 0;
    return i + py_space_run(s, len, i);
}

static void lex(jp *p) {
    const char *s = p->src;
    size_t len = p->len, pos = 0;
    bool line_starting = true;
    while (pos < len) {
        size_t q = pos;
        while (q + 1 < len && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= len) {
            emit_text(p, pos, len, 0, false, line_starting);
            break;
        }
        char kind = s[q + 1];
        size_t after = q + 2;
        char sign = 0;
        if (after < len && (s[after] == '-' || s[after] == '+')) sign = s[after++];
        if (kind == '%') {
            size_t r = match_word(s, len, after, "raw");
            size_t body = 0;
            if (r && match_at(s, len, r, "-%}")) body = r + 3 + py_space_run(s, len, r + 3);
            else if (r && match_at(s, len, r, "%}")) body = r + 2;
            if (body) {
                emit_text(p, pos, q, sign, true, line_starting);
                // find {%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)
                size_t k = body;
                for (;; k++) {
                    if (k + 1 >= len) pfail(p, q, "missing end of raw directive");
                    if (s[k] != '{' || s[k + 1] != '%') continue;
                    size_t a = k + 2;
                    char es = 0;
                    if (a < len && (s[a] == '-' || s[a] == '+')) es = s[a++];
                    size_t e = match_word(s, len, a, "endraw");
                    if (!e) continue;
                    size_t endpos;
                    if (match_at(s, len, e, "+%}")) endpos = e + 3;
                    else if (match_at(s, len, e, "-%}")) endpos = e + 3 + py_space_run(s, len, e + 3);
                    else if (match_at(s, len, e, "%}")) endpos = e + 2 + (e + 2 < len && s[e + 2] == '\n');
                    else continue;
                    bool ls_body = s[body - 1] == '\n';
                    emit_text(p, body, k, es, true, ls_body);
                    line_starting = s[endpos - 1] == '\n';
                    pos = endpos;
                    break;
                }
                continue;
            }
        }
        emit_text(p, pos, q, sign, kind != '{', line_starting);
        if (kind == '#') {
            size_t k = after;
            for (;; k++) {
                if (k >= len) pfail(p, q, "missing end of comment tag");
                if (match_at(s, len, k, "+#}")) { pos = k + 3; break; }
                if (match_at(s, len, k, "-#}")) { pos = k + 3 + py_space_run(s, len, k + 3); break; }
                if (match_at(s, len, k, "#}")) { pos = k + 2 + (k + 2 < len && s[k + 2] == '\n'); break; }
            }
            line_starting = s[pos - 1] == '\n';
            continue;
        }
        push_tok(p, kind == '{' ? T_VBEGIN : T_BBEGIN, q);
        pos = lex_tag(p, after, kind == '%', &line_starting);
    }
    push_tok(p, T_EOF, len);
}

// ---- parser -----------------------------------------------------------------------------------
static jtok *cur(jp *p) { return &p->toks[p->ti]; }
static jtok *peek(jp *p, int k) {
    size_t i = p->ti + (size_t)k;
    return i < p->ntok ? &p->toks[i] : &p->toks[p->ntok - 1];
}
static void adv(jp *p) {
    if (p->ti + 1 < p->ntok) p->ti++;
}
static bool tok_op(const jtok *k, const char *op) {
    return k->t == T_OP && k->len == strlen(op) && memcmp(k->s, op, k->len) == 0;
}
static bool tok_name(const jtok *k, const char *n) {
    return k->t == T_NAME && k->len == strlen(n) && memcmp(k->s, n, k->len) == 0;
}
static const char *tok_desc(jp *p, const jtok *k, char *buf, size_t bn) {
    switch (k->t) {
    case T_EOF: return "end of template";
    case T_TEXT: return "template text";
    case T_VBEGIN: return "'{{'";
    case T_VEND: return "'}}'";
    case T_BBEGIN: return "'{%'";
    case T_BEND: return "'%}'";
    case T_STR: return "string literal";
    case T_INT: case T_FLOAT: return "number";
    default: snprintf(buf, bn, "'%.*s'", (int)(k->len > 40 ? 40 : k->len), k->s); return buf;
    }
}
static _Noreturn void unexpected(jp *p, const char *expected) {
    char b[64];
    jtok *k = cur(p);
    pfail(p, k->pos, "unexpected %s%s%s", tok_desc(p, k, b, sizeof b), expected ? ", expected " : "",
          expected ? expected : "");
}
static void expect_op(jp *p, const char *op) {
    if (!tok_op(cur(p), op)) {
        char e[16];
        snprintf(e, sizeof e, "'%s'", op);
        unexpected(p, e);
    }
    adv(p);
}
static void expect_t(jp *p, int t, const char *what) {
    if (cur(p)->t != t) unexpected(p, what);
    adv(p);
}
static const char *expect_ident(jp *p, const char *what) {
    jtok *k = cur(p);
    if (k->t != T_NAME) unexpected(p, what);
    adv(p);
    return pstrdup(p, k->s, k->len);
}

static jnode *mk(jp *p, int kind, size_t pos) {
    jnode *n = palloc(p, sizeof *n);
    n->kind = (uint16_t)kind;
    n->pos = (uint32_t)pos;
    return n;
}

// growable node-pointer vector in the arena
typedef struct nvec {
    jnode **v;
    int n, cap;
} nvec;
static void nv_push(jp *p, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 8;
        jnode **nv = palloc(p, sizeof(jnode *) * nc);
        if (v->n) memcpy(nv, v->v, sizeof(jnode *) * v->n);
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
}

static void note_assigned(jp *p, const char *name) {
    grow(p, (void **)&p->assigned, &p->capassigned, p->nassigned + 1, sizeof(char *));
    p->assigned[p->nassigned++] = name;
}

static jnode *parse_expr(jp *p, bool condexpr);
static jnode *parse_tuple(jp *p, bool condexpr, bool explicit_parens);
static jnode *parse_unary(jp *p, bool with_filter);
static jnode *parse_primary(jp *p);
static jnode *parse_postfix(jp *p, jnode *n);

static void enter(jp *p) {
    if (++p->depth > 100) pfail(p, cur(p)->pos, "template nested too deeply");
}
static void leave(jp *p) { p->depth--; }

static void parse_call_args(jp *p, jnode *n) {
    nvec args = {0}, kws = {0};
    const char **kwn = NULL;
    int capk = 0;
    expect_op(p, "(");
    while (!tok_op(cur(p), ")")) {
        if (args.n || kws.n) expect_op(p, ",");
        if (tok_op(cur(p), ")")) break;
        if (tok_op(cur(p), "*") || tok_op(cur(p), "**"))
            pfail(p, cur(p)->pos, "unsupported construct: *args/**kwargs in a call");
        if (cur(p)->t == T_NAME && tok_op(peek(p, 1), "=")) {
            const char *nm = expect_ident(p, "argument name");
            adv(p);
            if (kws.n == capk) {
                int nc = capk ? capk * 2 : 4;
                const char **nk = palloc(p, sizeof(char *) * nc);
                if (kws.n) memcpy(nk, kwn, sizeof(char *) * kws.n);
                kwn = nk;
                capk = nc;
            }
            kwn[kws.n] = nm;
            nv_push(p, &kws, parse_expr(p, true));
        } else {
            if (kws.n) pfail(p, cur(p)->pos, "positional argument follows keyword argument");
            nv_push(p, &args, parse_expr(p, true));
        }
    }
    adv(p);
    n->u.call.args = args.v;
    n->u.call.nargs = args.n;
    n->u.call.kwargs = kws.v;
    n->u.call.kwnames = kwn;
    n->u.call.nkw = kws.n;
}

static jnode *parse_subscript(jp *p, jnode *obj, size_t pos) {
    // obj[ index ] or obj[ start : stop : step ]
    jnode *start = NULL, *stop = NULL, *step = NULL;
    if (!tok_op(cur(p), ":")) {
        jnode *e = parse_expr(p, true);
        if (!tok_op(cur(p), ":")) {
            if (tok_op(cur(p), ",")) pfail(p, cur(p)->pos, "unsupported construct: tuple subscript");
            expect_op(p, "]");
            jnode *n = mk(p, E_ITEM, pos);
            n->u.item.obj = obj;
            n->u.item.idx = e;
            return n;
        }
        start = e;
    }
    adv(p);  // ':'
    if (!tok_op(cur(p), "]") && !tok_op(cur(p), ",") && !tok_op(cur(p), ":")) stop = parse_expr(p, true);
    if (tok_op(cur(p), ":")) {
        adv(p);
        if (!tok_op(cur(p), "]") && !tok_op(cur(p), ",")) step = parse_expr(p, true);
    }
    expect_op(p, "]");
    jnode *n = mk(p, E_SLICE, pos);
    n->u.slice.obj = obj;
    n->u.slice.start = start;
    n->u.slice.stop = stop;
    n->u.slice.step = step;
    return n;
}

static jnode *parse_postfix(jp *p, jnode *n) {
    for (;;) {
        jtok *k = cur(p);
        if (tok_op(k, ".")) {
            adv(p);
            jtok *a = cur(p);
            if (a->t == T_NAME) {
                adv(p);
                jnode *m = mk(p, E_ATTR, a->pos);
                m->u.attr.obj = n;
                m->u.attr.name = pstrdup(p, a->s, a->len);
                if (tok_op(cur(p), "(") && !jinja_method_known(m->u.attr.name))
                    pfail(p, a->pos, "unsupported method '%s'", m->u.attr.name);
                n = m;
            } else if (a->t == T_INT) {
                adv(p);
                jnode *c = mk(p, E_CONST, a->pos);
                c->u.cval.t = JV_INT;
                c->u.cval.u.i = a->i;
                jnode *m = mk(p, E_ITEM, a->pos);
                m->u.item.obj = n;
                m->u.item.idx = c;
                n = m;
            } else {
                unexpected(p, "attribute name");
            }
        } else if (tok_op(k, "[")) {
            adv(p);
            n = parse_subscript(p, n, k->pos);
        } else if (tok_op(k, "(")) {
            jnode *c = mk(p, E_CALL, k->pos);
            c->u.call.fn = n;
            parse_call_args(p, c);
            if (n->kind == E_NAME) {
                grow(p, (void **)&p->calls, &p->capcalls, p->ncalls + 1, sizeof *p->calls);
                p->calls[p->ncalls].name = n->u.name;
                p->calls[p->ncalls].pos = n->pos;
                p->ncalls++;
            }
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_filter_expr(jp *p, jnode *n) {
    for (;;) {
        jtok *k = cur(p);
        if (tok_op(k, "|")) {
            adv(p);
            jtok *f = cur(p);
            if (f->t != T_NAME) unexpected(p, "filter name");
            char *name = pstrdup(p, f->s, f->len);
            int id = jinja_filter_id(name);
            if (id < 0) pfail(p, f->pos, "unsupported filter '%s'", name);
            adv(p);
            if (tok_op(cur(p), ".")) pfail(p, cur(p)->pos, "unsupported construct: dotted filter name");
            jnode *m = mk(p, E_FILTER, f->pos);
            m->op = (uint16_t)id;
            m->u.call.fn = n;
            if (tok_op(cur(p), "(")) parse_call_args(p, m);
            n = m;
        } else if (tok_name(k, "is")) {
            adv(p);
            bool neg = false;
            if (tok_name(cur(p), "not")) {
                neg = true;
                adv(p);
            }
            jtok *f = cur(p);
            if (f->t != T_NAME) unexpected(p, "test name");
            char *name = pstrdup(p, f->s, f->len);
            int id = jinja_test_id(name);
            if (id < 0) pfail(p, f->pos, "unsupported test '%s'", name);
            adv(p);
            jnode *m = mk(p, E_TEST, f->pos);
            m->op = (uint16_t)id;
            m->u.call.fn = n;
            m->u.call.neg = neg;
            jtok *a = cur(p);
            if (tok_op(a, "(")) {
                parse_call_args(p, m);
            } else if ((a->t == T_NAME || a->t == T_STR || a->t == T_INT || a->t == T_FLOAT || tok_op(a, "[") ||
                        tok_op(a, "{")) &&
                       !tok_name(a, "else") && !tok_name(a, "or") && !tok_name(a, "and")) {
                if (tok_name(a, "is")) pfail(p, a->pos, "you cannot chain multiple tests with is");
                jnode *arg = parse_postfix(p, parse_primary(p));
                jnode **v = palloc(p, sizeof(jnode *));
                v[0] = arg;
                m->u.call.args = v;
                m->u.call.nargs = 1;
            }
            n = m;
        } else if (tok_op(k, "(")) {
            jnode *c = mk(p, E_CALL, k->pos);
            c->u.call.fn = n;
            parse_call_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_primary(jp *p) {
    jtok *k = cur(p);
    jnode *n;
    switch (k->t) {
    case T_NAME:
        adv(p);
        n = mk(p, E_CONST, k->pos);
        if (tok_name(k, "true") || tok_name(k, "True") || tok_name(k, "false") || tok_name(k, "False")) {
            n->u.cval.t = JV_BOOL;
            n->u.cval.u.i = k->s[0] == 't' || k->s[0] == 'T';
        } else if (tok_name(k, "none") || tok_name(k, "None")) {
            n->u.cval.t = JV_NONE;
        } else {
            n->kind = E_NAME;
            n->u.name = pstrdup(p, k->s, k->len);
        }
        return n;
    case T_STR: {
        // adjacent string literals concatenate
        size_t total = 0, e = p->ti;
        while (p->toks[e].t == T_STR) total += p->toks[e++].len;
        char *buf = palloc(p, total + 1);
        size_t o = 0;
        while (cur(p)->t == T_STR) {
            memcpy(buf + o, cur(p)->s, cur(p)->len);
            o += cur(p)->len;
            adv(p);
        }
        n = mk(p, E_CONST, k->pos);
        jstr *s = palloc(p, sizeof(jstr) + total + 1);
        s->len = total;
        memcpy(s->s, buf, total);
        n->u.cval.t = JV_STR;
        n->u.cval.u.s = s;
        return n;
    }
    case T_INT:
    case T_FLOAT:
        adv(p);
        n = mk(p, E_CONST, k->pos);
        if (k->t == T_INT) {
            n->u.cval.t = JV_INT;
            n->u.cval.u.i = k->i;
        } else {
            n->u.cval.t = JV_FLOAT;
            n->u.cval.u.f = k->f;
        }
        return n;
    case T_OP:
        if (tok_op(k, "(")) {
            adv(p);
            n = parse_tuple(p, true, true);
            expect_op(p, ")");
            return n;
        }
        if (tok_op(k, "[")) {
            adv(p);
            nvec v = {0};
            while (!tok_op(cur(p), "]")) {
                if (v.n) expect_op(p, ",");
                if (tok_op(cur(p), "]")) break;
                nv_push(p, &v, parse_expr(p, true));
            }
            adv(p);
            n = mk(p, E_LIST, k->pos);
            n->u.seq.v = v.v;
            n->u.seq.n = v.n;
            return n;
        }
        if (tok_op(k, "{")) {
            adv(p);
            nvec v = {0};
            while (!tok_op(cur(p), "}")) {
                if (v.n) expect_op(p, ",");
                if (tok_op(cur(p), "}")) break;
                nv_push(p, &v, parse_expr(p, true));
                expect_op(p, ":");
                nv_push(p, &v, parse_expr(p, true));
            }
            adv(p);
            n = mk(p, E_DICT, k->pos);
            n->u.seq.v = v.v;
            n->u.seq.n = v.n / 2;
            return n;
        }
        break;
    default: break;
    }
    unexpected(p, "an expression");
}

static jnode *parse_unary(jp *p, bool with_filter) {
    enter(p);
    jtok *k = cur(p);
    jnode *n;
    if (tok_op(k, "-") || tok_op(k, "+")) {
        adv(p);
        n = mk(p, tok_op(k, "-") ? E_NEG : E_POS, k->pos);
        n->u.ops.a = parse_unary(p, false);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    leave(p);
    return n;
}

static jnode *mkbin(jp *p, int kind, int op, size_t pos, jnode *a, jnode *b) {
    jnode *n = mk(p, kind, pos);
    n->op = (uint16_t)op;
    n->u.ops.a = a;
    n->u.ops.b = b;
    return n;
}

static jnode *parse_pow(jp *p) {
    jnode *n = parse_unary(p, true);
    while (tok_op(cur(p), "**")) {
        size_t pos = cur(p)->pos;
        adv(p);
        n = mkbin(p, E_BIN, OP_POW, pos, n, parse_unary(p, true));
    }
    return n;
}

static jnode *parse_math2(jp *p) {
    jnode *n = parse_pow(p);
    for (;;) {
        jtok *k = cur(p);
        int op = tok_op(k, "*") ? OP_MUL : tok_op(k, "/") ? OP_DIV : tok_op(k, "//") ? OP_FLOORDIV
                 : tok_op(k, "%") ? OP_MOD : -1;
        if (op < 0) return n;
        adv(p);
        n = mkbin(p, E_BIN, op, k->pos, n, parse_pow(p));
    }
}

static jnode *parse_concat(jp *p) {
    jnode *first = parse_math2(p);
    if (!tok_op(cur(p), "~")) return first;
    nvec v = {0};
    nv_push(p, &v, first);
    size_t pos = cur(p)->pos;
    while (tok_op(cur(p), "~")) {
        adv(p);
        nv_push(p, &v, parse_math2(p));
    }
    jnode *n = mk(p, E_CONCAT, pos);
    n->u.seq.v = v.v;
    n->u.seq.n = v.n;
    return n;
}

static jnode *parse_math1(jp *p) {
    jnode *n = parse_concat(p);
    for (;;) {
        jtok *k = cur(p);
        int op = tok_op(k, "+") ? OP_ADD : tok_op(k, "-") ? OP_SUB : -1;
        if (op < 0) return n;
        adv(p);
        n = mkbin(p, E_BIN, op, k->pos, n, parse_concat(p));
    }
}

static jnode *parse_compare(jp *p) {
    jnode *first = parse_math1(p);
    nvec v = {0};
    int *ops = NULL, nops = 0, capops = 0;
    size_t pos = cur(p)->pos;
    for (;;) {
        jtok *k = cur(p);
        int op = tok_op(k, "==") ? CMP_EQ : tok_op(k, "!=") ? CMP_NE : tok_op(k, "<") ? CMP_LT
                 : tok_op(k, "<=") ? CMP_LE : tok_op(k, ">") ? CMP_GT : tok_op(k, ">=") ? CMP_GE
                 : tok_name(k, "in") ? CMP_IN : -1;
        if (op < 0 && tok_name(k, "not") && tok_name(peek(p, 1), "in")) {
            op = CMP_NOTIN;
            adv(p);
        }
        if (op < 0) break;
        adv(p);
        if (!v.n) nv_push(p, &v, first);
        nv_push(p, &v, parse_math1(p));
        if (nops == capops) {
            int nc = capops ? capops * 2 : 4;
            int *no = palloc(p, sizeof(int) * nc);
            if (nops) memcpy(no, ops, sizeof(int) * nops);
            ops = no;
            capops = nc;
        }
        ops[nops++] = op;
    }
    if (!nops) return first;
    jnode *n = mk(p, E_CMP, pos);
    n->u.cmp.v = v.v;
    n->u.cmp.ops = ops;
    n->u.cmp.n = nops;
    return n;
}

static jnode *parse_not(jp *p) {
    jtok *k = cur(p);
    if (tok_name(k, "not")) {
        adv(p);
        enter(p);
        jnode *n = mk(p, E_NOT, k->pos);
        n->u.ops.a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

static jnode *parse_and(jp *p) {
    jnode *n = parse_not(p);
    while (tok_name(cur(p), "and")) {
        size_t pos = cur(p)->pos;
        adv(p);
        n = mkbin(p, E_AND, 0, pos, n, parse_not(p));
    }
    return n;
}

static jnode *parse_or(jp *p) {
    jnode *n = parse_and(p);
    while (tok_name(cur(p), "or")) {
        size_t pos = cur(p)->pos;
        adv(p);
        n = mkbin(p, E_OR, 0, pos, n, parse_and(p));
    }
    return n;
}

static jnode *parse_condexpr(jp *p) {
    enter(p);
    jnode *n = parse_or(p);
    while (tok_name(cur(p), "if")) {
        size_t pos = cur(p)->pos;
        adv(p);
        jnode *c = mk(p, E_COND, pos);
        c->u.ops.b = parse_or(p);
        c->u.ops.a = n;
        if (tok_name(cur(p), "else")) {
            adv(p);
            c->u.ops.c = parse_condexpr(p);
        }
        n = c;
    }
    leave(p);
    return n;
}

static jnode *parse_expr(jp *p, bool condexpr) {
    enter(p);
    jnode *n = condexpr ? parse_condexpr(p) : parse_or(p);
    leave(p);
    return n;
}

// Comma-separated expressions: a single one stays itself, several (or a trailing comma) make a tuple.
static jnode *parse_tuple(jp *p, bool condexpr, bool explicit_parens) {
    size_t pos = cur(p)->pos;
    nvec v = {0};
    bool comma = false;
    for (;;) {
        if (v.n) {
            if (!tok_op(cur(p), ",")) break;
            adv(p);
            comma = true;
        }
        jtok *k = cur(p);
        if (k->t == T_VEND || k->t == T_BEND || tok_op(k, ")") || tok_name(k, "in") ||
            (tok_name(k, "if") && !condexpr))
            break;
        nv_push(p, &v, parse_expr(p, condexpr));
    }
    if (!v.n) {
        if (explicit_parens) {
            jnode *n = mk(p, E_TUPLE, pos);
            return n;
        }
        unexpected(p, "an expression");
    }
    if (v.n == 1 && !comma) return v.v[0];
    jnode *n = mk(p, E_TUPLE, pos);
    n->u.seq.v = v.v;
    n->u.seq.n = v.n;
    return n;
}

// Assignment targets of `for` / `set`: name, or names separated by commas (optionally in parens).
static int parse_targets(jp *p, const char ***out) {
    bool paren = false;
    if (tok_op(cur(p), "(")) {
        paren = true;
        adv(p);
    }
    const char *names[32];
    int n = 0;
    for (;;) {
        if (n >= 32) pfail(p, cur(p)->pos, "too many assignment targets");
        names[n++] = expect_ident(p, "a variable name");
        note_assigned(p, names[n - 1]);
        if (!tok_op(cur(p), ",")) break;
        adv(p);
        if (cur(p)->t != T_NAME) break;
    }
    if (paren) expect_op(p, ")");
    const char **v = palloc(p, sizeof(char *) * n);
    memcpy(v, names, sizeof(char *) * n);
    *out = v;
    return n;
}

static jbody parse_body(jp *p, const char *const *ends, const char **hit);

static jnode *parse_if(jp *p, size_t pos) {
    jnode *n = mk(p, S_IF, pos);
    n->u.ifs.cond = parse_tuple(p, true, false);
    expect_t(p, T_BEND, "'%}'");
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *hit;
    n->u.ifs.body = parse_body(p, ends, &hit);
    if (!strcmp(hit, "elif")) {
        jnode *e = parse_if(p, cur(p)->pos);
        n->u.ifs.els.v = palloc(p, sizeof(jnode *));
        n->u.ifs.els.v[0] = e;
        n->u.ifs.els.n = 1;
        return n;
    }
    if (!strcmp(hit, "else")) {
        expect_t(p, T_BEND, "'%}'");
        static const char *const e2[] = {"endif", NULL};
        n->u.ifs.els = parse_body(p, e2, &hit);
    }
    expect_t(p, T_BEND, "'%}'");
    return n;
}

static void check_macro_names(const jbody *b, bool *va, bool *kw);

static jnode *parse_stmt(jp *p) {
    jtok *open = cur(p);
    adv(p);  // '{%'
    jtok *k = cur(p);
    if (k->t != T_NAME) unexpected(p, "a tag name");
    size_t pos = k->pos;
    char kw[32];
    snprintf(kw, sizeof kw, "%.*s", (int)(k->len > 30 ? 30 : k->len), k->s);
    adv(p);
    const char *hit;
    enter(p);
    jnode *n;
    if (!strcmp(kw, "if")) {
        n = parse_if(p, pos);
    } else if (!strcmp(kw, "for")) {
        n = mk(p, S_FOR, pos);
        n->u.fors.ntargets = parse_targets(p, &n->u.fors.targets);
        if (!tok_name(cur(p), "in")) unexpected(p, "'in'");
        adv(p);
        n->u.fors.iter = parse_tuple(p, false, false);
        if (tok_name(cur(p), "if")) {
            adv(p);
            n->u.fors.filter = parse_expr(p, true);
        }
        if (tok_name(cur(p), "recursive")) pfail(p, cur(p)->pos, "unsupported construct: recursive for loop");
        expect_t(p, T_BEND, "'%}'");
        static const char *const ends[] = {"endfor", "else", NULL};
        p->loopdepth++;
        n->u.fors.body = parse_body(p, ends, &hit);
        p->loopdepth--;
        if (!strcmp(hit, "else")) {
            expect_t(p, T_BEND, "'%}'");
            static const char *const e2[] = {"endfor", NULL};
            n->u.fors.els = parse_body(p, e2, &hit);
        }
        expect_t(p, T_BEND, "'%}'");
    } else if (!strcmp(kw, "set")) {
        n = mk(p, S_SET, pos);
        jtok *t0 = cur(p);
        if (t0->t == T_NAME && tok_op(peek(p, 1), ".")) {
            n->u.set.targets = palloc(p, sizeof(char *));
            n->u.set.targets[0] = expect_ident(p, "a variable name");
            n->u.set.ntargets = 1;
            adv(p);
            n->u.set.attr = expect_ident(p, "an attribute name");
        } else {
            n->u.set.ntargets = parse_targets(p, &n->u.set.targets);
        }
        if (tok_op(cur(p), "=")) {
            adv(p);
            n->u.set.value = parse_tuple(p, true, false);
            expect_t(p, T_BEND, "'%}'");
        } else if (cur(p)->t == T_BEND && n->u.set.ntargets == 1 && !n->u.set.attr) {
            adv(p);
            n->kind = S_SETBLOCK;
            static const char *const ends[] = {"endset", NULL};
            n->u.set.body = parse_body(p, ends, &hit);
            expect_t(p, T_BEND, "'%}'");
        } else if (tok_op(cur(p), "|")) {
            pfail(p, cur(p)->pos, "unsupported construct: filtered block set");
        } else {
            unexpected(p, "'='");
        }
    } else if (!strcmp(kw, "macro")) {
        n = mk(p, S_MACRO, pos);
        n->u.macro.name = expect_ident(p, "a macro name");
        note_assigned(p, n->u.macro.name);
        expect_op(p, "(");
        const char *params[64];
        jnode *defs[64];
        int np = 0;
        while (!tok_op(cur(p), ")")) {
            if (np) expect_op(p, ",");
            if (tok_op(cur(p), ")")) break;
            if (np >= 64) pfail(p, cur(p)->pos, "too many macro parameters");
            params[np] = expect_ident(p, "a parameter name");
            note_assigned(p, params[np]);
            defs[np] = NULL;
            if (tok_op(cur(p), "=")) {
                adv(p);
                defs[np] = parse_expr(p, true);
            } else if (np && defs[np - 1]) {
                pfail(p, cur(p)->pos, "non-default argument follows default argument");
            }
            np++;
        }
        adv(p);
        expect_t(p, T_BEND, "'%}'");
        n->u.macro.params = palloc(p, sizeof(char *) * (np + 1));
        n->u.macro.defaults = palloc(p, sizeof(jnode *) * (np + 1));
        memcpy(n->u.macro.params, params, sizeof(char *) * np);
        memcpy(n->u.macro.defaults, defs, sizeof(jnode *) * np);
        n->u.macro.nparams = np;
        static const char *const ends[] = {"endmacro", NULL};
        int saved = p->loopdepth;
        p->loopdepth = 0;
        n->u.macro.body = parse_body(p, ends, &hit);
        p->loopdepth = saved;
        if (cur(p)->t == T_NAME) adv(p);  // `{% endmacro name %}`
        expect_t(p, T_BEND, "'%}'");
        check_macro_names(&n->u.macro.body, &n->u.macro.varargs, &n->u.macro.kwargs);
    } else if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        if (!p->loopdepth) pfail(p, pos, "'%s' outside of a for loop", kw);
        n = mk(p, kw[0] == 'b' ? S_BREAK : S_CONTINUE, pos);
        expect_t(p, T_BEND, "'%}'");
    } else if (!strcmp(kw, "generation")) {
        n = mk(p, S_BLOCK, pos);
        expect_t(p, T_BEND, "'%}'");
        static const char *const ends[] = {"endgeneration", NULL};
        n->u.block = parse_body(p, ends, &hit);
        expect_t(p, T_BEND, "'%}'");
    } else if (!strcmp(kw, "extends") || !strcmp(kw, "block") || !strcmp(kw, "include") ||
               !strcmp(kw, "import") || !strcmp(kw, "from") || !strcmp(kw, "call") || !strcmp(kw, "filter") ||
               !strcmp(kw, "with") || !strcmp(kw, "autoescape") || !strcmp(kw, "do") || !strcmp(kw, "trans")) {
        pfail(p, pos, "unsupported tag '{%% %s %%}'", kw);
    } else {
        (void)open;
        pfail(p, pos, "unknown tag '%s'", kw);
    }
    leave(p);
    return n;
}

static jbody parse_body(jp *p, const char *const *ends, const char **hit) {
    nvec v = {0};
    for (;;) {
        jtok *k = cur(p);
        if (k->t == T_EOF) {
            if (ends) pfail(p, k->pos, "unexpected end of template, expected '{%% %s %%}'", ends[0]);
            break;
        }
        if (k->t == T_TEXT) {
            jnode *n = mk(p, S_TEXT, k->pos);
            n->u.text.s = k->s;
            n->u.text.len = k->len;
            nv_push(p, &v, n);
            adv(p);
        } else if (k->t == T_VBEGIN) {
            adv(p);
            jnode *n = mk(p, S_OUT, k->pos);
            n->u.expr = parse_tuple(p, true, false);
            expect_t(p, T_VEND, "'}}'");
            nv_push(p, &v, n);
        } else if (k->t == T_BBEGIN) {
            jtok *nm = peek(p, 1);
            bool ended = false;
            for (int i = 0; ends && ends[i]; i++)
                if (tok_name(nm, ends[i])) {
                    *hit = ends[i];
                    adv(p);
                    adv(p);
                    ended = true;
                    break;
                }
            if (ended) break;
            if (nm->t == T_NAME && (nm->len >= 3 && (!memcmp(nm->s, "end", 3) || tok_name(nm, "elif") ||
                                                     tok_name(nm, "else")))) {
                char b[64];
                pfail(p, nm->pos, "unexpected tag %s%s%s", tok_desc(p, nm, b, sizeof b),
                      ends ? ", expected " : "", ends ? ends[0] : "");
            }
            nv_push(p, &v, parse_stmt(p));
        } else {
            unexpected(p, NULL);
        }
    }
    jbody b = {v.v, v.n};
    return b;
}

// Whether a macro body mentions `varargs` / `kwargs` (jinja2 then accepts extra arguments).
static void scan_names(const jnode *n, bool *va, bool *kw);
static void scan_body(const jbody *b, bool *va, bool *kw) {
    for (int i = 0; i < b->n; i++) scan_names(b->v[i], va, kw);
}
static void scan_names(const jnode *n, bool *va, bool *kw) {
    if (!n) return;
    switch (n->kind) {
    case E_NAME:
        if (!strcmp(n->u.name, "varargs")) *va = true;
        if (!strcmp(n->u.name, "kwargs")) *kw = true;
        break;
    case E_LIST: case E_TUPLE: case E_CONCAT:
        for (int i = 0; i < n->u.seq.n; i++) scan_names(n->u.seq.v[i], va, kw);
        break;
    case E_DICT:
        for (int i = 0; i < 2 * n->u.seq.n; i++) scan_names(n->u.seq.v[i], va, kw);
        break;
    case E_ATTR: scan_names(n->u.attr.obj, va, kw); break;
    case E_ITEM: scan_names(n->u.item.obj, va, kw); scan_names(n->u.item.idx, va, kw); break;
    case E_SLICE:
        scan_names(n->u.slice.obj, va, kw);
        scan_names(n->u.slice.start, va, kw);
        scan_names(n->u.slice.stop, va, kw);
        scan_names(n->u.slice.step, va, kw);
        break;
    case E_CALL: case E_FILTER: case E_TEST:
        scan_names(n->u.call.fn, va, kw);
        for (int i = 0; i < n->u.call.nargs; i++) scan_names(n->u.call.args[i], va, kw);
        for (int i = 0; i < n->u.call.nkw; i++) scan_names(n->u.call.kwargs[i], va, kw);
        break;
    case E_BIN: case E_NEG: case E_POS: case E_NOT: case E_AND: case E_OR: case E_COND:
        scan_names(n->u.ops.a, va, kw);
        scan_names(n->u.ops.b, va, kw);
        scan_names(n->u.ops.c, va, kw);
        break;
    case E_CMP:
        for (int i = 0; i <= n->u.cmp.n; i++) scan_names(n->u.cmp.v[i], va, kw);
        break;
    case S_OUT: scan_names(n->u.expr, va, kw); break;
    case S_IF:
        scan_names(n->u.ifs.cond, va, kw);
        scan_body(&n->u.ifs.body, va, kw);
        scan_body(&n->u.ifs.els, va, kw);
        break;
    case S_FOR:
        scan_names(n->u.fors.iter, va, kw);
        scan_names(n->u.fors.filter, va, kw);
        scan_body(&n->u.fors.body, va, kw);
        scan_body(&n->u.fors.els, va, kw);
        break;
    case S_SET: scan_names(n->u.set.value, va, kw); break;
    case S_SETBLOCK: scan_body(&n->u.set.body, va, kw); break;
    case S_BLOCK: scan_body(&n->u.block, va, kw); break;
    default: break;  // nested macros have their own varargs
    }
}
static void check_macro_names(const jbody *b, bool *va, bool *kw) {
    *va = *kw = false;
    scan_body(b, va, kw);
}

// Lexes and parses into p->T; returns -1 (message set) on error. Kept apart from st_jinja_parse so
// no local of the caller lives across the setjmp.
static int run_parse(jp *p, const char *src, size_t len) {
    if (setjmp(p->jb)) return -1;
    st_jinja_template *T = p->T;
    if (len > ((size_t)1 << 30)) pfail(p, 0, "template too large");
    // Normalize newlines as jinja2 does (\r\n and \r become \n) and drop one trailing newline
    // (keep_trailing_newline=False).
    char *s = palloc(p, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    T->src = s;
    T->len = n;
    p->src = s;
    p->len = n;
    lex(p);
    T->body = parse_body(p, NULL, NULL);
    // A call of a plain name must reach a builtin or something the template defines; anything else
    // would be a function this interpreter does not provide.
    for (size_t i = 0; i < p->ncalls; i++) {
        const char *nm = p->calls[i].name;
        if (jinja_builtin_id(nm) >= 0) continue;
        bool ok = false;
        for (size_t j = 0; j < p->nassigned && !ok; j++) ok = !strcmp(p->assigned[j], nm);
        if (!ok) pfail(p, p->calls[i].pos, "unsupported function '%s'", nm);
    }
    return 0;
}

st_jinja_template *st_jinja_parse(const char *src, size_t len, const char *name) {
    st_jinja_template *T = calloc(1, sizeof *T);
    jp *p = calloc(1, sizeof *p);
    if (!T || !p) {
        free(T);
        free(p);
        st_err("%s: out of memory", name ? name : "template");
        return NULL;
    }
    snprintf(T->name, sizeof T->name, "%s", name ? name : "template");
    T->arena.cap = (size_t)64 << 20 > len * 64 ? (size_t)64 << 20 : len * 64;
    p->T = T;
    p->A = &T->arena;
    p->src = "";
    int rc = run_parse(p, src, len);
    free(p->toks);
    free(p->calls);
    free(p->assigned);
    free(p);
    if (rc) {
        st_jinja_free(T);
        return NULL;
    }
    return T;
}

void st_jinja_free(st_jinja_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t);
}
