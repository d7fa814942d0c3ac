/* sim_plan.c - the sim's MIL compiler: checks, type inference, plan (see sim_plan.h). */
#define _POSIX_C_SOURCE 200809L
#include "sim_plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "rt_files.h"
#include "rt_util.h"

typedef struct builder {
    sim_plan *p;
    size_t cap_vals, cap_ops;
    anec_limits lim;
    const mil_func *f;
    char *err;
    size_t errlen;
    int status;
    int failed;
    /* name -> value index, open addressing */
    int *htab;
    size_t hcap;
    int scalar_operand_line;     /* first elementwise op taking a rank-0 const, 0 if none */
} builder;

static void berr(builder *B, int line, const char *constraint, const char *fmt, ...)
{
    if (B->failed)
        return;
    B->failed = 1;
    if (B->status == ANEC_OK)
        B->status = ANEC_ECOMPILE;
    int k = constraint ? snprintf(B->err, B->errlen, "model.mil:%d: [%s] ", line, constraint)
                       : snprintf(B->err, B->errlen, "model.mil:%d: ", line);
    if (k < 0 || (size_t)k >= B->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(B->err + k, B->errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

static void oom(builder *B)
{
    if (!B->failed) {
        B->failed = 1;
        B->status = ANEC_ENOMEM;
        snprintf(B->err, B->errlen, "out of memory while compiling MIL");
    }
}

/* ---- symbol table ----------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int lookup(builder *B, const char *name)
{
    if (!B->hcap)
        return -1;
    size_t i = hash_str(name) & (B->hcap - 1);
    while (B->htab[i] >= 0) {
        if (strcmp(B->p->vals[B->htab[i]].name, name) == 0)
            return B->htab[i];
        i = (i + 1) & (B->hcap - 1);
    }
    return -1;
}

static int hinsert(builder *B, int idx)
{
    if ((B->p->n_vals + 1) * 2 > B->hcap) {
        size_t nc = B->hcap ? B->hcap * 2 : 64;
        int *nt = malloc(nc * sizeof *nt);
        if (!nt)
            return -1;
        for (size_t i = 0; i < nc; i++)
            nt[i] = -1;
        for (size_t i = 0; i < B->hcap; i++)
            if (B->htab[i] >= 0) {
                size_t j = hash_str(B->p->vals[B->htab[i]].name) & (nc - 1);
                while (nt[j] >= 0)
                    j = (j + 1) & (nc - 1);
                nt[j] = B->htab[i];
            }
        free(B->htab);
        B->htab = nt;
        B->hcap = nc;
    }
    size_t j = hash_str(B->p->vals[idx].name) & (B->hcap - 1);
    while (B->htab[j] >= 0)
        j = (j + 1) & (B->hcap - 1);
    B->htab[j] = idx;
    return 0;
}

/* New value; names must be unique in the function. */
static int add_value(builder *B, const char *name, int kind, mil_dtype dt, int rank, const int64_t *shape, int line, int named)
{
    if (named) {
        int prev = lookup(B, name);
        if (prev >= 0) {
            berr(B, line, NULL, "'%s' is defined twice (first at line %d)", name, B->p->vals[prev].line);
            return -1;
        }
    }
    if (B->p->n_vals == B->cap_vals) {
        size_t nc = B->cap_vals ? B->cap_vals * 2 : 64;
        sim_value *nv = realloc(B->p->vals, nc * sizeof *nv);
        if (!nv) {
            oom(B);
            return -1;
        }
        B->p->vals = nv;
        B->cap_vals = nc;
    }
    sim_value *v = &B->p->vals[B->p->n_vals];
    memset(v, 0, sizeof *v);
    v->name = rt_strdup(name);
    if (!v->name) {
        oom(B);
        return -1;
    }
    v->kind = kind;
    v->dt = dt;
    v->rank = rank;
    v->numel = 1;
    v->line = line;
    int idx = (int)B->p->n_vals++;
    int big = rank < 0 || rank > ANEC_MAX_RANK;
    for (int i = 0; i < rank && !big; i++) {
        v->shape[i] = shape[i];
        big = shape[i] < 0 || rt_mul_size(v->numel, (size_t)shape[i], &v->numel);
    }
    /* every value the sim plans is bounded like a parsed type: sizes never overflow later */
    if (big || v->numel > MIL_MAX_NUMEL || rt_mul_size(v->numel, mil_dtype_size(dt), &v->bytes)) {
        berr(B, line, NULL, "'%s' would have more than 2^34 elements, which the sim does not support", name);
        return -1;
    }
    if (named && hinsert(B, idx)) {
        oom(B);
        return -1;
    }
    return idx;
}

static sim_op *add_op(builder *B, int kind, int line)
{
    if (B->p->n_ops == B->cap_ops) {
        size_t nc = B->cap_ops ? B->cap_ops * 2 : 32;
        sim_op *no = realloc(B->p->ops, nc * sizeof *no);
        if (!no) {
            oom(B);
            return NULL;
        }
        B->p->ops = no;
        B->cap_ops = nc;
    }
    sim_op *o = &B->p->ops[B->p->n_ops++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->line = line;
    o->x = o->y = -1;
    return o;
}

static const char *shape_str(int rank, const int64_t *shape, char *buf, size_t len)
{
    int k = snprintf(buf, len, "[");
    for (int i = 0; i < rank && k > 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k > 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, "]");
    return buf;
}

static const char *vtype_str(mil_dtype dt, int rank, const int64_t *shape, char *buf, size_t len)
{
    mil_type t;
    memset(&t, 0, sizeof t);
    t.kind = rank ? MIL_TY_TENSOR : MIL_TY_SCALAR;
    t.dt = dt;
    t.rank = rank;
    for (int i = 0; i < rank; i++)
        t.shape[i] = shape[i];
    return mil_type_str(&t, buf, len);
}

static int is_float(mil_dtype dt) { return dt == MIL_DT_FP16 || dt == MIL_DT_FP32; }

/* ---- constants ----------------------------------------------------------------- */

/* Fill v->cdata from numbers in the storage format of v->dt. */
static int store_numbers(builder *B, sim_value *v, const double *num, size_t n, int line)
{
    size_t es = mil_dtype_size(v->dt);
    if (!es) {
        berr(B, line, NULL, "const '%s': element type %s is not supported by the ANE", v->name, mil_dtype_name(v->dt));
        return -1;
    }
    v->cdata = calloc(n ? n : 1, es);
    v->cnum = malloc((n ? n : 1) * sizeof(double));
    if (!v->cdata || !v->cnum) {
        oom(B);
        return -1;
    }
    memcpy(v->cnum, num, n * sizeof(double));
    v->cn = n;
    for (size_t i = 0; i < n; i++) {
        double d = num[i];
        switch (v->dt) {
        case MIL_DT_FP16: ((uint16_t *)v->cdata)[i] = anec_h_from_f((float)d); break;
        case MIL_DT_FP32: ((float *)v->cdata)[i] = (float)d; break;
        case MIL_DT_INT32:
            if (d != floor(d) || d < -2147483648.0 || d > 2147483647.0) {
                berr(B, line, NULL, "const '%s': %g is not an int32", v->name, d);
                return -1;
            }
            ((int32_t *)v->cdata)[i] = (int32_t)d;
            break;
        case MIL_DT_INT8:
            if (d != floor(d) || d < -128 || d > 127) {
                berr(B, line, NULL, "const '%s': %g is not an int8", v->name, d);
                return -1;
            }
            ((int8_t *)v->cdata)[i] = (int8_t)d;
            break;
        case MIL_DT_UINT8:
            if (d != floor(d) || d < 0 || d > 255) {
                berr(B, line, NULL, "const '%s': %g is not a uint8", v->name, d);
                return -1;
            }
            ((uint8_t *)v->cdata)[i] = (uint8_t)d;
            break;
        case MIL_DT_BOOL: ((uint8_t *)v->cdata)[i] = d != 0; break;
        default: break;
        }
    }
    return 0;
}

static int types_equal(const mil_type *a, const mil_type *b)
{
    if (a->dt != b->dt || a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

/* A literal used directly (`val = ...` or an inline argument) becomes a const value. */
static int literal_value(builder *B, const char *name, const mil_type *decl, const mil_value *lit, int line, int named)
{
    char b1[96], b2[96];
    if (lit->kind == MIL_V_BLOB) {
        if (!types_equal(decl, &lit->type)) {
            berr(B, line, NULL, "const '%s' is declared %s but its BLOBFILE value is %s", name,
                 mil_type_str(decl, b1, sizeof b1), mil_type_str(&lit->type, b2, sizeof b2));
            return -1;
        }
        mil_dtype dt = lit->type.dt;
        if (dt != MIL_DT_FP16 && dt != MIL_DT_FP32 && dt != MIL_DT_UINT8 && dt != MIL_DT_INT8) {
            berr(B, line, NULL, "const '%s': BLOBFILE element type %s is not supported (fp16, fp32, uint8, int8)",
                 name, mil_dtype_name(dt));
            return -1;
        }
        if (strncmp(lit->blob_path, "@model_path/", 12) != 0 || !lit->blob_path[12]) {
            berr(B, line, NULL, "const '%s': BLOBFILE path \"%s\" must start with @model_path/", name, lit->blob_path);
            return -1;
        }
        int idx = add_value(B, name, SV_BLOB, dt, decl->rank, decl->shape, line, named);
        if (idx < 0)
            return -1;
        sim_value *v = &B->p->vals[idx];
        v->blob_path = rt_strdup(lit->blob_path);
        if (!v->blob_path) {
            oom(B);
            return -1;
        }
        v->blob_offset = lit->blob_offset;
        B->p->n_blobs++;
        return idx;
    }
    if (lit->kind != MIL_V_LIT) {
        berr(B, line, NULL, "const '%s' needs a literal or BLOBFILE value", name);
        return -1;
    }
    if (decl && !types_equal(decl, &lit->type)) {
        berr(B, line, NULL, "const '%s' is declared %s but its value is %s", name, mil_type_str(decl, b1, sizeof b1),
             mil_type_str(&lit->type, b2, sizeof b2));
        return -1;
    }
    const mil_type *t = &lit->type;
    int idx = add_value(B, name, SV_CONST, t->dt, t->rank, t->shape, line, named);
    if (idx < 0)
        return -1;
    sim_value *v = &B->p->vals[idx];
    if (t->dt == MIL_DT_STRING) {
        if (t->rank != 0 || !lit->str) {
            berr(B, line, NULL, "const '%s': only scalar strings are supported", name);
            return -1;
        }
        v->cstr = rt_strdup(lit->str);
        if (!v->cstr) {
            oom(B);
            return -1;
        }
        return idx;
    }
    uint64_t numel = mil_type_numel(t);
    if (lit->n != numel) {
        berr(B, line, NULL, "const '%s': %s literal has %zu elements, expected %llu", name,
             mil_type_str(t, b1, sizeof b1), lit->n, (unsigned long long)numel);
        return -1;
    }
    if (store_numbers(B, v, lit->num, lit->n, line))
        return -1;
    return idx;
}

/* ---- statement arguments ------------------------------------------------------------ */

typedef struct param {
    int present;
    int inline_lit;              /* written inline rather than as a named const */
    const double *num;
    size_t n;
    const char *str;
    mil_dtype dt;
    int rank;
    int line;
} param;

static int get_param(builder *B, const mil_stmt *st, const char *name, param *pv)
{
    memset(pv, 0, sizeof *pv);
    const mil_arg *a = mil_find_arg(st, name);
    if (!a)
        return 0;
    pv->present = 1;
    pv->line = a->line;
    if (a->val.kind == MIL_V_LIT) {
        pv->inline_lit = 1;
        pv->num = a->val.num;
        pv->n = a->val.n;
        pv->str = a->val.str;
        pv->dt = a->val.type.dt;
        pv->rank = a->val.type.rank;
        return 0;
    }
    if (a->val.kind == MIL_V_REF) {
        int idx = lookup(B, a->val.ref);
        if (idx < 0) {
            berr(B, a->line, NULL, "%s: argument %s = %s refers to an undefined name", st->op, name, a->val.ref);
            return -1;
        }
        sim_value *v = &B->p->vals[idx];
        if (v->kind != SV_CONST) {
            berr(B, a->line, NULL, "%s: parameter '%s' must be a const, but '%s' is computed at run time", st->op,
                 name, a->val.ref);
            return -1;
        }
        pv->num = v->cnum;
        pv->n = v->cn;
        pv->str = v->cstr;
        pv->dt = v->dt;
        pv->rank = v->rank;
        return 0;
    }
    berr(B, a->line, NULL, "%s: parameter '%s' must be a const or a literal", st->op, name);
    return -1;
}

/* A parameter the op cannot do without: like get_param, but absence is an error. */
static int get_required_param(builder *B, const mil_stmt *st, const char *name, param *pv)
{
    if (get_param(B, st, name, pv))
        return -1;
    if (!pv->present) {
        berr(B, st->line, NULL, "%s: missing required argument '%s'", st->op, name);
        return -1;
    }
    return 0;
}

static int param_ints(builder *B, const mil_stmt *st, const char *name, const param *pv, int64_t *out, size_t maxn, size_t *n)
{
    if (pv->str || (pv->dt != MIL_DT_INT32 && pv->dt != MIL_DT_INT64 && pv->dt != MIL_DT_INT16 &&
                    pv->dt != MIL_DT_INT8 && pv->dt != MIL_DT_UINT8 && pv->dt != MIL_DT_UINT16 && pv->dt != MIL_DT_UINT32)) {
        berr(B, pv->line, NULL, "%s: parameter '%s' must be integers, got %s", st->op, name, mil_dtype_name(pv->dt));
        return -1;
    }
    if (pv->n > maxn) {
        berr(B, pv->line, NULL, "%s: parameter '%s' has %zu values, at most %zu allowed", st->op, name, pv->n, maxn);
        return -1;
    }
    for (size_t i = 0; i < pv->n; i++) {
        if (pv->num[i] != floor(pv->num[i]) || fabs(pv->num[i]) > 2147483647.0) {
            berr(B, pv->line, NULL, "%s: parameter '%s' value %g is not an integer", st->op, name, pv->num[i]);
            return -1;
        }
        out[i] = (int64_t)pv->num[i];
    }
    *n = pv->n;
    return 0;
}

/* A required parameter holding up to maxn integers. */
static int required_ints(builder *B, const mil_stmt *st, const char *name, param *pv, int64_t *out, size_t maxn, size_t *n)
{
    return get_required_param(B, st, name, pv) || param_ints(B, st, name, pv, out, maxn, n) ? -1 : 0;
}

static int param_int(builder *B, const mil_stmt *st, const char *name, const param *pv, int64_t *out)
{
    size_t n;
    int64_t v[1];
    if (param_ints(B, st, name, pv, v, 1, &n))
        return -1;
    if (n != 1 || pv->rank != 0) {
        berr(B, pv->line, NULL, "%s: parameter '%s' must be a scalar integer", st->op, name);
        return -1;
    }
    *out = v[0];
    return 0;
}

static int param_bool(builder *B, const mil_stmt *st, const char *name, const param *pv, int *out)
{
    if (pv->dt != MIL_DT_BOOL || pv->n != 1 || pv->rank != 0) {
        berr(B, pv->line, NULL, "%s: parameter '%s' must be a bool scalar", st->op, name);
        return -1;
    }
    *out = pv->num[0] != 0;
    return 0;
}

static int param_bools(builder *B, const mil_stmt *st, const char *name, const param *pv, int rank, int *mask)
{
    if (pv->dt != MIL_DT_BOOL || (int)pv->n != rank) {
        berr(B, pv->line, NULL, "%s: parameter '%s' must be %d bools", st->op, name, rank);
        return -1;
    }
    *mask = 0;
    for (int i = 0; i < rank; i++)
        if (pv->num[i] != 0)
            *mask |= 1 << i;
    return 0;
}

static const char *param_str(builder *B, const mil_stmt *st, const char *name, const param *pv)
{
    if (!pv->str) {
        berr(B, pv->line, NULL, "%s: parameter '%s' must be a string", st->op, name);
        return NULL;
    }
    return pv->str;
}

/* A data operand: a named tensor, or an inline literal turned into a const. */
static int get_data(builder *B, const mil_stmt *st, const char *name, int required)
{
    const mil_arg *a = mil_find_arg(st, name);
    if (!a) {
        if (required)
            berr(B, st->line, NULL, "%s: missing required argument '%s'", st->op, name);
        return required ? -2 : -1;
    }
    if (a->val.kind == MIL_V_REF) {
        int idx = lookup(B, a->val.ref);
        if (idx < 0) {
            berr(B, a->line, NULL, "%s: argument %s = %s refers to an undefined name", st->op, name, a->val.ref);
            return -2;
        }
        if (B->p->vals[idx].dt == MIL_DT_STRING) {
            berr(B, a->line, NULL, "%s: argument '%s' must be a tensor, '%s' is a string", st->op, name, a->val.ref);
            return -2;
        }
        return idx;
    }
    if (a->val.kind == MIL_V_LIT || a->val.kind == MIL_V_BLOB) {
        char nm[160];
        const char *res = st->n_results ? st->results[0].name : st->op;
        snprintf(nm, sizeof nm, "%s.%s", res, name);
        int idx = literal_value(B, nm, &a->val.type, &a->val, a->line, 0);
        if (idx >= 0 && B->p->vals[idx].dt == MIL_DT_STRING) {
            berr(B, a->line, NULL, "%s: argument '%s' must be a tensor", st->op, name);
            return -2;
        }
        return idx < 0 ? -2 : idx;
    }
    berr(B, a->line, NULL, "%s: argument '%s' must be a variable or a literal, not a tuple", st->op, name);
    return -2;
}

/* Unknown argument names are errors (like coremltools' "Unrecognized input"). */
static int check_args(builder *B, const mil_stmt *st, const char *const *allowed)
{
    for (size_t i = 0; i < st->n_args; i++) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, st->args[i].name) == 0)
                ok = 1;
        if (!ok) {
            char list[256] = "";
            for (const char *const *a = allowed; *a; a++) {
                strncat(list, *a, sizeof list - strlen(list) - 1);
                if (a[1])
                    strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            berr(B, st->args[i].line, NULL, "%s has no argument '%s' (arguments: %s)", st->op, st->args[i].name, list);
            return -1;
        }
    }
    return 0;
}

/* Compare the declared type of result k with the inferred one and create the value. */
static int result_value(builder *B, const mil_stmt *st, size_t k, mil_dtype dt, int rank, const int64_t *shape)
{
    const mil_result *r = &st->results[k];
    int ok = r->type.dt == dt && r->type.rank == rank;
    for (int i = 0; ok && i < rank; i++)
        ok = r->type.shape[i] == shape[i];
    if (!ok) {
        char b1[128], b2[128];
        berr(B, r->line, NULL, "%s: '%s' is declared %s but the op produces %s", st->op, r->name,
             mil_type_str(&r->type, b1, sizeof b1), vtype_str(dt, rank, shape, b2, sizeof b2));
        return -1;
    }
    return add_value(B, r->name, SV_OP, dt, rank, shape, r->line, 1);
}

static int need_results(builder *B, const mil_stmt *st, size_t n)
{
    if (st->n_results != n) {
        berr(B, st->line, NULL, "%s produces %zu result%s, but %zu are declared", st->op, n, n == 1 ? "" : "s", st->n_results);
        return -1;
    }
    return 0;
}

static int norm_axis(builder *B, const mil_stmt *st, int64_t axis, int rank, int line, int *out)
{
    if (axis < -rank || axis >= rank) {
        berr(B, line, NULL, "%s: axis %lld is out of range for rank %d", st->op, (long long)axis, rank);
        return -1;
    }
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}

static int broadcast(builder *B, const mil_stmt *st, const sim_value *x, const sim_value *y, int *rank, int64_t *shape)
{
    int r = x->rank > y->rank ? x->rank : y->rank;
    for (int i = 0; i < r; i++) {
        int ix = i - (r - x->rank), iy = i - (r - y->rank);
        int64_t a = ix >= 0 ? x->shape[ix] : 1, b = iy >= 0 ? y->shape[iy] : 1;
        if (a != b && a != 1 && b != 1) {
            char b1[96], b2[96];
            berr(B, st->line, NULL, "%s: shapes %s and %s do not broadcast", st->op, shape_str(x->rank, x->shape, b1, sizeof b1),
                 shape_str(y->rank, y->shape, b2, sizeof b2));
            return -1;
        }
        shape[i] = a > b ? a : b;
    }
    *rank = r;
    return 0;
}

static int need_float(builder *B, const mil_stmt *st, const sim_value *v, const char *arg)
{
    if (!is_float(v->dt)) {
        berr(B, st->line, NULL, "%s: argument '%s' must be fp16 or fp32, '%s' is %s", st->op, arg, v->name, mil_dtype_name(v->dt));
        return -1;
    }
    return 0;
}

/* ---- ops ------------------------------------------------------------------------------- */

static const char *const A_X[] = {"x", NULL};

/* The start every single-result op shares: only known arguments, exactly one
   declared result, and the required data operand x. Returns x's value index,
   or a negative number after reporting the error. */
static int op_start(builder *B, const mil_stmt *st, const char *const *args)
{
    if (check_args(B, st, args) || need_results(B, st, 1))
        return -1;
    return get_data(B, st, "x", 1);
}

/* Result 0, checked against its declaration, and the single-result op that produces it from x. */
static sim_op *op_out(builder *B, const mil_stmt *st, int kind, int x, mil_dtype dt, int rank, const int64_t *shape)
{
    int r = result_value(B, st, 0, dt, rank, shape);
    if (r < 0)
        return NULL;
    sim_op *o = add_op(B, kind, st->line);
    if (!o)
        return NULL;
    o->x = x;
    o->outs = malloc(sizeof(int));
    if (!o->outs) {
        oom(B);
        return NULL;
    }
    o->outs[0] = r;
    o->n_outs = 1;
    return o;
}

static int op_unary(builder *B, const mil_stmt *st, int kind)
{
    int x = op_start(B, st, A_X);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    if (kind != SOP_IDENTITY && need_float(B, st, xv, "x"))
        return -1;
    return op_out(B, st, kind, x, xv->dt, xv->rank, xv->shape) ? 0 : -1;
}

static int is_scalar_const(const sim_value *v) { return v->kind == SV_CONST && v->rank == 0; }

static int op_binary(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "y", NULL};
    int x = op_start(B, st, args);
    int y = x < 0 ? -1 : get_data(B, st, "y", 1);
    if (x < 0 || y < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], yv_ = B->p->vals[y], *xv = &xv_, *yv = &yv_;
    if (need_float(B, st, xv, "x") || need_float(B, st, yv, "y"))
        return -1;
    if (xv->dt != yv->dt) {
        berr(B, st->line, NULL, "%s: x and y must have the same element type, got %s and %s", st->op,
             mil_dtype_name(xv->dt), mil_dtype_name(yv->dt));
        return -1;
    }
    if ((is_scalar_const(xv) || is_scalar_const(yv)) && !B->scalar_operand_line)
        B->scalar_operand_line = st->line;
    int rank;
    int64_t shape[ANEC_MAX_RANK];
    if (broadcast(B, st, xv, yv, &rank, shape))
        return -1;
    mil_dtype dt = xv->dt;
    sim_op *o = op_out(B, st, kind, x, dt, rank, shape);
    if (!o)
        return -1;
    o->y = y;
    return 0;
}

static int op_cast(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"x", "dtype", NULL};
    int x = op_start(B, st, args);
    if (x < 0)
        return -1;
    param pd;
    if (get_required_param(B, st, "dtype", &pd))
        return -1;
    const char *s = param_str(B, st, "dtype", &pd);
    if (!s)
        return -1;
    mil_dtype dt = MIL_DT_INVALID;
    static const struct { const char *n; mil_dtype d; } T[] = {
        {"fp16", MIL_DT_FP16}, {"fp32", MIL_DT_FP32}, {"int32", MIL_DT_INT32}, {"bool", MIL_DT_BOOL},
        {"int8", MIL_DT_INT8}, {"uint8", MIL_DT_UINT8}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (strcmp(T[i].n, s) == 0)
            dt = T[i].d;
    if (dt == MIL_DT_INVALID) {
        berr(B, pd.line, NULL, "cast: unsupported dtype \"%s\" (fp16, fp32, int32, bool, int8, uint8)", s);
        return -1;
    }
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    return op_out(B, st, SOP_CAST, x, dt, xv->rank, xv->shape) ? 0 : -1;
}

static int op_conv(builder *B, const mil_stmt *st)
{
    if (mil_find_arg(st, "bias")) {
        berr(B, mil_find_arg(st, "bias")->line, "ANE-CONV-BIAS",
             "conv with bias= is rejected by the ANE compiler; add the bias with a separate add op");
        return -1;
    }
    static const char *const args[] = {"x", "weight", "strides", "pad_type", "pad", "dilations", "groups", NULL};
    int x = op_start(B, st, args);
    int w = x < 0 ? -1 : get_data(B, st, "weight", 1);
    if (x < 0 || w < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], wv_ = B->p->vals[w], *xv = &xv_, *wv = &wv_;
    if (need_float(B, st, xv, "x") || need_float(B, st, wv, "weight"))
        return -1;
    if (xv->rank != 4 || wv->rank != 4) {
        berr(B, st->line, NULL, "conv: the sim supports 2-D convolution (x and weight of rank 4), got ranks %d and %d",
             xv->rank, wv->rank);
        return -1;
    }
    param p;
    int64_t v[4];
    size_t n;
    int64_t strides[2] = {1, 1}, dil[2] = {1, 1}, pads[4] = {0, 0, 0, 0}, groups = 1;
    if (get_param(B, st, "strides", &p))
        return -1;
    if (p.present && (param_ints(B, st, "strides", &p, v, 2, &n) || n != 2 || v[0] < 1 || v[1] < 1))
        return berr(B, p.line, NULL, "conv: strides must be two positive integers"), -1;
    if (p.present)
        strides[0] = v[0], strides[1] = v[1];
    if (get_param(B, st, "dilations", &p))
        return -1;
    if (p.present && (param_ints(B, st, "dilations", &p, v, 2, &n) || n != 2 || v[0] < 1 || v[1] < 1))
        return berr(B, p.line, NULL, "conv: dilations must be two positive integers"), -1;
    if (p.present)
        dil[0] = v[0], dil[1] = v[1];
    if (get_param(B, st, "groups", &p))
        return -1;
    if (p.present && (param_int(B, st, "groups", &p, &groups) || groups < 1))
        return berr(B, p.line, NULL, "conv: groups must be a positive integer"), -1;
    const char *pad_type = "valid";
    if (get_param(B, st, "pad_type", &p))
        return -1;
    if (p.present && !(pad_type = param_str(B, st, "pad_type", &p)))
        return -1;
    param pp;
    if (get_param(B, st, "pad", &pp))
        return -1;
    if (pp.present && (param_ints(B, st, "pad", &pp, v, 4, &n) || n != 4 || v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0))
        return berr(B, pp.line, NULL, "conv: pad must be four non-negative integers"), -1;
    int64_t N = xv->shape[0], Cin = xv->shape[1], H = xv->shape[2], W = xv->shape[3];
    int64_t Cout = wv->shape[0], kh = wv->shape[2], kw = wv->shape[3];
    if (Cin % groups || Cout % groups || wv->shape[1] != Cin / groups) {
        berr(B, st->line, NULL, "conv: x has %lld input channels, groups = %lld, but weight expects %lld per group (weight [%lld, %lld, %lld, %lld])",
             (long long)Cin, (long long)groups, (long long)wv->shape[1], (long long)Cout, (long long)wv->shape[1], (long long)kh, (long long)kw);
        return -1;
    }
    if (Cout > B->lim.max_conv_out_channels) {
        berr(B, st->line, "ANE-CONV-CHANNELS", "conv '%s' has %lld output channels, above the limit of %d; split it into chunks",
             st->results[0].name, (long long)Cout, B->lim.max_conv_out_channels);
        return -1;
    }
    int64_t in_sz[2] = {H, W}, k_sz[2] = {kh, kw}, out_sz[2];
    for (int d = 0; d < 2; d++) {
        int64_t ek = dil[d] * (k_sz[d] - 1) + 1;
        int64_t before, after;
        if (strcmp(pad_type, "valid") == 0) {
            before = after = 0;
        } else if (strcmp(pad_type, "custom") == 0) {
            before = pp.present ? v[2 * d] : 0;
            after = pp.present ? v[2 * d + 1] : 0;
        } else if (strcmp(pad_type, "same") == 0 || strcmp(pad_type, "same_lower") == 0) {
            int64_t o = (in_sz[d] + strides[d] - 1) / strides[d];
            int64_t total = (o - 1) * strides[d] + ek - in_sz[d];
            if (total < 0)
                total = 0;
            before = strcmp(pad_type, "same") == 0 ? total / 2 : (total + 1) / 2;
            after = total - before;
        } else {
            berr(B, st->line, NULL, "conv: unknown pad_type \"%s\" (valid, same, same_lower, custom)", pad_type);
            return -1;
        }
        int64_t span = in_sz[d] + before + after - ek;
        if (span < 0) {
            berr(B, st->line, NULL, "conv: kernel larger than the padded input");
            return -1;
        }
        out_sz[d] = span / strides[d] + 1;
        pads[2 * d] = before;
        pads[2 * d + 1] = after;
    }
    int64_t shape[4] = {N, Cout, out_sz[0], out_sz[1]};
    /* the sim computes a non-pointwise conv through a (Cin/groups * kh * kw) x (Ho * Wo) buffer */
    size_t col = 0;
    if (rt_mul_size((size_t)(Cin / groups), (size_t)kh, &col) || rt_mul_size(col, (size_t)kw, &col) ||
        rt_mul_size(col, (size_t)out_sz[0], &col) || rt_mul_size(col, (size_t)out_sz[1], &col) || col > MIL_MAX_NUMEL) {
        berr(B, st->line, NULL, "conv: the sim's im2col buffer would have more than 2^34 elements");
        return -1;
    }
    sim_op *o = op_out(B, st, SOP_CONV, x, xv->dt, 4, shape);
    if (!o)
        return -1;
    o->y = w;
    o->strides[0] = (int)strides[0];
    o->strides[1] = (int)strides[1];
    o->dil[0] = (int)dil[0];
    o->dil[1] = (int)dil[1];
    for (int i = 0; i < 4; i++)
        o->pads[i] = (int)pads[i];
    o->groups = (int)groups;
    return 0;
}

static int op_matmul(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"x", "y", "transpose_x", "transpose_y", NULL};
    if (check_args(B, st, args) || need_results(B, st, 1))
        return -1;
    int flags[2] = {0, 0};
    static const char *const fl[2] = {"transpose_x", "transpose_y"};
    for (int i = 0; i < 2; i++) {
        param p;
        if (get_param(B, st, fl[i], &p))
            return -1;
        if (!p.present)
            continue;
        if (p.inline_lit) {
            berr(B, p.line, "ANE-MATMUL-FLAGS",
                 "matmul %s is written inline; the ANE compiler only accepts the transpose flags as named bool consts", fl[i]);
            return -1;
        }
        if (param_bool(B, st, fl[i], &p, &flags[i]))
            return -1;
    }
    int x = get_data(B, st, "x", 1);
    int y = x < 0 ? -1 : get_data(B, st, "y", 1);
    if (x < 0 || y < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], yv_ = B->p->vals[y], *xv = &xv_, *yv = &yv_;
    if (need_float(B, st, xv, "x") || need_float(B, st, yv, "y"))
        return -1;
    int xc = xv->kind == SV_CONST || xv->kind == SV_BLOB, yc = yv->kind == SV_CONST || yv->kind == SV_BLOB;
    mil_dtype dt;
    if (xc == yc) {
        if (xv->dt != yv->dt) {
            berr(B, st->line, NULL, "matmul: x and y must have the same element type, got %s and %s",
                 mil_dtype_name(xv->dt), mil_dtype_name(yv->dt));
            return -1;
        }
        dt = xv->dt;
    } else {
        dt = xc ? yv->dt : xv->dt;
    }
    if (xv->rank < 1 || yv->rank < 1) {
        berr(B, st->line, NULL, "matmul: operands must have rank >= 1");
        return -1;
    }
    int64_t xs[ANEC_MAX_RANK + 1], ys[ANEC_MAX_RANK + 1];
    int xr = xv->rank, yr = yv->rank;
    memcpy(xs, xv->shape, sizeof(int64_t) * (size_t)xr);
    memcpy(ys, yv->shape, sizeof(int64_t) * (size_t)yr);
    int x1 = xr == 1, y1 = yr == 1;
    if (x1) { xs[1] = xs[0]; xs[0] = 1; xr = 2; flags[0] = 0; }
    if (y1) { ys[1] = 1; yr = 2; flags[1] = 0; }
    int64_t M = flags[0] ? xs[xr - 1] : xs[xr - 2], K1 = flags[0] ? xs[xr - 2] : xs[xr - 1];
    int64_t K2 = flags[1] ? ys[yr - 1] : ys[yr - 2], N = flags[1] ? ys[yr - 2] : ys[yr - 1];
    if (K1 != K2) {
        char b1[96], b2[96];
        berr(B, st->line, NULL, "matmul: inner dimensions differ (%lld vs %lld) for x %s, y %s, transpose_x=%d, transpose_y=%d",
             (long long)K1, (long long)K2, shape_str(xv->rank, xv->shape, b1, sizeof b1),
             shape_str(yv->rank, yv->shape, b2, sizeof b2), flags[0], flags[1]);
        return -1;
    }
    int br = (xr > yr ? xr : yr) - 2;
    int64_t shape[ANEC_MAX_RANK + 2];
    for (int i = 0; i < br; i++) {
        int ix = i - (br - (xr - 2)), iy = i - (br - (yr - 2));
        int64_t a = ix >= 0 ? xs[ix] : 1, b = iy >= 0 ? ys[iy] : 1;
        if (a != b && a != 1 && b != 1) {
            berr(B, st->line, NULL, "matmul: batch dimensions %lld and %lld do not broadcast", (long long)a, (long long)b);
            return -1;
        }
        shape[i] = a > b ? a : b;
    }
    int rank = br;
    if (!x1)
        shape[rank++] = M;
    if (!y1)
        shape[rank++] = N;
    if (rank > ANEC_MAX_RANK) {
        berr(B, st->line, NULL, "matmul: result rank too large");
        return -1;
    }
    sim_op *o = op_out(B, st, SOP_MATMUL, x, dt, rank, shape);
    if (!o)
        return -1;
    o->y = y;
    o->tx = flags[0];
    o->ty = flags[1];
    return 0;
}

static int op_softmax(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"x", "axis", NULL};
    int x = op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    if (need_float(B, st, xv, "x"))
        return -1;
    int64_t axis = -1;
    param p;
    if (get_param(B, st, "axis", &p) || (p.present && param_int(B, st, "axis", &p, &axis)))
        return -1;
    int ax;
    if (norm_axis(B, st, axis, xv->rank, p.present ? p.line : st->line, &ax))
        return -1;
    sim_op *o = op_out(B, st, SOP_SOFTMAX, x, xv->dt, xv->rank, xv->shape);
    if (!o)
        return -1;
    o->axis = ax;
    return 0;
}

static int op_reduce(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "axes", "keep_dims", NULL};
    int x = op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    if (need_float(B, st, xv, "x"))
        return -1;
    param p;
    int mask = 0, keep = 0;
    if (get_param(B, st, "axes", &p))
        return -1;
    if (p.present) {
        int64_t axes[ANEC_MAX_RANK];
        size_t n;
        if (param_ints(B, st, "axes", &p, axes, ANEC_MAX_RANK, &n))
            return -1;
        for (size_t i = 0; i < n; i++) {
            int a;
            if (norm_axis(B, st, axes[i], xv->rank, p.line, &a))
                return -1;
            if (mask & (1 << a)) {
                berr(B, p.line, NULL, "%s: axis %d given twice", st->op, a);
                return -1;
            }
            mask |= 1 << a;
        }
    } else {
        mask = (1 << xv->rank) - 1;
    }
    param pk;
    if (get_param(B, st, "keep_dims", &pk) || (pk.present && param_bool(B, st, "keep_dims", &pk, &keep)))
        return -1;
    int64_t shape[ANEC_MAX_RANK];
    int rank = 0;
    for (int d = 0; d < xv->rank; d++) {
        if (mask & (1 << d)) {
            if (keep)
                shape[rank++] = 1;
        } else {
            shape[rank++] = xv->shape[d];
        }
    }
    sim_op *o = op_out(B, st, kind, x, xv->dt, rank, shape);
    if (!o)
        return -1;
    o->axes_mask = mask;
    return 0;
}

static int op_reshape(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"x", "shape", NULL};
    int x = op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    param p;
    int64_t shape[ANEC_MAX_RANK];
    size_t n;
    if (required_ints(B, st, "shape", &p, shape, ANEC_MAX_RANK, &n))
        return -1;
    int neg = -1;
    uint64_t known = 1;
    for (size_t i = 0; i < n; i++) {
        if (shape[i] == -1) {
            if (neg >= 0) {
                berr(B, p.line, NULL, "reshape: at most one -1 is allowed in shape");
                return -1;
            }
            neg = (int)i;
            continue;
        }
        if (shape[i] == 0) {
            int src = (int)i - ((int)n - xv->rank);
            if (src < 0 || src >= xv->rank) {
                berr(B, p.line, NULL, "reshape: shape[%zu] = 0 has no matching input dimension", i);
                return -1;
            }
            shape[i] = xv->shape[src];
        }
        if (shape[i] < 1) {
            berr(B, p.line, NULL, "reshape: invalid dimension %lld", (long long)shape[i]);
            return -1;
        }
        if (known > MIL_MAX_NUMEL / (uint64_t)shape[i]) {
            berr(B, p.line, NULL, "reshape: the shape has more than 2^34 elements");
            return -1;
        }
        known *= (uint64_t)shape[i];
    }
    if (neg >= 0) {
        if (known == 0 || xv->numel % known) {
            berr(B, p.line, NULL, "reshape: cannot infer -1 for %zu elements", xv->numel);
            return -1;
        }
        shape[neg] = (int64_t)(xv->numel / known);
        known *= (uint64_t)shape[neg];
    }
    if (known != xv->numel) {
        char b1[96], b2[96];
        berr(B, p.line, NULL, "reshape: cannot reshape %s (%zu elements) to %s", shape_str(xv->rank, xv->shape, b1, sizeof b1),
             xv->numel, shape_str((int)n, shape, b2, sizeof b2));
        return -1;
    }
    return op_out(B, st, SOP_RESHAPE, x, xv->dt, (int)n, shape) ? 0 : -1;
}

static int op_transpose(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"x", "perm", NULL};
    int x = op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    param p;
    int64_t perm[ANEC_MAX_RANK];
    size_t n;
    if (required_ints(B, st, "perm", &p, perm, ANEC_MAX_RANK, &n))
        return -1;
    if ((int)n != xv->rank) {
        berr(B, p.line, NULL, "transpose: perm has %zu entries for a rank-%d input", n, xv->rank);
        return -1;
    }
    int seen = 0;
    int64_t shape[ANEC_MAX_RANK];
    int iperm[ANEC_MAX_RANK];
    for (size_t i = 0; i < n; i++) {
        int a;
        if (norm_axis(B, st, perm[i], xv->rank, p.line, &a))
            return -1;
        if (seen & (1 << a)) {
            berr(B, p.line, NULL, "transpose: perm is not a permutation");
            return -1;
        }
        seen |= 1 << a;
        iperm[i] = a;
        shape[i] = xv->shape[a];
    }
    sim_op *o = op_out(B, st, SOP_TRANSPOSE, x, xv->dt, xv->rank, shape);
    if (!o)
        return -1;
    memcpy(o->perm, iperm, sizeof iperm);
    return 0;
}

/* Python slice semantics per dim; writes start/step and returns the length. */
static int64_t slice_dim(int64_t dim, int64_t b, int64_t e, int64_t s, int bmask, int emask, int64_t *start)
{
    if (s > 0) {
        if (bmask) b = 0;
        else { if (b < 0) b += dim; if (b < 0) b = 0; if (b > dim) b = dim; }
        if (emask) e = dim;
        else { if (e < 0) e += dim; if (e < 0) e = 0; if (e > dim) e = dim; }
        *start = b;
        return e > b ? (e - b + s - 1) / s : 0;
    }
    if (bmask) b = dim - 1;
    else { if (b < 0) b += dim; if (b < -1) b = -1; if (b > dim - 1) b = dim - 1; }
    if (emask) e = -1;
    else { if (e < 0) e += dim; if (e < -1) e = -1; if (e > dim - 1) e = dim - 1; }
    *start = b;
    return b > e ? (b - e + (-s) - 1) / (-s) : 0;
}

static int op_slice(builder *B, const mil_stmt *st, int by_size)
{
    static const char *const a1[] = {"x", "begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask", NULL};
    static const char *const a2[] = {"x", "begin", "size", NULL};
    int x = op_start(B, st, by_size ? a2 : a1);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    int rank = xv->rank;
    int64_t begin[ANEC_MAX_RANK], end[ANEC_MAX_RANK], stride[ANEC_MAX_RANK];
    int bmask = 0, emask = 0, smask = 0;
    size_t n;
    param p;
    static const char *const req2[2] = {"begin", "end"};
    for (int k = 0; k < 2; k++) {
        const char *nm = k == 0 ? "begin" : (by_size ? "size" : req2[1]);
        if (required_ints(B, st, nm, &p, k == 0 ? begin : end, ANEC_MAX_RANK, &n))
            return -1;
        if ((int)n != rank) {
            berr(B, p.line, NULL, "%s: '%s' has %zu entries for a rank-%d input", st->op, nm, n, rank);
            return -1;
        }
    }
    for (int d = 0; d < rank; d++)
        stride[d] = 1;
    if (by_size) {
        for (int d = 0; d < rank; d++) {
            if (begin[d] < 0)
                begin[d] += xv->shape[d];
            if (end[d] == -1) {
                end[d] = xv->shape[d];
            } else {
                if (end[d] < 1) {
                    berr(B, st->line, NULL, "slice_by_size: size[%d] = %lld is invalid", d, (long long)end[d]);
                    return -1;
                }
                end[d] += begin[d];
            }
            if (begin[d] < 0 || end[d] > xv->shape[d]) {
                berr(B, st->line, NULL, "slice_by_size: window [%lld, %lld) is outside dimension %d of size %lld",
                     (long long)begin[d], (long long)end[d], d, (long long)xv->shape[d]);
                return -1;
            }
        }
    } else {
        if (get_param(B, st, "stride", &p))
            return -1;
        if (p.present) {
            if (param_ints(B, st, "stride", &p, stride, ANEC_MAX_RANK, &n))
                return -1;
            if ((int)n != rank) {
                berr(B, p.line, NULL, "slice_by_index: 'stride' has %zu entries for a rank-%d input", n, rank);
                return -1;
            }
            for (int d = 0; d < rank; d++)
                if (stride[d] == 0) {
                    berr(B, p.line, NULL, "slice_by_index: stride must not be 0");
                    return -1;
                }
        }
        static const char *const masks[3] = {"begin_mask", "end_mask", "squeeze_mask"};
        int *mv[3] = {&bmask, &emask, &smask};
        for (int k = 0; k < 3; k++) {
            if (get_param(B, st, masks[k], &p))
                return -1;
            if (p.present && param_bools(B, st, masks[k], &p, rank, mv[k]))
                return -1;
        }
    }
    int64_t shape[ANEC_MAX_RANK];
    int orank = 0;
    sim_op tmp;
    memset(&tmp, 0, sizeof tmp);
    for (int d = 0; d < rank; d++) {
        int64_t start;
        int64_t len;
        if (smask & (1 << d)) {
            int64_t b = begin[d] < 0 ? begin[d] + xv->shape[d] : begin[d];
            if (b < 0 || b >= xv->shape[d]) {
                berr(B, st->line, NULL, "slice_by_index: squeezed index %lld is outside dimension %d", (long long)begin[d], d);
                return -1;
            }
            start = b;
            len = 1;
        } else {
            len = slice_dim(xv->shape[d], begin[d], end[d], stride[d], bmask & (1 << d), emask & (1 << d), &start);
        }
        if (len <= 0) {
            berr(B, st->line, NULL, "%s: empty slice along dimension %d", st->op, d);
            return -1;
        }
        tmp.begin[d] = start;
        tmp.stride[d] = stride[d];
        if (!(smask & (1 << d)))
            shape[orank++] = len;
    }
    sim_op *o = op_out(B, st, SOP_SLICE, x, xv->dt, orank, shape);
    if (!o)
        return -1;
    memcpy(o->begin, tmp.begin, sizeof o->begin);
    memcpy(o->stride, tmp.stride, sizeof o->stride);
    o->squeeze_mask = smask;
    return 0;
}

static int op_split(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"x", "axis", "split_sizes", "num_splits", NULL};
    if (check_args(B, st, args))
        return -1;
    int x = get_data(B, st, "x", 1);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    param p;
    int64_t axis;
    if (get_required_param(B, st, "axis", &p))
        return -1;
    int ax;
    if (param_int(B, st, "axis", &p, &axis) || norm_axis(B, st, axis, xv->rank, p.line, &ax))
        return -1;
    int64_t dim = xv->shape[ax];
    param ps, pn;
    if (get_param(B, st, "split_sizes", &ps) || get_param(B, st, "num_splits", &pn))
        return -1;
    size_t n = 0;
    int64_t *sizes = calloc(st->n_results ? st->n_results : 1, sizeof(int64_t));
    if (!sizes)
        return oom(B), -1;
    if (ps.present) {
        int64_t *tmp = calloc(ps.n ? ps.n : 1, sizeof(int64_t));
        if (!tmp) {
            free(sizes);
            return oom(B), -1;
        }
        if (param_ints(B, st, "split_sizes", &ps, tmp, ps.n, &n)) {
            free(tmp);
            free(sizes);
            return -1;
        }
        int64_t sum = 0;
        for (size_t i = 0; i < n; i++) {
            if (tmp[i] < 1) {
                berr(B, ps.line, NULL, "split: split_sizes must be positive");
                free(tmp);
                free(sizes);
                return -1;
            }
            sum += tmp[i];
        }
        if (sum != dim) {
            berr(B, ps.line, NULL, "split: split_sizes sum to %lld but dimension %d has size %lld", (long long)sum, ax, (long long)dim);
            free(tmp);
            free(sizes);
            return -1;
        }
        if (n != st->n_results) {
            berr(B, st->line, NULL, "split produces %zu results, but %zu are declared", n, st->n_results);
            free(tmp);
            free(sizes);
            return -1;
        }
        memcpy(sizes, tmp, n * sizeof(int64_t));
        free(tmp);
    } else if (pn.present) {
        int64_t k;
        if (param_int(B, st, "num_splits", &pn, &k)) {
            free(sizes);
            return -1;
        }
        if (k < 1 || dim % k) {
            berr(B, pn.line, NULL, "split: num_splits = %lld does not divide dimension %d of size %lld", (long long)k, ax, (long long)dim);
            free(sizes);
            return -1;
        }
        if ((size_t)k != st->n_results) {
            berr(B, st->line, NULL, "split produces %lld results, but %zu are declared", (long long)k, st->n_results);
            free(sizes);
            return -1;
        }
        n = (size_t)k;
        for (size_t i = 0; i < n; i++)
            sizes[i] = dim / k;
    } else {
        berr(B, st->line, NULL, "split needs split_sizes or num_splits");
        free(sizes);
        return -1;
    }
    int *outs = malloc(n * sizeof(int));
    if (!outs) {
        free(sizes);
        return oom(B), -1;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t shape[ANEC_MAX_RANK];
        memcpy(shape, xv->shape, sizeof shape);
        shape[ax] = sizes[i];
        outs[i] = result_value(B, st, i, xv->dt, xv->rank, shape);
        if (outs[i] < 0) {
            free(outs);
            free(sizes);
            return -1;
        }
    }
    sim_op *o = add_op(B, SOP_SPLIT, st->line);
    if (!o) {
        free(outs);
        free(sizes);
        return -1;
    }
    o->x = x;
    o->outs = outs;
    o->n_outs = (int)n;
    o->sizes = sizes;
    o->axis = ax;
    return 0;
}

static int op_pad(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"x", "pad", "mode", "constant_val", NULL};
    int x = op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    if (need_float(B, st, xv, "x"))
        return -1;
    param p;
    int64_t pads[2 * ANEC_MAX_RANK];
    size_t n;
    if (required_ints(B, st, "pad", &p, pads, 2 * ANEC_MAX_RANK, &n))
        return -1;
    if (n % 2 || (int)n > 2 * xv->rank) {
        berr(B, p.line, NULL, "pad: 'pad' must have an even number of entries, at most 2 * rank (%d)", 2 * xv->rank);
        return -1;
    }
    param pm;
    if (get_param(B, st, "mode", &pm))
        return -1;
    if (pm.present) {
        const char *m = param_str(B, st, "mode", &pm);
        if (!m)
            return -1;
        if (strcmp(m, "constant") != 0) {
            berr(B, pm.line, NULL, "pad: mode \"%s\" is not supported by the sim (constant only)", m);
            return -1;
        }
    }
    double cval = 0;
    param pc;
    if (get_param(B, st, "constant_val", &pc))
        return -1;
    if (pc.present) {
        if (pc.str || pc.n != 1 || !is_float(pc.dt)) {
            berr(B, pc.line, NULL, "pad: constant_val must be a float scalar");
            return -1;
        }
        cval = pc.num[0];
    }
    int64_t shape[ANEC_MAX_RANK];
    sim_op tmp;
    memset(&tmp, 0, sizeof tmp);
    memcpy(shape, xv->shape, sizeof shape);
    int first = xv->rank - (int)n / 2;
    for (int d = first; d < xv->rank; d++) {
        int64_t bf = pads[2 * (d - first)], af = pads[2 * (d - first) + 1];
        if (bf < 0 || af < 0) {
            berr(B, p.line, NULL, "pad: negative padding is not supported");
            return -1;
        }
        tmp.pad_before[d] = bf;
        shape[d] += bf + af;
    }
    sim_op *o = op_out(B, st, SOP_PAD, x, xv->dt, xv->rank, shape);
    if (!o)
        return -1;
    memcpy(o->pad_before, tmp.pad_before, sizeof o->pad_before);
    o->pad_value = cval;
    return 0;
}

static int stmt_const(builder *B, const mil_stmt *st)
{
    if (st->n_args) {
        berr(B, st->line, NULL, "const takes no arguments; its value goes in [val = ...]");
        return -1;
    }
    if (need_results(B, st, 1))
        return -1;
    const mil_arg *val = mil_find_attr(st, "val");
    if (!val) {
        berr(B, st->line, NULL, "const '%s' has no val attribute", st->results[0].name);
        return -1;
    }
    return literal_value(B, st->results[0].name, &st->results[0].type, &val->val, st->results[0].line, 1) < 0 ? -1 : 0;
}

/* Ops that exist in MIL but that the sim does not execute. */
static const char *const KNOWN_MIL_OPS[] = {
    "linear", "layer_norm", "batch_norm", "instance_norm", "l2_norm", "local_response_norm",
    "scaled_dot_product_attention", "log", "abs", "floor", "ceil", "round", "sign", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "atanh", "erf", "square", "inverse", "exp2", "threshold", "clip",
    "maximum", "minimum", "floor_div", "mod", "greater", "greater_equal", "less", "less_equal", "equal",
    "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "select", "gather", "gather_nd",
    "gather_along_axis", "scatter", "scatter_nd", "expand_dims", "squeeze", "tile", "reverse", "stack",
    "reduce_min", "reduce_prod", "reduce_l1_norm", "reduce_l2_norm", "reduce_log_sum", "reduce_log_sum_exp",
    "reduce_sum_square", "reduce_argmax", "reduce_argmin", "leaky_relu", "elu", "softplus", "softsign",
    "relu6", "prelu", "hard_sigmoid", "hard_swish", "scaled_tanh", "sigmoid_hard", "linear_activation",
    "thresholded_relu", "softmax_nd", "log_softmax", "conv_transpose", "avg_pool", "max_pool", "l2_pool",
    "upsample_nearest_neighbor", "upsample_bilinear", "resize_bilinear", "crop", "crop_resize",
    "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_lut_to_dense",
    "constexpr_sparse_to_dense", "constexpr_cast", "quantize", "dequantize", "band_part", "cumsum", "topk",
    "argsort", "einsum", "fill", "fill_like", "range_1d", "sliding_windows", "pixel_shuffle",
    "pixel_unshuffle", "space_to_depth", "depth_to_space", "space_to_batch", "batch_to_space", "one_hot",
    "non_zero", "non_maximum_suppression", "shape", "while_loop", "cond", "list_read", "list_write",
    "make_list", "lstm", "gru", "rnn", "read_state", "coreml_update_state", "reshape_like", "slice_update",
    "random_normal", "random_uniform", "random_bernoulli", "random_categorical", "flatten2d", "complex",
    NULL};

static int stmt(builder *B, const mil_stmt *st)
{
    const char *op = st->op;
    if (strcmp(op, "const") == 0)
        return stmt_const(B, st);
    if (strcmp(op, "concat") == 0) {
        berr(B, st->line, "ANE-CONCAT", "concat is rejected by the ANE compiler; return the pieces as separate outputs "
             "or assemble them on the host");
        return -1;
    }
    if (strcmp(op, "gelu") == 0) {
        berr(B, st->line, "ANE-GELU", "gelu is not accepted by the ANE's MIL compiler; use the tanh approximation "
             "0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))");
        return -1;
    }
    if (strcmp(op, "rsqrt") == 0) {
        berr(B, st->line, "ANE-RSQRT", "rsqrt is rejected by the ANE compiler; use pow(x, -0.5)");
        return -1;
    }
    if (strcmp(op, "neg") == 0) {
        berr(B, st->line, "ANE-NEG", "there is no 'neg' op in MIL; multiply by -1 instead");
        return -1;
    }
    static const struct { const char *n; int k; } UN[] = {
        {"exp", SOP_EXP}, {"sqrt", SOP_SQRT}, {"tanh", SOP_TANH}, {"sigmoid", SOP_SIGMOID}, {"relu", SOP_RELU},
        {"silu", SOP_SILU}, {"identity", SOP_IDENTITY}};
    for (size_t i = 0; i < sizeof UN / sizeof UN[0]; i++)
        if (strcmp(op, UN[i].n) == 0)
            return op_unary(B, st, UN[i].k);
    static const struct { const char *n; int k; } BIN[] = {
        {"add", SOP_ADD}, {"sub", SOP_SUB}, {"mul", SOP_MUL}, {"real_div", SOP_DIV}, {"pow", SOP_POW}};
    for (size_t i = 0; i < sizeof BIN / sizeof BIN[0]; i++)
        if (strcmp(op, BIN[i].n) == 0)
            return op_binary(B, st, BIN[i].k);
    if (strcmp(op, "cast") == 0) return op_cast(B, st);
    if (strcmp(op, "conv") == 0) return op_conv(B, st);
    if (strcmp(op, "matmul") == 0) return op_matmul(B, st);
    if (strcmp(op, "softmax") == 0) return op_softmax(B, st);
    if (strcmp(op, "reduce_sum") == 0) return op_reduce(B, st, SOP_REDUCE_SUM);
    if (strcmp(op, "reduce_mean") == 0) return op_reduce(B, st, SOP_REDUCE_MEAN);
    if (strcmp(op, "reduce_max") == 0) return op_reduce(B, st, SOP_REDUCE_MAX);
    if (strcmp(op, "reshape") == 0) return op_reshape(B, st);
    if (strcmp(op, "transpose") == 0) return op_transpose(B, st);
    if (strcmp(op, "slice_by_index") == 0) return op_slice(B, st, 0);
    if (strcmp(op, "slice_by_size") == 0) return op_slice(B, st, 1);
    if (strcmp(op, "split") == 0) return op_split(B, st);
    if (strcmp(op, "pad") == 0) return op_pad(B, st);
    for (const char *const *k = KNOWN_MIL_OPS; *k; k++)
        if (strcmp(*k, op) == 0) {
            berr(B, st->line, NULL, "op '%s' is valid MIL but the anec sim does not implement it", op);
            return -1;
        }
    berr(B, st->line, NULL, "unknown op '%s'", op);
    return -1;
}

static int cmp_names(const sim_plan *p, int a, int b) { return strcmp(p->vals[a].name, p->vals[b].name); }

static void sort_binding(const sim_plan *p, int *idx, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        int v = idx[i];
        size_t j = i;
        while (j > 0 && cmp_names(p, idx[j - 1], v) > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
}

sim_plan *sim_plan_build(const char *mil, size_t len, const anec_limits *limits, int *status, char *err, size_t errlen)
{
    builder B;
    memset(&B, 0, sizeof B);
    B.err = err;
    B.errlen = errlen;
    if (limits)
        B.lim = *limits;
    else {
        B.lim.max_blob_tensors = 16;
        B.lim.scalar_penalty = 1;
        B.lim.max_conv_out_channels = 16384;
        B.lim.min_surface_bytes = 49152;
        B.lim.allow_fp32_io = 1;
    }
    *status = ANEC_OK;
    mil_program *prog = mil_parse(mil, len, err, errlen);
    if (!prog) {
        *status = ANEC_EPARSE;
        return NULL;
    }
    const mil_func *f = mil_main_func(prog, err, errlen);
    if (!f) {
        mil_free(prog);
        *status = ANEC_ECOMPILE;
        return NULL;
    }
    B.f = f;
    B.p = calloc(1, sizeof *B.p);
    if (!B.p) {
        mil_free(prog);
        *status = ANEC_ENOMEM;
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    B.p->refs = 1;
    sim_plan *p = B.p;
    if (f->n_inputs == 0)
        berr(&B, f->line, NULL, "function '%s' has no inputs; the ANE needs at least one input surface", f->name);
    p->inputs = calloc(f->n_inputs + 1, sizeof(int));
    p->in_bind = calloc(f->n_inputs + 1, sizeof(int));
    if (!p->inputs || !p->in_bind)
        oom(&B);
    for (size_t i = 0; i < f->n_inputs && !B.failed; i++) {
        const mil_result *in = &f->inputs[i];
        if (in->type.kind != MIL_TY_TENSOR || !is_float(in->type.dt)) {
            char b[96];
            berr(&B, in->line, "ANE-IO-TENSORS", "input '%s' has type %s; ANE inputs are fp16 or fp32 tensors", in->name,
                 mil_type_str(&in->type, b, sizeof b));
            break;
        }
        if (in->type.dt == MIL_DT_FP32 && !B.lim.allow_fp32_io) {
            berr(&B, in->line, "ANE-FP32-IO", "input '%s' is fp32 but this target has no fp32 I/O; use fp16 inputs", in->name);
            break;
        }
        int idx = add_value(&B, in->name, SV_INPUT, in->type.dt, in->type.rank, in->type.shape, in->line, 1);
        if (idx < 0)
            break;
        p->inputs[i] = idx;
        p->in_bind[i] = idx;
    }
    p->n_inputs = f->n_inputs;
    for (size_t i = 0; i < f->n_stmts && !B.failed; i++)
        stmt(&B, &f->stmts[i]);
    if (!B.failed) {
        /* in 64 bits: the limits come from the caller (a manifest) and may be any int */
        long long cap = (long long)B.lim.max_blob_tensors - (B.scalar_operand_line ? B.lim.scalar_penalty : 0);
        if (cap < 0)
            cap = 0;
        if (p->n_blobs > cap) {
            int line = f->line;
            long long count = 0;
            for (size_t i = 0; i < p->n_vals; i++)
                if (p->vals[i].kind == SV_BLOB && ++count == cap + 1)
                    line = p->vals[i].line;
            if (B.scalar_operand_line)
                berr(&B, line, "ANE-BLOB-BUDGET", "%d BLOBFILE weight tensors, but at most %lld are allowed: the limit is %d, "
                     "minus %d because an elementwise op takes a scalar const (line %d); split the program",
                     p->n_blobs, cap, B.lim.max_blob_tensors, B.lim.scalar_penalty, B.scalar_operand_line);
            else
                berr(&B, line, "ANE-BLOB-BUDGET", "%d BLOBFILE weight tensors, but at most %lld are allowed per program; split the program",
                     p->n_blobs, cap);
        }
    }
    if (!B.failed) {
        if (f->n_returns == 0)
            berr(&B, f->line, NULL, "function '%s' returns nothing", f->name);
        p->outputs = calloc(f->n_returns + 1, sizeof(int));
        p->out_bind = calloc(f->n_returns + 1, sizeof(int));
        if (!p->outputs || !p->out_bind)
            oom(&B);
        for (size_t i = 0; i < f->n_returns && !B.failed; i++) {
            int idx = lookup(&B, f->returns[i]);
            if (idx < 0) {
                berr(&B, f->return_lines[i], "ANE-LIVE-OUTPUTS", "returned name '%s' is not defined in function '%s'",
                     f->returns[i], f->name);
                break;
            }
            for (size_t j = 0; j < i; j++)
                if (p->outputs[j] == idx) {
                    berr(&B, f->return_lines[i], NULL, "'%s' is returned twice", f->returns[i]);
                    break;
                }
            sim_value *v = &p->vals[idx];
            if (!is_float(v->dt) || v->rank == 0) {
                char b[96];
                berr(&B, f->return_lines[i], "ANE-IO-TENSORS", "returned '%s' has type %s; ANE outputs are fp16 or fp32 tensors", v->name,
                     vtype_str(v->dt, v->rank, v->shape, b, sizeof b));
                break;
            }
            if (v->dt == MIL_DT_FP32 && !B.lim.allow_fp32_io) {
                berr(&B, f->return_lines[i], "ANE-FP32-IO", "output '%s' is fp32 but this target has no fp32 I/O; return fp16",
                     v->name);
                break;
            }
            p->outputs[i] = idx;
            p->out_bind[i] = idx;
        }
        p->n_outputs = f->n_returns;
    }
    free(B.htab);
    mil_free(prog);
    if (B.failed) {
        *status = B.status;
        sim_plan_release(p);
        return NULL;
    }
    sort_binding(p, p->in_bind, p->n_inputs);
    sort_binding(p, p->out_bind, p->n_outputs);
    return p;
}

void sim_plan_retain(sim_plan *p) { p->refs++; }

void sim_plan_release(sim_plan *p)
{
    if (!p || --p->refs > 0)
        return;
    for (size_t i = 0; i < p->n_vals; i++) {
        sim_value *v = &p->vals[i];
        free(v->name);
        free(v->cdata);
        free(v->cstr);
        free(v->cnum);
        free(v->blob_path);
    }
    for (size_t i = 0; i < p->n_ops; i++) {
        free(p->ops[i].outs);
        free(p->ops[i].sizes);
    }
    free(p->vals);
    free(p->ops);
    free(p->inputs);
    free(p->outputs);
    free(p->in_bind);
    free(p->out_bind);
    free(p);
}
