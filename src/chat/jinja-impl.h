/*
 * jinja-impl.h - what the files of the Jinja engine share: the arena, the
 * value type, the syntax tree and the render context.
 *
 *   jinja-value.c    arena, values, Python's str()/repr(), equality, order, JSON
 *   jinja-lex.c      template text -> tokens, with Jinja's whitespace rules
 *   jinja-parse.c    tokens -> syntax tree
 *   jinja-eval.c     the interpreter: statements, expressions, scopes, limits
 *   jinja-filters.c  filters and tests
 *   jinja-methods.c  str/dict/list methods and the global functions
 *
 * Memory. A parsed template lives in one arena (its nodes, names, constant
 * strings). A render allocates every intermediate value in its own arena
 * and frees it in one go at the end, so values need no reference counts:
 * they are immutable (ImmutableSandboxedEnvironment forbids mutating lists
 * and dictionaries) and may be shared freely. The one mutable object, a
 * namespace, is only changed by `{% set ns.x = ... %}`. The arena counts
 * its bytes against max_memory_bytes, which is what bounds a template that
 * builds ever-larger strings.
 *
 * Errors. Evaluation uses a sticky status in the render context: a failing
 * function records the first error (with the template line) and returns a
 * harmless value; callers check `cx->st` after anything that can fail.
 */
#ifndef HR_CHAT_JINJA_IMPL_H
#define HR_CHAT_JINJA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "chat/jinja.h"

/* ---- arena ---- */

struct jx_chunk;
struct jx_arena {
    struct jx_chunk *head;
    size_t used_bytes;  /* bytes handed out plus chunk overhead */
    size_t limit_bytes; /* 0: unlimited */
};
/* Zeroed memory, 16-byte aligned; NULL when the limit or malloc fails. */
void *jx_alloc(struct jx_arena *a, size_t n);
void jx_arena_free(struct jx_arena *a);

/* ---- values ---- */

enum jv_type {
    JV_UNDEF,  /* Jinja's Undefined: prints nothing, fails when used */
    JV_NONE,
    JV_BOOL,
    JV_INT,    /* int64; overflow is an error where Python would grow */
    JV_FLOAT,
    JV_STR,
    JV_LIST,   /* also tuples (flag JX_TUPLE) */
    JV_DICT,
    JV_NS,     /* namespace(): a mutable dict reached by attribute */
    JV_MACRO,  /* a macro or a call block's caller */
    JV_FUNC,   /* a global function (range, dict, namespace, ...) */
    JV_METHOD, /* a method bound to its receiver: "abc".upper */
    JV_LOOP,   /* the `loop` variable of a for loop */
};

struct jstr {
    size_t len;
    char s[]; /* len bytes, then a NUL */
};

struct jv;
struct jlist {
    size_t n;
    struct jv *items;
};
struct jdict {
    size_t n, cap;
    struct jv *keys; /* any hashable scalar; strings almost always */
    struct jv *vals;
};

/* Why a value is undefined, for Jinja's messages: "'x' is undefined",
 * "'dict object' has no attribute 'x'", "list object has no element 3". */
struct jundef {
    const char *name;     /* the missing name, attribute or key (as text) */
    const char *obj_type; /* NULL: a missing variable */
    bool element;         /* an integer index out of range */
};

struct jmethod {
    struct jv *self;
    int id; /* enum in jinja-methods.c */
};

struct jloop;
struct jmacro;

#define JX_TUPLE 1u       /* a list that prints as a tuple */
#define JX_DICT_KEYS 2u   /* d.keys(): prints as dict_keys([...]) */
#define JX_DICT_VALUES 4u /* d.values() */
#define JX_DICT_ITEMS 8u  /* d.items() */

struct jv {
    uint8_t type;
    uint8_t flags;
    union {
        bool b;
        int64_t i;
        double f;
        const struct jstr *s;
        struct jlist *l;
        struct jdict *d;
        const struct jundef *u;
        struct jmacro *m;
        int fn;
        struct jmethod *meth;
        struct jloop *loop;
    };
};

static inline struct jv jv_undef(void) { return (struct jv){.type = JV_UNDEF}; }
static inline struct jv jv_none(void) { return (struct jv){.type = JV_NONE}; }
static inline struct jv jv_bool(bool b) { return (struct jv){.type = JV_BOOL, .b = b}; }
static inline struct jv jv_int(int64_t i) { return (struct jv){.type = JV_INT, .i = i}; }
static inline struct jv jv_float(double f) { return (struct jv){.type = JV_FLOAT, .f = f}; }

/* ---- syntax tree ---- */

enum jn_kind {
    /* expressions */
    JN_CONST, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL,
    JN_FILTER, JN_TEST, JN_NEG, JN_POS, JN_NOT, JN_BINOP, JN_AND, JN_OR, JN_COMPARE,
    JN_CONCAT, JN_COND,
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_CALLBLOCK,
    JN_FILTERBLOCK, JN_BREAK, JN_CONTINUE, JN_BODY,
};

enum jn_op {
    JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW,
    JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE, JO_IN, JO_NOTIN,
};

/*
 * One node. Fields by kind:
 *   CONST       val
 *   NAME        name, sym
 *   LIST/TUPLE  kids[n]            DICT  kids[2n] (key, value, ...)
 *   ATTR        a . name           ITEM  a [ b ]      SLICE a [ kids[0]:kids[1]:kids[2] ]
 *   CALL        a ( kids[n], kw_names[n_kw] = kw[n_kw] )
 *   FILTER      a | name ( kids, kw ), fn = filter index
 *   TEST        a is [not] name ( kids, kw ), fn = test index, op = negated
 *   NEG/POS/NOT a                  BINOP a op b       AND/OR a, b
 *   COMPARE     a, then ops[i] kids[i]               CONCAT kids[n]
 *   COND        b if a else c (c may be NULL)
 *   TEXT        val (a string)     OUTPUT a
 *   IF          a, body b (JN_BODY), else c (JN_BODY or IF or NULL)
 *   FOR         target a (NAME or TUPLE), iter b, body c, else d, cond e
 *   SET         target a (NAME, TUPLE or ATTR), value b
 *   SETBLOCK    target a, body c, filter chain b (FILTER with a NULL inner)
 *   MACRO       name/sym, params kids[n] (NAME), defaults kw[n] (or NULL), body c
 *   CALLBLOCK   call a, caller params kids/kw as MACRO, body c
 *   FILTERBLOCK filter chain b, body c
 *   BODY        kids[n] statements
 */
struct jnode {
    uint8_t kind;
    uint8_t op;
    uint16_t n_kw;
    int line;
    int fn;
    int sym;
    const char *name;
    struct jnode *a, *b, *c, *d, *e;
    struct jnode **kids;
    size_t n;
    uint8_t *ops;
    const char **kw_names;
    struct jnode **kw;
    struct jv val;
};

struct hr_jinja_template {
    struct jx_arena arena;
    struct jnode *root;     /* JN_BODY */
    const char **syms;      /* interned names, by symbol id */
    size_t n_syms;
    struct hr_jinja_limits limits;
};

/* ---- lexer ---- */

enum jt_kind {
    JT_EOF, JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
};

struct jtoken {
    uint8_t kind;
    int line;
    const char *s; /* TEXT, NAME, STRING: decoded bytes (arena); OP: the operator */
    size_t len;
    int64_t i;
    double f;
};

/* Tokenizes a whole template (after Jinja's newline normalization) into
 * an arena array terminated by JT_EOF. */
enum hr_status jx_lex(struct jx_arena *a, const char *src, size_t len, struct jtoken **out,
                      size_t *n_out, struct hr_err *err);

/* ---- render context ---- */

struct jframe;

struct jx_ctx {
    const struct hr_jinja_template *t;
    struct jx_arena arena;
    struct hr_jinja_limits lim;
    enum hr_status st;
    struct hr_err *err;
    char *raised;       /* raise_exception's message (malloc'd) */
    int line;           /* line of the node being evaluated, for messages */
    /* output */
    char *out;
    size_t out_len, out_cap;
    /* limits */
    uint32_t call_depth;
    uint64_t steps;
    double deadline;    /* hr_now_seconds() past which the render stops */
    struct jframe *globals; /* the root frame: template-level sets */
    struct jdict *context;  /* the caller's variables */
    int loop_ctl;       /* 1: break, 2: continue pending */
};

/* Records the first error, prefixed with the current line; returns it. */
enum hr_status jx_fail(struct jx_ctx *cx, enum hr_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Counts one unit of work (loop iteration, macro call); checks the
 * iteration and time bounds. False when the render must stop. */
bool jx_step(struct jx_ctx *cx);

/* value constructors (render arena); on failure they record HR_ERR_LIMIT
 * or HR_ERR_NOMEM in cx and return a placeholder */
struct jv jx_str(struct jx_ctx *cx, const char *s, size_t len);
struct jv jx_str_c(struct jx_ctx *cx, const char *s);
struct jstr *jx_str_alloc(struct jx_ctx *cx, size_t len); /* uninitialized bytes, NUL set */
struct jv jx_list(struct jx_ctx *cx, size_t n);          /* n undefined items */
struct jdict *jx_dict_new(struct jx_ctx *cx, size_t cap);
bool jx_dict_set(struct jx_ctx *cx, struct jdict *d, struct jv key, struct jv val);
/* The value for key, or NULL. */
struct jv *jx_dict_get(const struct jdict *d, struct jv key);
struct jv *jx_dict_get_str(const struct jdict *d, const char *key, size_t len);
struct jv jx_undef_attr(struct jx_ctx *cx, struct jv obj, const char *name, bool element);
struct jv jx_from_json(struct jx_ctx *cx, const json_t *j);
struct jv jx_from_json_arena(struct jx_arena *a, const json_t *j, bool *ok);

/* Python semantics */
bool jx_truthy(struct jv v);
bool jx_equal(struct jv a, struct jv b);
/* -1, 0, 1; records a TypeError in cx for unorderable types. */
int jx_compare(struct jx_ctx *cx, struct jv a, struct jv b);
const char *jx_type_name(struct jv v);   /* "str", "int", "dict", ... (Python's) */
const char *jx_obj_repr(struct jv v);    /* "dict object", "None", ... (Jinja's) */
/* Errors for using an undefined value: "'x' is undefined". */
enum hr_status jx_undef_fail(struct jx_ctx *cx, struct jv u);

/* A growable byte buffer in the render arena (for building strings). */
struct jbuf {
    char *p;
    size_t n, cap;
};
bool jx_buf_put(struct jx_ctx *cx, struct jbuf *b, const char *s, size_t n);
bool jx_buf_putc(struct jx_ctx *cx, struct jbuf *b, char c);
struct jv jx_buf_str(struct jx_ctx *cx, struct jbuf *b);

/* str(v) and repr(v) appended to a buffer; false after recording an error. */
bool jx_to_str(struct jx_ctx *cx, struct jbuf *b, struct jv v);
bool jx_to_repr(struct jx_ctx *cx, struct jbuf *b, struct jv v);
/* str(v) as a value (strings are returned as they are). */
struct jv jx_str_of(struct jx_ctx *cx, struct jv v);
/* Python float repr: shortest round-trip digits, "1.0", "1e-05", "inf". */
size_t jx_fmt_float(double f, char *buf, size_t cap);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). */
struct jx_json_opts {
    const char *indent; /* NULL: no newlines */
    size_t indent_len;
    const char *item_sep, *key_sep;
    bool sort_keys;
    bool ensure_ascii;
};
bool jx_to_json(struct jx_ctx *cx, struct jbuf *b, struct jv v, const struct jx_json_opts *o,
                int depth);

/* UTF-8 helpers: code point count, byte offset of code point i. */
size_t jx_utf8_len(const char *s, size_t n);
size_t jx_utf8_offset(const char *s, size_t n, size_t cp);

/* ---- filters, tests, methods, globals (jinja-filters.c, jinja-methods.c) ---- */

/* Index of a filter / test by name, or -1. */
int jx_filter_find(const char *name);
int jx_test_find(const char *name);
const char *jx_filter_name(int id);
struct jargs {
    struct jv *pos;
    size_t n_pos;
    const char **kw_names;
    struct jv *kw;
    size_t n_kw;
};
struct jv jx_filter_apply(struct jx_ctx *cx, int id, struct jv v, const struct jargs *args);
bool jx_test_apply(struct jx_ctx *cx, int id, struct jv v, const struct jargs *args);
/* Filter/test by name at run time (map('upper'), select('odd')). */
struct jv jx_filter_by_name(struct jx_ctx *cx, const char *name, struct jv v,
                            const struct jargs *args);
bool jx_test_by_name(struct jx_ctx *cx, const char *name, struct jv v, const struct jargs *args);

/* A method of v by name (a bound JV_METHOD), or -1 id when v has none. */
int jx_method_find(struct jv v, const char *name);
struct jv jx_method_call(struct jx_ctx *cx, struct jv self, int id, const struct jargs *args);
const char *jx_method_name(int id);
int jx_global_find(const char *name);
struct jv jx_global_call(struct jx_ctx *cx, int id, const struct jargs *args);
const char *jx_global_name(int id);

/* Python's `fmt % args` (also the `format` filter). */
struct jv jx_format_percent(struct jx_ctx *cx, struct jv fmt, struct jv args);

/* String operations shared by filters and methods (jinja-methods.c). */
enum { JX_STRIP_LEFT = 1, JX_STRIP_RIGHT = 2 };
struct jv jx_str_strip(struct jx_ctx *cx, struct jv s, const struct jv *chars, int sides);
struct jv jx_str_case(struct jx_ctx *cx, struct jv s, int mode); /* 0 lower 1 upper 2 title 3 capitalize */
struct jv jx_str_replace(struct jx_ctx *cx, struct jv s, struct jv old, struct jv new_,
                         int64_t count);
/* str.splitlines() into a list. */
struct jv jx_str_splitlines(struct jx_ctx *cx, struct jv s, bool keepends);
/* Python's str.isspace() for one code point. */
bool jx_cp_is_space(uint32_t c);
/* Decodes one UTF-8 code point at s[*i], advancing *i. */
uint32_t jx_utf8_next(const char *s, size_t n, size_t *i);

/* Calls any callable value (the interpreter's, used by filters too). */
struct jv jx_call_value(struct jx_ctx *cx, struct jv fn, const struct jargs *args);

/* Argument helpers: the i-th positional or the keyword `name`, else NULL. */
const struct jv *jx_arg(const struct jargs *a, size_t i, const char *name);
/* Records "f() got an unexpected keyword argument" style errors. */
bool jx_args_check(struct jx_ctx *cx, const char *fname, const struct jargs *a, size_t max_pos,
                   const char *const *kw_allowed);

/* Iterating: lists as they are, dict keys, string characters, undefined as
 * empty; anything else records "'int' object is not iterable". */
bool jx_iter_list(struct jx_ctx *cx, struct jv v, struct jlist *out);

/* Attribute access as Jinja's sandbox does it (x.name). */
struct jv jx_getattr(struct jx_ctx *cx, struct jv obj, const char *name, size_t len);
/* Item access (x[key]). */
struct jv jx_getitem(struct jx_ctx *cx, struct jv obj, struct jv key);

#endif
