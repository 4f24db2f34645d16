/*
 * jinja-parse.c - tokens to a syntax tree, by recursive descent in the
 * shape of jinja2/parser.py, so that precedence matches Python's Jinja:
 *
 *   expression := or ["if" or ["else" expression]]      (conditional)
 *   or         := and ("or" and)*
 *   and        := not ("and" not)*
 *   not        := "not" not | compare
 *   compare    := math1 (("=="|"!="|"<"|"<="|">"|">="|"in"|"not" "in") math1)*
 *   math1      := concat (("+"|"-") concat)*
 *   concat     := math2 ("~" math2)*
 *   math2      := pow (("*"|"/"|"//"|"%") pow)*
 *   pow        := unary ("**" unary)*
 *   unary      := ("-"|"+") unary-without-filters | primary postfix ; then
 *                 ("|" filter | "is" test | "(" call)*
 *
 * Two consequences worth knowing: `-2 ** 2` is 4 (unary binds tighter
 * than power, unlike Python), and filters and tests bind tighter than any
 * operator (`a + b | length` is `a + (b | length)`).
 *
 * Names are interned into symbol ids so scopes compare integers. Filters
 * and tests are resolved to indexes here; an unknown one becomes an error
 * only if it is evaluated (Jinja 3.1 also defers it inside `if` blocks).
 * Nesting is bounded by limits.max_depth, so a hostile template cannot
 * overflow the stack here or in the interpreter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja-impl.h"

struct parser {
    struct jx_arena *a;
    struct jtoken *t;
    size_t n, pos;
    struct hr_err *err;
    enum hr_status st;
    uint32_t depth, max_depth;
    const char **syms;
    size_t n_syms, cap_syms;
};

static const struct jtoken *cur(struct parser *P) { return &P->t[P->pos]; }
static const struct jtoken *peek(struct parser *P, size_t k)
{
    return P->pos + k < P->n ? &P->t[P->pos + k] : &P->t[P->n - 1];
}

static const char *tok_desc(const struct jtoken *t, char *buf, size_t cap)
{
    switch (t->kind) {
    case JT_EOF:
        return "end of template";
    case JT_TEXT:
        return "template data";
    case JT_VAR_BEGIN:
        return "'{{'";
    case JT_VAR_END:
        return "end of print statement";
    case JT_BLOCK_BEGIN:
        return "'{%'";
    case JT_BLOCK_END:
        return "end of statement block";
    case JT_STRING:
        return "string";
    case JT_INT:
        return "integer";
    case JT_FLOAT:
        return "float";
    default:
        snprintf(buf, cap, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
        return buf;
    }
}

static void fail_at(struct parser *P, int line, const char *fmt, const char *a1, const char *a2)
{
    if (P->st != HR_OK)
        return;
    char msg[400];
    snprintf(msg, sizeof(msg), fmt, a1, a2);
    P->st = hr_err_set(P->err, HR_ERR_INVALID, "line %d: %s", line, msg);
}

static void expected(struct parser *P, const char *what)
{
    char buf[64];
    fail_at(P, cur(P)->line, "expected %s, got %s", what, tok_desc(cur(P), buf, sizeof(buf)));
}

static bool is_op(const struct jtoken *t, const char *op)
{
    return t->kind == JT_OP && strcmp(t->s, op) == 0;
}
static bool is_name(const struct jtoken *t, const char *name)
{
    return t->kind == JT_NAME && t->len == strlen(name) && memcmp(t->s, name, t->len) == 0;
}

static bool accept_op(struct parser *P, const char *op)
{
    if (!is_op(cur(P), op))
        return false;
    P->pos++;
    return true;
}
static bool accept_name(struct parser *P, const char *name)
{
    if (!is_name(cur(P), name))
        return false;
    P->pos++;
    return true;
}
static bool expect_op(struct parser *P, const char *op)
{
    if (accept_op(P, op))
        return true;
    char what[16];
    snprintf(what, sizeof(what), "'%s'", op);
    expected(P, what);
    return false;
}

static struct jnode *node(struct parser *P, enum jn_kind kind, int line)
{
    struct jnode *n = jx_alloc(P->a, sizeof(*n));
    if (!n) {
        if (P->st == HR_OK)
            P->st = hr_err_set(P->err, HR_ERR_NOMEM, "out of memory parsing the template");
        return NULL;
    }
    n->kind = (uint8_t)kind;
    n->line = line;
    n->fn = -1;
    n->sym = -1;
    return n;
}

/* A growable array of node pointers, copied into the arena when done. */
struct nodes {
    struct jnode **v;
    size_t n, cap;
};
static bool nodes_push(struct parser *P, struct nodes *ns, struct jnode *x)
{
    if (!x)
        return false;
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 8;
        struct jnode **v = jx_alloc(P->a, cap * sizeof(*v));
        if (!v) {
            if (P->st == HR_OK)
                P->st = hr_err_set(P->err, HR_ERR_NOMEM, "out of memory parsing the template");
            return false;
        }
        if (ns->n)
            memcpy(v, ns->v, ns->n * sizeof(*v));
        ns->v = v;
        ns->cap = cap;
    }
    ns->v[ns->n++] = x;
    return true;
}

static int intern(struct parser *P, const char *s, size_t len)
{
    for (size_t i = 0; i < P->n_syms; i++)
        if (strlen(P->syms[i]) == len && memcmp(P->syms[i], s, len) == 0)
            return (int)i;
    if (P->n_syms == P->cap_syms) {
        size_t cap = P->cap_syms ? P->cap_syms * 2 : 32;
        const char **v = jx_alloc(P->a, cap * sizeof(*v));
        if (!v)
            return -1;
        if (P->n_syms)
            memcpy(v, P->syms, P->n_syms * sizeof(*v));
        P->syms = v;
        P->cap_syms = cap;
    }
    char *c = jx_alloc(P->a, len + 1);
    if (!c)
        return -1;
    memcpy(c, s, len);
    P->syms[P->n_syms] = c;
    return (int)P->n_syms++;
}

static struct jnode *name_node(struct parser *P, const struct jtoken *t)
{
    struct jnode *n = node(P, JN_NAME, t->line);
    if (!n)
        return NULL;
    n->sym = intern(P, t->s, t->len);
    if (n->sym < 0) {
        if (P->st == HR_OK)
            P->st = hr_err_set(P->err, HR_ERR_NOMEM, "out of memory parsing the template");
        return NULL;
    }
    n->name = P->syms[n->sym];
    return n;
}

static bool enter(struct parser *P)
{
    if (++P->depth > P->max_depth) {
        if (P->st == HR_OK)
            P->st = hr_err_set(P->err, HR_ERR_LIMIT, "line %d: template nesting deeper than %u",
                               cur(P)->line, P->max_depth);
        return false;
    }
    return true;
}
static void leave(struct parser *P) { P->depth--; }

static struct jnode *parse_expression(struct parser *P, bool with_cond);
static struct jnode *parse_or(struct parser *P);
static struct jnode *parse_unary(struct parser *P, bool with_filter);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_postfix(struct parser *P, struct jnode *n);

/* Call arguments after '(' up to ')': positional then name=value. */
static bool parse_call_args(struct parser *P, struct jnode *call)
{
    struct nodes pos = {0}, kw = {0};
    const char *names[256];
    size_t n_kw = 0;
    while (!is_op(cur(P), ")")) {
        if (pos.n + n_kw > 0 && !expect_op(P, ","))
            return false;
        if (is_op(cur(P), ")"))
            break;
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            fail_at(P, cur(P)->line, "%s%s", "*args and **kwargs in calls are not supported", "");
            return false;
        }
        if (cur(P)->kind == JT_NAME && is_op(peek(P, 1), "=")) {
            if (n_kw == 256) {
                fail_at(P, cur(P)->line, "%s%s", "too many keyword arguments", "");
                return false;
            }
            char *nm = jx_alloc(P->a, cur(P)->len + 1);
            if (!nm)
                return false;
            memcpy(nm, cur(P)->s, cur(P)->len);
            names[n_kw++] = nm;
            P->pos += 2;
            if (!nodes_push(P, &kw, parse_expression(P, true)))
                return false;
        } else {
            if (n_kw) {
                fail_at(P, cur(P)->line, "%s%s", "positional argument follows keyword argument", "");
                return false;
            }
            if (!nodes_push(P, &pos, parse_expression(P, true)))
                return false;
        }
    }
    P->pos++; /* ')' */
    call->kids = pos.v;
    call->n = pos.n;
    call->kw = kw.v;
    call->n_kw = (uint16_t)n_kw;
    if (n_kw) {
        call->kw_names = jx_alloc(P->a, n_kw * sizeof(char *));
        if (!call->kw_names)
            return false;
        memcpy(call->kw_names, names, n_kw * sizeof(char *));
    }
    return true;
}

/* A dotted name after '|' or 'is'. */
static char *dotted_name(struct parser *P)
{
    if (cur(P)->kind != JT_NAME) {
        expected(P, "a name");
        return NULL;
    }
    char buf[256];
    size_t k = 0;
    for (;;) {
        const struct jtoken *t = cur(P);
        if (k + t->len + 2 > sizeof(buf)) {
            expected(P, "a shorter name");
            return NULL;
        }
        memcpy(buf + k, t->s, t->len);
        k += t->len;
        P->pos++;
        if (is_op(cur(P), ".") && peek(P, 1)->kind == JT_NAME) {
            buf[k++] = '.';
            P->pos++;
            continue;
        }
        break;
    }
    char *s = jx_alloc(P->a, k + 1);
    if (s)
        memcpy(s, buf, k);
    return s;
}

static struct jnode *parse_filter(struct parser *P, struct jnode *inner)
{
    int line = cur(P)->line;
    P->pos++; /* '|' */
    struct jnode *f = node(P, JN_FILTER, line);
    if (!f)
        return NULL;
    f->a = inner;
    if (!(f->name = dotted_name(P)))
        return NULL;
    f->fn = jx_filter_find(f->name);
    if (accept_op(P, "(") && !parse_call_args(P, f))
        return NULL;
    return f;
}

static struct jnode *parse_test(struct parser *P, struct jnode *inner)
{
    int line = cur(P)->line;
    P->pos++; /* 'is' */
    struct jnode *t = node(P, JN_TEST, line);
    if (!t)
        return NULL;
    t->a = inner;
    if (accept_name(P, "not"))
        t->op = 1;
    if (!(t->name = dotted_name(P)))
        return NULL;
    t->fn = jx_test_find(t->name);
    const struct jtoken *c = cur(P);
    if (accept_op(P, "(")) {
        if (!parse_call_args(P, t))
            return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT ||
                c->kind == JT_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            fail_at(P, c->line, "%s%s", "You cannot chain multiple tests with is", "");
            return NULL;
        }
        struct jnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg)
            return NULL;
        t->kids = jx_alloc(P->a, sizeof(struct jnode *));
        if (!t->kids)
            return NULL;
        t->kids[0] = arg;
        t->n = 1;
    }
    return t;
}

static struct jnode *parse_filter_expr(struct parser *P, struct jnode *n)
{
    uint32_t levels = 0;
    while (n && P->st == HR_OK) {
        bool pipe = is_op(cur(P), "|"), test = is_name(cur(P), "is"), call = is_op(cur(P), "(");
        if (!pipe && !test && !call)
            break;
        levels++;
        if (!enter(P)) {
            n = NULL;
            break;
        }
        if (pipe) {
            n = parse_filter(P, n);
        } else if (test) {
            n = parse_test(P, n);
        } else {
            struct jnode *c = node(P, JN_CALL, cur(P)->line);
            P->pos++;
            if (!c || !parse_call_args(P, c)) {
                n = NULL;
                break;
            }
            c->a = n;
            n = c;
        }
    }
    P->depth -= levels;
    return P->st == HR_OK ? n : NULL;
}

/* [a], [a:b], [a:b:c] and their omissions. */
static struct jnode *parse_subscript(struct parser *P, struct jnode *obj)
{
    int line = cur(P)->line;
    P->pos++; /* '[' */
    struct jnode *parts[3] = {NULL, NULL, NULL};
    int n_colons = 0;
    if (!is_op(cur(P), ":"))
        if (!(parts[0] = parse_expression(P, true)))
            return NULL;
    while (n_colons < 2 && accept_op(P, ":")) {
        n_colons++;
        if (!is_op(cur(P), ":") && !is_op(cur(P), "]"))
            if (!(parts[n_colons] = parse_expression(P, true)))
                return NULL;
    }
    if (!expect_op(P, "]"))
        return NULL;
    struct jnode *n = node(P, n_colons ? JN_SLICE : JN_ITEM, line);
    if (!n)
        return NULL;
    n->a = obj;
    if (n_colons) {
        n->kids = jx_alloc(P->a, 3 * sizeof(struct jnode *));
        if (!n->kids)
            return NULL;
        memcpy(n->kids, parts, sizeof(parts));
        n->n = 3;
    } else {
        n->b = parts[0];
    }
    return n;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n)
{
    uint32_t levels = 0;
    while (n && P->st == HR_OK) {
        const struct jtoken *t = cur(P);
        if (!is_op(t, ".") && !is_op(t, "[") && !is_op(t, "("))
            break;
        levels++;
        if (!enter(P)) {
            n = NULL;
            break;
        }
        if (is_op(t, ".")) {
            P->pos++;
            const struct jtoken *nm = cur(P);
            if (nm->kind == JT_NAME) {
                struct jnode *a = node(P, JN_ATTR, nm->line);
                char *s = a ? jx_alloc(P->a, nm->len + 1) : NULL;
                if (!s) {
                    n = NULL;
                    break;
                }
                memcpy(s, nm->s, nm->len);
                a->a = n;
                a->name = s;
                P->pos++;
                n = a;
            } else if (nm->kind == JT_INT) {
                struct jnode *a = node(P, JN_ITEM, nm->line), *k = node(P, JN_CONST, nm->line);
                if (!a || !k) {
                    n = NULL;
                    break;
                }
                k->val = jv_int(nm->i);
                a->a = n;
                a->b = k;
                P->pos++;
                n = a;
            } else {
                expected(P, "a name or number after '.'");
                n = NULL;
            }
        } else if (is_op(t, "[")) {
            n = parse_subscript(P, n);
        } else {
            struct jnode *c = node(P, JN_CALL, t->line);
            P->pos++;
            if (!c || !parse_call_args(P, c)) {
                n = NULL;
                break;
            }
            c->a = n;
            n = c;
        }
    }
    P->depth -= levels;
    return P->st == HR_OK ? n : NULL;
}

/* Parses a comma-separated sequence up to `close`; into ns. */
static bool parse_seq(struct parser *P, const char *close, struct nodes *ns, bool dict)
{
    while (!is_op(cur(P), close)) {
        if (ns->n && !expect_op(P, ","))
            return false;
        if (is_op(cur(P), close))
            break;
        if (!nodes_push(P, ns, parse_expression(P, true)))
            return false;
        if (dict) {
            if (!expect_op(P, ":") || !nodes_push(P, ns, parse_expression(P, true)))
                return false;
        }
    }
    P->pos++;
    return true;
}

static struct jnode *parse_primary(struct parser *P)
{
    const struct jtoken *t = cur(P);
    struct jnode *n = NULL;
    if (t->kind == JT_NAME) {
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            if ((n = node(P, JN_CONST, t->line)))
                n->val = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            if ((n = node(P, JN_CONST, t->line)))
                n->val = jv_none();
        } else {
            n = name_node(P, t);
        }
        P->pos++;
        return n;
    }
    if (t->kind == JT_STRING) {
        /* Adjacent literals concatenate, as in Python. */
        size_t total = 0, k = P->pos;
        while (P->t[k].kind == JT_STRING)
            total += P->t[k++].len;
        struct jstr *s = jx_alloc(P->a, sizeof(struct jstr) + total + 1);
        if (!(n = node(P, JN_CONST, t->line)) || !s) {
            if (P->st == HR_OK)
                P->st = hr_err_set(P->err, HR_ERR_NOMEM, "out of memory parsing the template");
            return NULL;
        }
        s->len = 0;
        for (; P->pos < k; P->pos++) {
            memcpy(s->s + s->len, P->t[P->pos].s, P->t[P->pos].len);
            s->len += P->t[P->pos].len;
        }
        n->val = (struct jv){.type = JV_STR, .s = s};
        return n;
    }
    if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        if ((n = node(P, JN_CONST, t->line)))
            n->val = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        P->pos++;
        return n;
    }
    if (is_op(t, "(")) {
        P->pos++;
        if (accept_op(P, ")")) {
            if ((n = node(P, JN_TUPLE, t->line)))
                n->n = 0;
            return n;
        }
        struct jnode *first = parse_expression(P, true);
        if (!first)
            return NULL;
        if (accept_op(P, ")"))
            return first;
        struct nodes ns = {0};
        nodes_push(P, &ns, first);
        while (accept_op(P, ",")) {
            if (is_op(cur(P), ")"))
                break;
            if (!nodes_push(P, &ns, parse_expression(P, true)))
                return NULL;
        }
        if (!expect_op(P, ")"))
            return NULL;
        if ((n = node(P, JN_TUPLE, t->line)))
            n->kids = ns.v, n->n = ns.n;
        return n;
    }
    if (is_op(t, "[") || is_op(t, "{")) {
        bool dict = is_op(t, "{");
        P->pos++;
        struct nodes ns = {0};
        if (!parse_seq(P, dict ? "}" : "]", &ns, dict))
            return NULL;
        if ((n = node(P, dict ? JN_DICT : JN_LIST, t->line))) {
            n->kids = ns.v;
            n->n = dict ? ns.n / 2 : ns.n;
        }
        return n;
    }
    expected(P, "an expression");
    return NULL;
}

static struct jnode *parse_unary(struct parser *P, bool with_filter)
{
    if (!enter(P))
        return NULL;
    const struct jtoken *t = cur(P);
    struct jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        P->pos++;
        n = node(P, is_op(t, "-") ? JN_NEG : JN_POS, t->line);
        if (n && !(n->a = parse_unary(P, false)))
            n = NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter)
        n = parse_filter_expr(P, n);
    leave(P);
    return n;
}

static struct jnode *binop(struct parser *P, enum jn_op op, struct jnode *l, struct jnode *r,
                           int line)
{
    if (!l || !r)
        return NULL;
    struct jnode *n = node(P, JN_BINOP, line);
    if (n)
        n->op = (uint8_t)op, n->a = l, n->b = r;
    return n;
}

/* Left-associative chains (a + b + c ..., a | f | g ...) nest the tree one
 * level per operator, so each loop counts its links against max_depth and
 * gives them back when the chain ends. */
static struct jnode *parse_pow(struct parser *P)
{
    uint32_t levels = 0;
    struct jnode *l = parse_unary(P, true);
    while (l && is_op(cur(P), "**")) {
        int line = cur(P)->line;
        P->pos++;
        levels++;
        l = enter(P) ? binop(P, JO_POW, l, parse_unary(P, true), line) : NULL;
    }
    P->depth -= levels;
    return l;
}

static struct jnode *parse_math2(struct parser *P)
{
    uint32_t levels = 0;
    struct jnode *l = parse_pow(P);
    while (l) {
        const struct jtoken *t = cur(P);
        enum jn_op op;
        if (is_op(t, "*"))
            op = JO_MUL;
        else if (is_op(t, "/"))
            op = JO_DIV;
        else if (is_op(t, "//"))
            op = JO_FLOORDIV;
        else if (is_op(t, "%"))
            op = JO_MOD;
        else
            break;
        P->pos++;
        levels++;
        l = enter(P) ? binop(P, op, l, parse_pow(P), t->line) : NULL;
    }
    P->depth -= levels;
    return l;
}

static struct jnode *parse_concat(struct parser *P)
{
    struct jnode *first = parse_math2(P);
    if (!first || !is_op(cur(P), "~"))
        return first;
    struct nodes ns = {0};
    nodes_push(P, &ns, first);
    int line = cur(P)->line;
    while (accept_op(P, "~"))
        if (!nodes_push(P, &ns, parse_math2(P)))
            return NULL;
    struct jnode *n = node(P, JN_CONCAT, line);
    if (n)
        n->kids = ns.v, n->n = ns.n;
    return n;
}

static struct jnode *parse_math1(struct parser *P)
{
    uint32_t levels = 0;
    struct jnode *l = parse_concat(P);
    while (l) {
        const struct jtoken *t = cur(P);
        enum jn_op op;
        if (is_op(t, "+"))
            op = JO_ADD;
        else if (is_op(t, "-"))
            op = JO_SUB;
        else
            break;
        P->pos++;
        levels++;
        l = enter(P) ? binop(P, op, l, parse_concat(P), t->line) : NULL;
    }
    P->depth -= levels;
    return l;
}

static struct jnode *parse_compare(struct parser *P)
{
    struct jnode *first = parse_math1(P);
    if (!first)
        return NULL;
    struct nodes ns = {0};
    uint8_t ops[64];
    size_t n_ops = 0;
    int line = cur(P)->line;
    for (;;) {
        const struct jtoken *t = cur(P);
        enum jn_op op;
        if (is_op(t, "=="))
            op = JO_EQ;
        else if (is_op(t, "!="))
            op = JO_NE;
        else if (is_op(t, "<"))
            op = JO_LT;
        else if (is_op(t, "<="))
            op = JO_LE;
        else if (is_op(t, ">"))
            op = JO_GT;
        else if (is_op(t, ">="))
            op = JO_GE;
        else if (is_name(t, "in"))
            op = JO_IN;
        else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = JO_NOTIN;
            P->pos++;
        } else
            break;
        P->pos++;
        if (n_ops == sizeof(ops)) {
            fail_at(P, t->line, "%s%s", "too many chained comparisons", "");
            return NULL;
        }
        ops[n_ops++] = (uint8_t)op;
        if (!nodes_push(P, &ns, parse_math1(P)))
            return NULL;
    }
    if (!n_ops)
        return first;
    struct jnode *n = node(P, JN_COMPARE, line);
    if (!n || !(n->ops = jx_alloc(P->a, n_ops)))
        return NULL;
    memcpy(n->ops, ops, n_ops);
    n->a = first;
    n->kids = ns.v;
    n->n = ns.n;
    return n;
}

static struct jnode *parse_not(struct parser *P)
{
    if (is_name(cur(P), "not")) {
        int line = cur(P)->line;
        P->pos++;
        if (!enter(P))
            return NULL;
        struct jnode *n = node(P, JN_NOT, line);
        if (n && !(n->a = parse_not(P)))
            n = NULL;
        leave(P);
        return n;
    }
    return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P)
{
    uint32_t levels = 0;
    struct jnode *l = parse_not(P);
    while (l && is_name(cur(P), "and")) {
        struct jnode *n = node(P, JN_AND, cur(P)->line);
        P->pos++;
        levels++;
        if (!n || !enter(P) || !(n->b = parse_not(P))) {
            l = NULL;
            break;
        }
        n->a = l;
        l = n;
    }
    P->depth -= levels;
    return l;
}

static struct jnode *parse_or(struct parser *P)
{
    uint32_t levels = 0;
    struct jnode *l = parse_and(P);
    while (l && is_name(cur(P), "or")) {
        struct jnode *n = node(P, JN_OR, cur(P)->line);
        P->pos++;
        levels++;
        if (!n || !enter(P) || !(n->b = parse_and(P))) {
            l = NULL;
            break;
        }
        n->a = l;
        l = n;
    }
    P->depth -= levels;
    return l;
}

static struct jnode *parse_expression(struct parser *P, bool with_cond)
{
    if (!enter(P))
        return NULL;
    struct jnode *e = parse_or(P);
    while (with_cond && e && is_name(cur(P), "if")) {
        struct jnode *c = node(P, JN_COND, cur(P)->line);
        P->pos++;
        if (!c || !(c->a = parse_or(P)))
            return NULL;
        c->b = e;
        if (accept_name(P, "else") && !(c->c = parse_expression(P, true)))
            return NULL;
        e = c;
    }
    leave(P);
    return e;
}

/* An expression, or an implicit tuple `a, b` (in {{ }}, set and for). */
static struct jnode *parse_tuple(struct parser *P, bool with_cond)
{
    int line = cur(P)->line;
    struct jnode *first = parse_expression(P, with_cond);
    if (!first || !is_op(cur(P), ","))
        return first;
    struct nodes ns = {0};
    nodes_push(P, &ns, first);
    while (accept_op(P, ",")) {
        const struct jtoken *t = cur(P);
        if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || is_name(t, "in") || is_op(t, "="))
            break;
        if (!nodes_push(P, &ns, parse_expression(P, with_cond)))
            return NULL;
    }
    struct jnode *n = node(P, JN_TUPLE, line);
    if (n)
        n->kids = ns.v, n->n = ns.n;
    return n;
}

/* Assignment targets: name, name.attr (set only), or a tuple of names. */
static struct jnode *parse_target(struct parser *P, bool allow_attr)
{
    int line = cur(P)->line;
    struct nodes ns = {0};
    bool parens = accept_op(P, "(");
    do {
        const struct jtoken *t = cur(P);
        if (t->kind != JT_NAME) {
            expected(P, "a name to assign to");
            return NULL;
        }
        struct jnode *n = name_node(P, t);
        P->pos++;
        if (allow_attr && !parens && is_op(cur(P), ".") && peek(P, 1)->kind == JT_NAME) {
            struct jnode *a = node(P, JN_ATTR, line);
            if (!a)
                return NULL;
            a->a = n;
            char *s = jx_alloc(P->a, peek(P, 1)->len + 1);
            if (!s)
                return NULL;
            memcpy(s, peek(P, 1)->s, peek(P, 1)->len);
            a->name = s;
            P->pos += 2;
            return a;
        }
        if (!nodes_push(P, &ns, n))
            return NULL;
    } while (accept_op(P, ",") && cur(P)->kind == JT_NAME);
    if (parens && !expect_op(P, ")"))
        return NULL;
    if (ns.n == 1 && !parens)
        return ns.v[0];
    struct jnode *n = node(P, JN_TUPLE, line);
    if (n)
        n->kids = ns.v, n->n = ns.n;
    return n;
}

static bool expect_block_end(struct parser *P)
{
    if (cur(P)->kind == JT_BLOCK_END) {
        P->pos++;
        return true;
    }
    expected(P, "end of statement block");
    return false;
}

static struct jnode *parse_body(struct parser *P, const char *const *ends, const char *owner,
                                int owner_line);

/* Parameters of a macro or call block: (a, b=default, ...). */
static bool parse_params(struct parser *P, struct jnode *m)
{
    enum { MAX_PARAMS = 64 };
    struct jnode *names[MAX_PARAMS], *defs[MAX_PARAMS];
    size_t n = 0;
    if (!expect_op(P, "("))
        return false;
    while (!is_op(cur(P), ")")) {
        if (n && !expect_op(P, ","))
            return false;
        if (is_op(cur(P), ")"))
            break;
        if (cur(P)->kind != JT_NAME) {
            expected(P, "a parameter name");
            return false;
        }
        if (n == MAX_PARAMS) {
            fail_at(P, cur(P)->line, "%s%s", "more than 64 parameters", "");
            return false;
        }
        if (!(names[n] = name_node(P, cur(P))))
            return false;
        P->pos++;
        defs[n] = NULL;
        if (accept_op(P, "=")) {
            if (!(defs[n] = parse_expression(P, true)))
                return false;
        } else if (n && defs[n - 1]) {
            fail_at(P, cur(P)->line, "%s%s", "non-default argument follows default argument", "");
            return false;
        }
        n++;
    }
    P->pos++;
    if (n) {
        m->kids = jx_alloc(P->a, n * sizeof(struct jnode *));
        m->kw = jx_alloc(P->a, n * sizeof(struct jnode *));
        if (!m->kids || !m->kw) {
            if (P->st == HR_OK)
                P->st = hr_err_set(P->err, HR_ERR_NOMEM, "out of memory parsing the template");
            return false;
        }
        memcpy(m->kids, names, n * sizeof(struct jnode *));
        memcpy(m->kw, defs, n * sizeof(struct jnode *));
    }
    m->n = n;
    return true;
}

static struct jnode *parse_statement(struct parser *P)
{
    const struct jtoken *t = cur(P);
    int line = t->line;
    if (t->kind != JT_NAME) {
        expected(P, "a statement name");
        return NULL;
    }
    if (!enter(P))
        return NULL;
    struct jnode *n = NULL;
    P->pos++;
    if (is_name(t, "if")) {
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        n = node(P, JN_IF, line);
        struct jnode *head = n;
        while (n) {
            if (!(n->a = parse_tuple(P, false)) || !expect_block_end(P))
                return NULL;
            if (!(n->b = parse_body(P, ends, "if", line)))
                return NULL;
            const struct jtoken *e = cur(P);
            P->pos++;
            if (is_name(e, "elif")) {
                struct jnode *el = node(P, JN_IF, e->line);
                n->c = el;
                n = el;
                continue;
            }
            if (is_name(e, "else")) {
                static const char *const ends2[] = {"endif", NULL};
                if (!expect_block_end(P) || !(n->c = parse_body(P, ends2, "if", line)))
                    return NULL;
                P->pos++;
            }
            if (!expect_block_end(P))
                return NULL;
            break;
        }
        n = head;
    } else if (is_name(t, "for")) {
        static const char *const ends[] = {"else", "endfor", NULL};
        static const char *const ends2[] = {"endfor", NULL};
        n = node(P, JN_FOR, line);
        if (!n || !(n->a = parse_target(P, false)))
            return NULL;
        if (!accept_name(P, "in")) {
            expected(P, "'in'");
            return NULL;
        }
        if (!(n->b = parse_tuple(P, false)))
            return NULL;
        if (accept_name(P, "if") && !(n->e = parse_expression(P, true)))
            return NULL;
        if (is_name(cur(P), "recursive")) {
            fail_at(P, cur(P)->line, "%s%s", "recursive loops are not supported", "");
            return NULL;
        }
        if (!expect_block_end(P) || !(n->c = parse_body(P, ends, "for", line)))
            return NULL;
        if (accept_name(P, "else")) {
            if (!expect_block_end(P) || !(n->d = parse_body(P, ends2, "for", line)))
                return NULL;
        }
        P->pos++;
        if (!expect_block_end(P))
            return NULL;
    } else if (is_name(t, "set")) {
        struct jnode *target = parse_target(P, true);
        if (!target)
            return NULL;
        if (accept_op(P, "=")) {
            n = node(P, JN_SET, line);
            if (!n || !(n->b = parse_tuple(P, true)) || !expect_block_end(P))
                return NULL;
            n->a = target;
        } else {
            static const char *const ends[] = {"endset", NULL};
            n = node(P, JN_SETBLOCK, line);
            if (!n)
                return NULL;
            n->a = target;
            while (n && is_op(cur(P), "|"))
                n->b = parse_filter(P, n->b);
            if (P->st != HR_OK || !expect_block_end(P) ||
                !(n->c = parse_body(P, ends, "set", line)))
                return NULL;
            P->pos++;
            if (!expect_block_end(P))
                return NULL;
        }
    } else if (is_name(t, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        n = node(P, JN_MACRO, line);
        if (!n)
            return NULL;
        if (cur(P)->kind != JT_NAME) {
            expected(P, "a macro name");
            return NULL;
        }
        struct jnode *nm = name_node(P, cur(P));
        if (!nm)
            return NULL;
        n->sym = nm->sym;
        n->name = nm->name;
        P->pos++;
        if (!parse_params(P, n) || !expect_block_end(P) ||
            !(n->c = parse_body(P, ends, "macro", line)))
            return NULL;
        P->pos++;
        if (cur(P)->kind == JT_NAME)
            P->pos++; /* {% endmacro name %} */
        if (!expect_block_end(P))
            return NULL;
    } else if (is_name(t, "call")) {
        static const char *const ends[] = {"endcall", NULL};
        n = node(P, JN_CALLBLOCK, line);
        if (!n)
            return NULL;
        if (is_op(cur(P), "(") && !parse_params(P, n))
            return NULL;
        struct jnode *call = parse_expression(P, true);
        if (!call)
            return NULL;
        if (call->kind != JN_CALL) {
            fail_at(P, line, "%s%s", "expected a call after 'call'", "");
            return NULL;
        }
        n->a = call;
        if (!expect_block_end(P) || !(n->c = parse_body(P, ends, "call", line)))
            return NULL;
        P->pos++;
        if (!expect_block_end(P))
            return NULL;
    } else if (is_name(t, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        n = node(P, JN_FILTERBLOCK, line);
        if (!n)
            return NULL;
        P->pos--; /* parse_filter expects to skip a '|' */
        n->b = parse_filter(P, NULL);
        while (n->b && is_op(cur(P), "|"))
            n->b = parse_filter(P, n->b);
        if (!n->b || !expect_block_end(P) || !(n->c = parse_body(P, ends, "filter", line)))
            return NULL;
        P->pos++;
        if (!expect_block_end(P))
            return NULL;
    } else if (is_name(t, "generation")) {
        /* transformers' AssistantTracker: outside assistant-mask tracking
         * the block renders its body unchanged. */
        static const char *const ends[] = {"endgeneration", NULL};
        if (!expect_block_end(P) || !(n = parse_body(P, ends, "generation", line)))
            return NULL;
        P->pos++;
        if (!expect_block_end(P))
            return NULL;
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        n = node(P, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, line);
        if (!n || !expect_block_end(P))
            return NULL;
    } else {
        char buf[80];
        snprintf(buf, sizeof(buf), "%.*s", (int)(t->len > 40 ? 40 : t->len), t->s);
        fail_at(P, line, "Encountered unknown tag '%s'.%s", buf, "");
        return NULL;
    }
    leave(P);
    return n;
}

/* Statements until a block whose name is in `ends` (left at that name,
 * after its '{%'), or the end of the template when ends is NULL. */
static struct jnode *parse_body(struct parser *P, const char *const *ends, const char *owner,
                                int owner_line)
{
    struct jnode *body = node(P, JN_BODY, cur(P)->line);
    struct nodes ns = {0};
    if (!body)
        return NULL;
    for (;;) {
        const struct jtoken *t = cur(P);
        if (t->kind == JT_EOF) {
            if (!ends)
                break;
            char what[200];
            size_t last = 0;
            while (ends[last + 1])
                last++;
            snprintf(what, sizeof(what),
                     "unexpected end of template, expected '%s' to close the '%s' opened on line %d",
                     ends[last], owner, owner_line);
            fail_at(P, t->line, "%s%s", what, "");
            return NULL;
        }
        if (t->kind == JT_TEXT) {
            struct jnode *x = node(P, JN_TEXT, t->line);
            struct jstr *s = jx_alloc(P->a, sizeof(struct jstr) + t->len + 1);
            if (!x || !s)
                return NULL;
            s->len = t->len;
            memcpy(s->s, t->s, t->len);
            x->val = (struct jv){.type = JV_STR, .s = s};
            if (!nodes_push(P, &ns, x))
                return NULL;
            P->pos++;
        } else if (t->kind == JT_VAR_BEGIN) {
            P->pos++;
            struct jnode *x = node(P, JN_OUTPUT, t->line);
            if (!x || !(x->a = parse_tuple(P, true)))
                return NULL;
            if (cur(P)->kind != JT_VAR_END) {
                expected(P, "end of print statement");
                return NULL;
            }
            P->pos++;
            if (!nodes_push(P, &ns, x))
                return NULL;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            const struct jtoken *nm = peek(P, 1);
            if (ends)
                for (size_t i = 0; ends[i]; i++)
                    if (is_name(nm, ends[i])) {
                        P->pos++;
                        goto done;
                    }
            if (nm->kind == JT_NAME &&
                (is_name(nm, "endif") || is_name(nm, "endfor") || is_name(nm, "endset") ||
                 is_name(nm, "endmacro") || is_name(nm, "endcall") || is_name(nm, "endfilter") ||
                 is_name(nm, "else") || is_name(nm, "elif") || is_name(nm, "endgeneration"))) {
                char buf[64];
                snprintf(buf, sizeof(buf), "%.*s", (int)nm->len, nm->s);
                fail_at(P, nm->line, "Encountered unknown tag '%s'.%s", buf,
                        ends ? "" : " (no block is open)");
                return NULL;
            }
            P->pos++;
            if (!nodes_push(P, &ns, parse_statement(P)))
                return NULL;
        } else {
            expected(P, "template data or a tag");
            return NULL;
        }
        if (P->st != HR_OK)
            return NULL;
    }
done:
    body->kids = ns.v;
    body->n = ns.n;
    return body;
}

enum hr_status hr_jinja_parse(const char *src, size_t len, const struct hr_jinja_limits *limits,
                              struct hr_jinja_template **out, struct hr_err *err)
{
    *out = NULL;
    struct hr_jinja_template *t = calloc(1, sizeof(*t));
    if (!t)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory parsing the template");
    if (limits)
        t->limits = *limits;
    if (!t->limits.max_depth)
        t->limits.max_depth = 100;
    struct parser P = {.a = &t->arena, .err = err, .max_depth = t->limits.max_depth};
    enum hr_status st = jx_lex(&t->arena, src, len, &P.t, &P.n, err);
    if (st == HR_OK) {
        t->root = parse_body(&P, NULL, NULL, 0);
        st = P.st;
        if (st == HR_OK && !t->root)
            st = hr_err_set(err, HR_ERR_NOMEM, "out of memory parsing the template");
    }
    if (st != HR_OK) {
        hr_jinja_template_free(t);
        return st;
    }
    t->syms = P.syms;
    t->n_syms = P.n_syms;
    *out = t;
    return HR_OK;
}

void hr_jinja_template_free(struct hr_jinja_template *t)
{
    if (!t)
        return;
    jx_arena_free(&t->arena);
    free(t);
}
