/*
 * mil_parse.c - the MIL text parser (see mil_parse.h): types, literal values
 * (numbers, tensors, strings, BLOBFILE references, tuples), arguments,
 * statements and functions into a mil_program, bounded in depth and size;
 * and the helpers that read a parsed program (dtype names and sizes, element
 * counts, the main function, arguments and attributes by name). The tokens
 * come from mil_lex.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mil_lex.h"
#include "rt_files.h"

#define MIL_MAX_DEPTH 64
/* Longer texts are refused before parsing: line and column numbers stay ints. */
#define MIL_MAX_TEXT (1ull << 30)

/* ---- types ------------------------------------------------------------- */

static const struct { const char *name; mil_dtype dt; } DTYPES[] = {
    {"fp16", MIL_DT_FP16}, {"fp32", MIL_DT_FP32}, {"fp64", MIL_DT_FP64}, {"bf16", MIL_DT_BF16},
    {"int4", MIL_DT_INT4}, {"int8", MIL_DT_INT8}, {"int16", MIL_DT_INT16}, {"int32", MIL_DT_INT32},
    {"int64", MIL_DT_INT64}, {"uint1", MIL_DT_UINT1}, {"uint2", MIL_DT_UINT2}, {"uint4", MIL_DT_UINT4},
    {"uint8", MIL_DT_UINT8}, {"uint16", MIL_DT_UINT16}, {"uint32", MIL_DT_UINT32}, {"uint64", MIL_DT_UINT64},
    {"bool", MIL_DT_BOOL}, {"string", MIL_DT_STRING}, {"uint3", MIL_DT_UINT3}, {"uint6", MIL_DT_UINT6},
};

static mil_dtype dtype_of_tok(parser *P, const tok *t)
{
    if (t->kind != T_IDENT)
        return MIL_DT_INVALID;
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (mil_tok_is(P, t, DTYPES[i].name))
            return DTYPES[i].dt;
    return MIL_DT_INVALID;
}

const char *mil_dtype_name(mil_dtype dt)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (DTYPES[i].dt == dt)
            return DTYPES[i].name;
    return "?";
}

size_t mil_dtype_size(mil_dtype dt)
{
    switch (dt) {
    case MIL_DT_FP16: return 2;
    case MIL_DT_FP32: return 4;
    case MIL_DT_INT32: case MIL_DT_UINT32: return 4;
    case MIL_DT_INT8: case MIL_DT_UINT8: case MIL_DT_BOOL: return 1;
    default: return 0;
    }
}

int mil_dtype_to_anec(mil_dtype dt)
{
    switch (dt) {
    case MIL_DT_FP16: return ANEC_DTYPE_FP16;
    case MIL_DT_FP32: return ANEC_DTYPE_FP32;
    case MIL_DT_UINT8: return ANEC_DTYPE_UINT8;
    case MIL_DT_INT8: return ANEC_DTYPE_INT8;
    case MIL_DT_INT32: return ANEC_DTYPE_INT32;
    case MIL_DT_BOOL: return ANEC_DTYPE_BOOL;
    default: return 0;
    }
}

uint64_t mil_type_numel(const mil_type *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        uint64_t d = t->shape[i] > 0 ? (uint64_t)t->shape[i] : 0;
        if (d && n > UINT64_MAX / d)
            return UINT64_MAX; /* saturates; parsed types hold at most MIL_MAX_NUMEL */
        n *= d;
    }
    return n;
}

const char *mil_type_str(const mil_type *t, char *buf, size_t len)
{
    if (t->kind == MIL_TY_DICT) {
        snprintf(buf, len, "dict");
        return buf;
    }
    if (t->kind == MIL_TY_SCALAR) {
        snprintf(buf, len, "%s", mil_dtype_name(t->dt));
        return buf;
    }
    int k = snprintf(buf, len, "tensor<%s, [", mil_dtype_name(t->dt));
    for (int i = 0; i < t->rank && k > 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (k > 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, "]>");
    return buf;
}

static int parse_number(parser *P, const tok *t, double *out)
{
    char buf[128];
    size_t n = t->end - t->start;
    if (t->kind == T_IDENT && (mil_tok_is(P, t, "inf") || mil_tok_is(P, t, "nan") || mil_tok_is(P, t, "infinity"))) {
        /* bare inf / nan */
    } else if (t->kind != T_NUMBER) {
        char b[64];
        mil_fail(P, t->line, t->col, "expected a number, found %s", mil_tok_desc(P, t, b, sizeof b));
        return -1;
    }
    if (n >= sizeof buf) {
        mil_fail(P, t->line, t->col, "number literal too long");
        return -1;
    }
    memcpy(buf, P->s + t->start, n);
    buf[n] = 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    if (end != buf + n || n == 0) {
        mil_fail(P, t->line, t->col, "malformed number '%s'", buf);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_type_after_dtype(parser *P, mil_type *ty);

/* type := tensor<dt, [dims]> | dt | dict<type, type> */
static int parse_type(parser *P, mil_type *ty)
{
    if (P->failed)
        return -1;
    memset(ty, 0, sizeof *ty);
    tok t = P->cur;
    if (mil_tok_is(P, &t, "tensor")) {
        mil_lex(P);
        if (mil_expect_punct(P, '<', "after 'tensor'"))
            return -1;
        mil_dtype dt = dtype_of_tok(P, &P->cur);
        if (dt == MIL_DT_INVALID) {
            char b[64];
            mil_fail(P, P->cur.line, P->cur.col, "unknown element type %s", mil_tok_desc(P, &P->cur, b, sizeof b));
            return -1;
        }
        mil_lex(P);
        ty->dt = dt;
        return parse_type_after_dtype(P, ty);
    }
    if (mil_tok_is(P, &t, "dict")) {
        if (++P->depth > MIL_MAX_DEPTH) {
            mil_fail(P, t.line, t.col, "types nested too deeply");
            return -1;
        }
        mil_lex(P);
        mil_type k, v;
        if (mil_expect_punct(P, '<', "after 'dict'") || parse_type(P, &k) || mil_expect_punct(P, ',', "in dict type") ||
            parse_type(P, &v) || mil_expect_punct(P, '>', "closing dict type"))
            return -1;
        P->depth--;
        ty->kind = MIL_TY_DICT;
        ty->dt = MIL_DT_INVALID;
        return 0;
    }
    mil_dtype dt = dtype_of_tok(P, &t);
    if (dt == MIL_DT_INVALID) {
        char b[64];
        mil_fail(P, t.line, t.col, "expected a type, found %s", mil_tok_desc(P, &t, b, sizeof b));
        return -1;
    }
    mil_lex(P);
    ty->kind = MIL_TY_SCALAR;
    ty->dt = dt;
    ty->rank = 0;
    return 0;
}

static int parse_type_after_dtype(parser *P, mil_type *ty)
{
    if (mil_expect_punct(P, ',', "after the tensor element type") || mil_expect_punct(P, '[', "opening the tensor shape"))
        return -1;
    int rank = 0;
    uint64_t numel = 1;
    if (!mil_is_punct(&P->cur, ']')) {
        for (;;) {
            tok t = P->cur;
            if (mil_is_punct(&t, '?')) {
                mil_fail(P, t.line, t.col, "dynamic dimension '?' is not supported (the ANE needs static shapes)");
                return -1;
            }
            double d;
            if (parse_number(P, &t, &d))
                return -1;
            if (d != floor(d) || d < 1 || d > 2147483647.0) {
                mil_fail(P, t.line, t.col, "tensor dimension must be a positive integer, got %.*s",
                     (int)(t.end - t.start), P->s + t.start);
                return -1;
            }
            if (rank >= ANEC_MAX_RANK) {
                mil_fail(P, t.line, t.col, "tensor rank above %d is not supported", ANEC_MAX_RANK);
                return -1;
            }
            ty->shape[rank++] = (int64_t)d;
            numel *= (uint64_t)d;
            if (numel > MIL_MAX_NUMEL) {
                mil_fail(P, t.line, t.col, "tensor has too many elements");
                return -1;
            }
            mil_lex(P);
            if (!mil_list_comma(P))
                break;
        }
    }
    if (mil_expect_punct(P, ']', "closing the tensor shape") || mil_expect_punct(P, '>', "closing the tensor type"))
        return -1;
    ty->rank = rank;
    ty->kind = rank == 0 ? MIL_TY_SCALAR : MIL_TY_TENSOR;
    return 0;
}

/* ---- values ------------------------------------------------------------ */

static int parse_value(parser *P, mil_value *v);

/* Numbers / bools of a literal body, flattened: 1, [1, 2], [[1], [2]], true */
static int parse_numbers(parser *P, double **buf, size_t *n, size_t *cap)
{
    if (P->failed)
        return -1;
    if (mil_is_punct(&P->cur, '[')) {
        if (++P->depth > MIL_MAX_DEPTH) {
            mil_fail(P, P->cur.line, P->cur.col, "literal nested too deeply");
            return -1;
        }
        mil_lex(P);
        if (!mil_is_punct(&P->cur, ']')) {
            for (;;) {
                if (parse_numbers(P, buf, n, cap))
                    return -1;
                if (!mil_list_comma(P))
                    break;
            }
        }
        P->depth--;
        return mil_expect_punct(P, ']', "closing the list literal");
    }
    double d;
    if (mil_tok_is(P, &P->cur, "true"))
        d = 1;
    else if (mil_tok_is(P, &P->cur, "false"))
        d = 0;
    else if (parse_number(P, &P->cur, &d))
        return -1;
    mil_lex(P);
    double *nb = mil_grow(P, *buf, *n, cap, sizeof(double));
    if (!nb)
        return -1;
    *buf = nb;
    nb[(*n)++] = d;
    return 0;
}

/* Skip a dict literal body {{"k", "v"}, ...} (only buildInfo uses dicts). */
static int skip_braces(parser *P)
{
    if (mil_expect_punct(P, '{', "opening the dict literal"))
        return -1;
    int depth = 1;
    while (depth > 0 && !P->failed) {
        if (P->cur.kind == T_EOF) {
            mil_fail(P, P->cur.line, P->cur.col, "unterminated dict literal");
            return -1;
        }
        if (mil_is_punct(&P->cur, '{'))
            depth++;
        else if (mil_is_punct(&P->cur, '}'))
            depth--;
        mil_lex(P);
    }
    return P->failed ? -1 : 0;
}

/* BLOBFILE(path = string("..."), offset = uint64(64)) after the '(' of the typed literal */
static int parse_blobfile(parser *P, mil_value *v)
{
    tok bt = P->cur;
    mil_lex(P);
    if (mil_expect_punct(P, '(', "after BLOBFILE"))
        return -1;
    int have_path = 0, have_off = 0;
    while (!P->failed && !mil_is_punct(&P->cur, ')')) {
        tok kt = P->cur;
        char *key = mil_expect_ident(P, "a BLOBFILE argument name");
        if (!key || mil_expect_punct(P, '=', "after the BLOBFILE argument name"))
            return -1;
        mil_value a;
        if (parse_value(P, &a))
            return -1;
        if (strcmp(key, "path") == 0) {
            if (a.kind != MIL_V_LIT || a.type.dt != MIL_DT_STRING || !a.str) {
                mil_fail(P, kt.line, kt.col, "BLOBFILE path must be a string literal");
                return -1;
            }
            v->blob_path = a.str;
            have_path = 1;
        } else if (strcmp(key, "offset") == 0) {
            /* 2^64 and above (and inf, nan) have no uint64: converting them is undefined */
            if (a.kind != MIL_V_LIT || a.n != 1 || a.type.dt == MIL_DT_STRING || !(a.num[0] >= 0) ||
                a.num[0] != floor(a.num[0]) || a.num[0] >= 18446744073709551616.0) {
                mil_fail(P, kt.line, kt.col, "BLOBFILE offset must be an integer literal in [0, 2^64)");
                return -1;
            }
            v->blob_offset = (uint64_t)a.num[0];
            have_off = 1;
        } else {
            mil_fail(P, kt.line, kt.col, "unknown BLOBFILE argument '%s' (expected path, offset)", key);
            return -1;
        }
        if (!mil_list_comma(P))
            break;
    }
    if (mil_expect_punct(P, ')', "closing BLOBFILE(...)"))
        return -1;
    if (!have_path || !have_off) {
        mil_fail(P, bt.line, bt.col, "BLOBFILE needs both path and offset");
        return -1;
    }
    v->kind = MIL_V_BLOB;
    return 0;
}

/* typed literal: TYPE '(' body ')' with the type already parsed */
static int parse_literal_body(parser *P, mil_value *v)
{
    if (mil_expect_punct(P, '(', "opening the literal"))
        return -1;
    if (v->type.kind == MIL_TY_DICT) {
        if (skip_braces(P))
            return -1;
        v->kind = MIL_V_DICT;
    } else if (mil_tok_is(P, &P->cur, "BLOBFILE")) {
        if (parse_blobfile(P, v))
            return -1;
    } else if (P->cur.kind == T_STRING) {
        if (v->type.dt != MIL_DT_STRING) {
            mil_fail(P, P->cur.line, P->cur.col, "string literal given for a %s value", mil_dtype_name(v->type.dt));
            return -1;
        }
        v->str = mil_tok_strdup(P, &P->cur);
        v->n = 1;
        v->kind = MIL_V_LIT;
        mil_lex(P);
    } else {
        if (v->type.dt == MIL_DT_STRING) {
            mil_fail(P, P->cur.line, P->cur.col, "expected a string literal");
            return -1;
        }
        size_t cap = 0;
        double *buf = NULL;
        size_t n = 0;
        if (parse_numbers(P, &buf, &n, &cap))
            return -1;
        v->num = buf;
        v->n = n;
        v->kind = MIL_V_LIT;
    }
    return mil_expect_punct(P, ')', "closing the literal");
}

static int parse_value(parser *P, mil_value *v)
{
    if (P->failed)
        return -1;
    memset(v, 0, sizeof *v);
    tok t = P->cur;
    v->line = t.line;
    v->col = t.col;
    if (++P->depth > MIL_MAX_DEPTH) {
        mil_fail(P, t.line, t.col, "value nested too deeply");
        return -1;
    }
    int rc = 0;
    if (mil_is_punct(&t, '(')) {
        /* tuple */
        mil_lex(P);
        size_t cap = 0, n = 0;
        mil_value *items = NULL;
        while (!P->failed && !mil_is_punct(&P->cur, ')')) {
            items = mil_grow(P, items, n, &cap, sizeof *items);
            if (!items || parse_value(P, &items[n]))
                return -1;
            n++;
            if (!mil_list_comma(P))
                break;
        }
        if (mil_expect_punct(P, ')', "closing the tuple"))
            return -1;
        v->kind = MIL_V_TUPLE;
        v->items = items;
        v->n = n;
    } else if (t.kind == T_IDENT) {
        tok nx = mil_peek2(P);
        int typed = (mil_tok_is(P, &t, "tensor") && mil_is_punct(&nx, '<')) || (mil_tok_is(P, &t, "dict") && mil_is_punct(&nx, '<')) ||
                    (dtype_of_tok(P, &t) != MIL_DT_INVALID && mil_is_punct(&nx, '('));
        if (typed) {
            if (parse_type(P, &v->type) || parse_literal_body(P, v))
                return -1;
        } else if (mil_tok_is(P, &t, "true") || mil_tok_is(P, &t, "false")) {
            mil_fail(P, t.line, t.col, "bare '%.*s' is not a MIL value; write bool(%.*s)", (int)(t.end - t.start),
                 P->s + t.start, (int)(t.end - t.start), P->s + t.start);
            return -1;
        } else {
            v->kind = MIL_V_REF;
            v->ref = mil_tok_strdup(P, &t);
            mil_lex(P);
        }
    } else {
        char b[64];
        mil_fail(P, t.line, t.col, "expected a value (a variable name, a typed literal or a tuple), found %s",
             mil_tok_desc(P, &t, b, sizeof b));
        return -1;
    }
    P->depth--;
    return P->failed ? -1 : rc;
}

/* ( name = value , ... ) or [ name = value, ... ] */
static int parse_args(parser *P, char close, mil_arg **out, size_t *nout)
{
    size_t cap = 0, n = 0;
    mil_arg *args = NULL;
    while (!P->failed && !mil_is_punct(&P->cur, close)) {
        args = mil_grow(P, args, n, &cap, sizeof *args);
        if (!args)
            return -1;
        mil_arg *a = &args[n];
        a->line = P->cur.line;
        a->col = P->cur.col;
        a->name = mil_expect_ident(P, "an argument name");
        if (!a->name || mil_expect_punct(P, '=', "after the argument name") || parse_value(P, &a->val))
            return -1;
        for (size_t i = 0; i < n; i++)
            if (strcmp(args[i].name, a->name) == 0) {
                mil_fail(P, a->line, a->col, "argument '%s' given twice", a->name);
                return -1;
            }
        n++;
        if (!mil_list_comma(P))
            break;
    }
    char what[32];
    snprintf(what, sizeof what, "closing the argument list");
    if (mil_expect_punct(P, close, what))
        return -1;
    *out = args;
    *nout = n;
    return 0;
}

static int parse_result(parser *P, mil_result *r)
{
    r->line = P->cur.line;
    r->col = P->cur.col;
    if (parse_type(P, &r->type))
        return -1;
    if (r->type.kind == MIL_TY_DICT) {
        mil_fail(P, r->line, r->col, "dict-typed values are not supported");
        return -1;
    }
    r->line = P->cur.line;
    r->col = P->cur.col;
    r->name = mil_expect_ident(P, "a variable name after its type");
    return r->name ? 0 : -1;
}

static int parse_stmt(parser *P, mil_stmt *st)
{
    size_t cap = 0, n = 0;
    mil_result *res = NULL;
    int paren = 0;
    if (mil_is_punct(&P->cur, '(')) {
        paren = 1;
        mil_lex(P);
    }
    for (;;) {
        res = mil_grow(P, res, n, &cap, sizeof *res);
        if (!res || parse_result(P, &res[n]))
            return -1;
        n++;
        if (!mil_list_comma(P))
            break;
    }
    if (paren && mil_expect_punct(P, ')', "closing the result list"))
        return -1;
    if (mil_expect_punct(P, '=', "after the result declaration"))
        return -1;
    st->line = P->cur.line;
    st->col = P->cur.col;
    st->op = mil_expect_ident(P, "an op name");
    if (!st->op || mil_expect_punct(P, '(', "after the op name") || parse_args(P, ')', &st->args, &st->n_args))
        return -1;
    if (mil_is_punct(&P->cur, '[')) {
        mil_lex(P);
        if (parse_args(P, ']', &st->attrs, &st->n_attrs))
            return -1;
    }
    if (mil_expect_punct(P, ';', "at the end of the statement"))
        return -1;
    st->results = res;
    st->n_results = n;
    return 0;
}

static int parse_func(parser *P, mil_func *f)
{
    f->line = P->cur.line;
    mil_lex(P); /* 'func' */
    f->name = mil_expect_ident(P, "a function name");
    if (!f->name)
        return -1;
    if (mil_is_punct(&P->cur, '<')) {
        mil_lex(P);
        f->opset = mil_expect_ident(P, "an opset name (ios18)");
        if (!f->opset || mil_expect_punct(P, '>', "closing the opset"))
            return -1;
    }
    if (mil_expect_punct(P, '(', "opening the parameter list"))
        return -1;
    size_t cap = 0, n = 0;
    while (!P->failed && !mil_is_punct(&P->cur, ')')) {
        f->inputs = mil_grow(P, f->inputs, n, &cap, sizeof *f->inputs);
        if (!f->inputs || parse_result(P, &f->inputs[n]))
            return -1;
        n++;
        if (!mil_list_comma(P))
            break;
    }
    f->n_inputs = n;
    if (mil_expect_punct(P, ')', "closing the parameter list") || mil_expect_punct(P, '{', "opening the function body"))
        return -1;
    cap = 0;
    n = 0;
    while (!P->failed && !mil_is_punct(&P->cur, '}')) {
        if (P->cur.kind == T_EOF) {
            mil_fail(P, P->cur.line, P->cur.col, "unexpected end of input inside function '%s'", f->name);
            return -1;
        }
        f->stmts = mil_grow(P, f->stmts, n, &cap, sizeof *f->stmts);
        if (!f->stmts || parse_stmt(P, &f->stmts[n]))
            return -1;
        n++;
    }
    f->n_stmts = n;
    if (mil_expect_punct(P, '}', "closing the function body"))
        return -1;
    if (P->cur.kind != T_ARROW) {
        char b[64];
        mil_fail(P, P->cur.line, P->cur.col, "expected '-> (outputs);' after the function body, found %s",
             mil_tok_desc(P, &P->cur, b, sizeof b));
        return -1;
    }
    mil_lex(P);
    if (mil_expect_punct(P, '(', "opening the return list"))
        return -1;
    cap = 0;
    n = 0;
    size_t cap2 = 0, cap3 = 0;
    while (!P->failed && !mil_is_punct(&P->cur, ')')) {
        f->returns = mil_grow(P, f->returns, n, &cap, sizeof *f->returns);
        f->return_lines = mil_grow(P, f->return_lines, n, &cap2, sizeof *f->return_lines);
        f->return_cols = mil_grow(P, f->return_cols, n, &cap3, sizeof *f->return_cols);
        if (!f->returns || !f->return_lines || !f->return_cols)
            return -1;
        f->return_lines[n] = P->cur.line;
        f->return_cols[n] = P->cur.col;
        f->returns[n] = mil_expect_ident(P, "a returned variable name");
        if (!f->returns[n])
            return -1;
        n++;
        if (!mil_list_comma(P))
            break;
    }
    f->n_returns = n;
    if (mil_expect_punct(P, ')', "closing the return list"))
        return -1;
    if (mil_is_punct(&P->cur, ';'))
        mil_lex(P);
    return P->failed ? -1 : 0;
}

mil_program *mil_parse(const char *text, size_t len, char *err, size_t errlen)
{
    parser P;
    memset(&P, 0, sizeof P);
    P.s = text ? text : "";
    P.n = text ? len : 0;
    P.line = 1;
    P.err = err;
    P.errlen = errlen;
    if (errlen)
        err[0] = 0;
    if (P.n > MIL_MAX_TEXT) {
        snprintf(err, errlen, "model.mil: %zu bytes of MIL text, above the limit of %llu", P.n,
                 (unsigned long long)MIL_MAX_TEXT);
        return NULL;
    }
    /* skip a UTF-8 byte order mark */
    if (P.n >= 3 && (unsigned char)P.s[0] == 0xEF && (unsigned char)P.s[1] == 0xBB && (unsigned char)P.s[2] == 0xBF)
        P.pos = P.line_start = 3;
    mil_program *prog = mil_arena_alloc(&P.arena, sizeof *prog);
    if (!prog) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    mil_lex(&P);
    if (!mil_tok_is(&P, &P.cur, "program")) {
        char b[64];
        mil_fail(&P, P.cur.line, P.cur.col, "expected 'program(<version>)', found %s", mil_tok_desc(&P, &P.cur, b, sizeof b));
        goto bad;
    }
    mil_lex(&P);
    if (mil_expect_punct(&P, '(', "after 'program'"))
        goto bad;
    if (P.cur.kind != T_NUMBER) {
        char b[64];
        mil_fail(&P, P.cur.line, P.cur.col, "expected a program version number, found %s", mil_tok_desc(&P, &P.cur, b, sizeof b));
        goto bad;
    }
    prog->version = mil_tok_strdup(&P, &P.cur);
    mil_lex(&P);
    if (mil_expect_punct(&P, ')', "after the program version"))
        goto bad;
    if (mil_is_punct(&P.cur, '[')) {
        mil_lex(&P);
        mil_arg *attrs;
        size_t nattrs;
        if (parse_args(&P, ']', &attrs, &nattrs))
            goto bad;
    }
    if (mil_expect_punct(&P, '{', "opening the program body"))
        goto bad;
    size_t cap = 0, n = 0;
    while (!P.failed && !mil_is_punct(&P.cur, '}')) {
        if (!mil_tok_is(&P, &P.cur, "func")) {
            char b[64];
            mil_fail(&P, P.cur.line, P.cur.col, "expected 'func' or '}', found %s", mil_tok_desc(&P, &P.cur, b, sizeof b));
            goto bad;
        }
        prog->funcs = mil_grow(&P, prog->funcs, n, &cap, sizeof *prog->funcs);
        if (!prog->funcs || parse_func(&P, &prog->funcs[n]))
            goto bad;
        n++;
    }
    prog->n_funcs = n;
    if (mil_expect_punct(&P, '}', "closing the program"))
        goto bad;
    if (P.cur.kind != T_EOF) {
        char b[64];
        mil_fail(&P, P.cur.line, P.cur.col, "unexpected %s after the end of the program", mil_tok_desc(&P, &P.cur, b, sizeof b));
        goto bad;
    }
    if (P.failed)
        goto bad;
    if (n == 0) {
        mil_fail(&P, P.cur.line, P.cur.col, "the program has no function");
        goto bad;
    }
    prog->arena = P.arena;
    return prog;
bad:
    if (!P.failed)
        snprintf(err, errlen, "model.mil: parse error");
    mil_arena_free(P.arena);
    return NULL;
}

void mil_free(mil_program *p)
{
    if (p)
        mil_arena_free(p->arena);
}

const mil_func *mil_main_func(const mil_program *p, char *err, size_t errlen)
{
    for (size_t i = 0; i < p->n_funcs; i++)
        if (strcmp(p->funcs[i].name, "main") == 0)
            return &p->funcs[i];
    if (p->n_funcs == 1)
        return &p->funcs[0];
    snprintf(err, errlen, "model.mil:%d:1: the program has %zu functions and none is named 'main'",
             p->funcs[0].line, p->n_funcs);
    return NULL;
}

const mil_arg *mil_find_arg(const mil_stmt *s, const char *name)
{
    for (size_t i = 0; i < s->n_args; i++)
        if (strcmp(s->args[i].name, name) == 0)
            return &s->args[i];
    return NULL;
}

const mil_arg *mil_find_attr(const mil_stmt *s, const char *name)
{
    for (size_t i = 0; i < s->n_attrs; i++)
        if (strcmp(s->attrs[i].name, name) == 0)
            return &s->attrs[i];
    return NULL;
}
