// Internals of the chat-template interpreter: arena, values, AST. See jinja.h for the contract.
#ifndef STRATA_SERVER_JINJA_INTERNAL_H
#define STRATA_SERVER_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/jinja/jinja.h"
#include "util/err.h"

// ---- arena ------------------------------------------------------------------------------------
// Bump allocator owning everything of one parse (the AST) or one render (all values). Nothing is
// freed individually, so error paths are a longjmp plus one arena release. `cap` bounds the total
// so a template that builds ever-longer strings errors out instead of exhausting memory.
typedef struct jchunk {
    struct jchunk *next;
    size_t size, used;  // bytes of data[] and how many are handed out
    _Alignas(16) unsigned char data[];
} jchunk;

typedef struct jarena {
    jchunk *head;
    size_t total;  // bytes of all chunks
    size_t cap;    // limit on total
} jarena;

void *jarena_alloc(jarena *a, size_t n);  // NULL when over cap / out of memory
void jarena_free(jarena *a);

// ---- values -----------------------------------------------------------------------------------
typedef enum {
    JV_UNDEF,    // jinja2 Undefined; u.hint is the message used if it is misused
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,     // list or (flag JVF_TUPLE) tuple
    JV_DICT,
    JV_NS,       // namespace(): a dict whose entries are attributes
    JV_MACRO,
    JV_BUILTIN,  // global function (range, namespace, raise_exception, ...); u.i is its id
    JV_METHOD,   // bound method of a str/dict/list, or loop.cycle
    JV_LOOP,     // the `loop` object of a for loop
} jv_type;

enum {
    JVF_TUPLE = 1,
    JVF_MARKUP = 2,
    JVF_UNSAFE = 4,
    // Lists that stand for Python objects other than list/tuple, so that truthiness, len(), json
    // and repr fail or differ exactly where jinja2's would:
    JVF_GEN = 8,           // generator (map/select/reject/selectattr/rejectattr/unique/items): one-shot
    JVF_REVITER = 16,      // list_reverseiterator (|reverse of a list): one-shot
    JVF_VIEW_ITEMS = 32,   // dict.items()
    JVF_VIEW_KEYS = 64,    // dict.keys()
    JVF_VIEW_VALUES = 128, // dict.values()
    JVF_RANGE = 256,       // range(): the sandbox returns a range object
    JVF_ONESHOT = JVF_GEN | JVF_REVITER,
    JVF_VIEW = JVF_VIEW_ITEMS | JVF_VIEW_KEYS | JVF_VIEW_VALUES,
    JVF_PYOBJ = JVF_ONESHOT | JVF_VIEW | JVF_RANGE,
};

struct jstr;
struct jlist;
struct jdict;
struct jmacro;
struct jmethod;
struct jloop;

typedef struct jv {
    uint8_t t;       // jv_type
    uint16_t flags;  // JVF_*: TUPLE etc. on lists, MARKUP on strings (from |safe), UNSAFE on undefined
    union {
        int64_t i;  // BOOL (0/1), INT, BUILTIN id
        double f;
        struct jstr *s;
        struct jlist *l;
        struct jdict *d;  // DICT and NS
        struct jmacro *m;
        struct jmethod *meth;
        struct jloop *loop;
        const char *hint;  // UNDEF: "'x' is undefined" / "'dict object' has no attribute 'y'"
    } u;
} jv;

typedef struct jstr {
    size_t len;  // bytes of s (UTF-8), NUL-terminated
    char s[];
} jstr;

typedef struct jlist {
    size_t n, cap;
    jv *v;  // [cap] items, n used
} jlist;

// Insertion-ordered like Python dicts; lookup is linear (chat-template dicts are small).
typedef struct jdict {
    size_t n, cap;
    jv *k, *v;  // [cap] keys and values, n used
} jdict;

// ---- AST --------------------------------------------------------------------------------------
typedef struct jnode jnode;

typedef struct jbody {
    jnode **v;
    int n;
} jbody;

enum {
    // expressions
    E_CONST, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_BIN, E_NEG, E_POS, E_NOT, E_AND, E_OR, E_CMP, E_COND, E_CONCAT,
    // statements
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_BLOCK,
};

// binary operators (E_BIN) and comparison operators (E_CMP)
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW };
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

struct jnode {
    uint16_t kind;
    uint16_t op;   // E_BIN op; E_FILTER/E_TEST id; E_TEST negation in `neg`
    uint32_t pos;  // byte offset in the normalized source, for error messages
    union {
        jv cval;                                     // E_CONST
        const char *name;                            // E_NAME
        struct { jnode **v; int n; } seq;            // E_LIST, E_TUPLE, E_DICT (2n: k0 v0 k1 v1), E_CONCAT
        struct { jnode *obj; const char *name; } attr;                  // E_ATTR
        struct { jnode *obj, *idx; } item;                              // E_ITEM
        struct { jnode *obj, *start, *stop, *step; } slice;             // E_SLICE (NULL = omitted)
        struct {                                                        // E_CALL, E_FILTER, E_TEST
            jnode *fn;  // callee (E_CALL) or operand (E_FILTER, E_TEST)
            jnode **args;
            int nargs;
            const char **kwnames;
            jnode **kwargs;
            int nkw;
            int neg;  // E_TEST: `is not`
        } call;
        struct { jnode *a, *b, *c; } ops;            // E_BIN/E_AND/E_OR (a,b), unary (a), E_COND (a if b else c)
        struct { jnode **v; int *ops; int n; } cmp;  // E_CMP: v[0] ops[0] v[1] ops[1] v[2] ...
        // statements
        struct { const char *s; size_t len; } text;  // S_TEXT
        jnode *expr;                                 // S_OUT
        struct { jnode *cond; jbody body, els; } ifs;
        struct {
            const char **targets;  // loop variable names (tuple unpacking when ntargets > 1)
            int ntargets;
            jnode *iter, *filter;  // filter: `for x in y if cond` (NULL when absent)
            jbody body, els;
        } fors;
        struct {
            const char **targets;  // S_SET: names; S_SETBLOCK: one name
            int ntargets;
            const char *attr;      // `set ns.attr = v`: targets[0] is ns
            jnode *value;
            jbody body;            // S_SETBLOCK
        } set;
        struct {
            const char *name;
            const char **params;
            jnode **defaults;  // [nparams], NULL where no default
            int nparams;
            bool varargs, kwargs;  // body mentions `varargs` / `kwargs`
            jbody body;
        } macro;
        jbody block;  // S_BLOCK: {% generation %} (transformers' tag; renders its body)
    } u;
};

struct st_jinja_template {
    jarena arena;   // owns the AST and src
    char *src;      // normalized source (\r\n -> \n, one trailing \n dropped), NUL-terminated
    size_t len;
    char name[64];  // message prefix
    jbody body;
};

typedef struct jmacro {
    const jnode *def;      // S_MACRO
    struct jscope *scope;  // scope the macro was defined in (its free variables resolve there)
} jmacro;

// ---- filter / test / method / builtin tables (jinja_builtins.c) -------------------------------
int jinja_filter_id(const char *name);   // -1 if unsupported
int jinja_test_id(const char *name);     // -1 if unsupported
bool jinja_method_known(const char *name);
int jinja_builtin_id(const char *name);  // -1 if none
enum { BI_RANGE, BI_NAMESPACE, BI_DICT, BI_RAISE, BI_STRFTIME, BI_COUNT };
extern const char *const jinja_builtin_names[BI_COUNT];

// Python-compatible float repr ("1.0", "0.30000000000000004", "1e+20"); buf >= 32 bytes.
void jinja_float_repr(double x, char *buf);
// Python str.isspace() for one code point.
bool jinja_py_space(uint32_t cp);
// Decodes one UTF-8 code point at s[*i] (advancing *i); invalid bytes decode as themselves.
uint32_t jinja_utf8_next(const char *s, size_t len, size_t *i);

#endif

// ---- render state (jinja_value.c, jinja_eval.c) -----------------------------------------------
typedef struct jscope {
    struct jscope *parent;  // enclosing scope; NULL at the template root (then context, then builtins)
    int n, cap;
    const char **names;  // [cap], n used
    jv *vals;            // [cap]
} jscope;

typedef struct jsb {  // string builder in the render arena
    char *p;
    size_t n, cap;
} jsb;

typedef struct jrender {
    jarena A;
    jmp_buf jb;
    const st_jinja_template *T;
    st_jinja_opts o;
    uint64_t steps;
    int depth;       // macro call depth
    uint32_t pos;    // source offset of the node being evaluated (for messages)
    jsb *out;        // current output (a macro call swaps in its own)
    jscope *root;
    jdict *vars;     // the JSON context
} jrender;

_Noreturn void jfail(jrender *R, const char *fmt, ...) ST_PRINTF(2, 3);
void *jalloc(jrender *R, size_t n);
void jstep(jrender *R, uint64_t n);

jv jv_none(void);
jv jv_bool(bool b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_undef(jrender *R, const char *fmt, ...) ST_PRINTF(2, 3);
jv jv_strn(jrender *R, const char *s, size_t n);
jv jv_cstr(jrender *R, const char *s);
jv jv_list(jrender *R, size_t cap);
jv jv_dict(jrender *R, size_t cap);
void list_push(jrender *R, jlist *l, jv v);
jv *dict_get(jrender *R, const jdict *d, jv key);
jv *dict_get_s(const jdict *d, const char *key);
void dict_set(jrender *R, jdict *d, jv key, jv val);

void sb_put(jrender *R, jsb *b, const char *s, size_t n);
void sb_puts(jrender *R, jsb *b, const char *s);
void sb_putc(jrender *R, jsb *b, char c);
jv sb_take(jrender *R, jsb *b);

const char *jv_typename(jv v);
bool jv_truthy(jrender *R, jv v);
bool jv_eq(jrender *R, jv a, jv b);
int jv_cmp(jrender *R, jv a, jv b);  // -1/0/1; errors on types Python cannot order
void jv_str_append(jrender *R, jsb *b, jv v);   // Python str(v)
void jv_repr_append(jrender *R, jsb *b, jv v);  // Python repr(v)
jv jv_to_string(jrender *R, jv v);
_Noreturn void jv_undef_fail(jrender *R, jv v);
void jv_tojson(jrender *R, jsb *b, jv v, const char *indent, const char *isep, const char *ksep, bool sort_keys,
               bool ensure_ascii, int level);
jv jv_from_json(jrender *R, const json_t *j, int depth);
size_t jv_cplen(const jstr *s);
void put_utf8_cp(jrender *R, jsb *b, uint32_t cp);
