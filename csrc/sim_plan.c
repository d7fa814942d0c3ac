/* sim_plan.c - the sim's MIL compiler machinery and sim_plan_build (see sim_build.h); the op rules are in sim_rules.c. */
#define _POSIX_C_SOURCE 200809L
#include "sim_build.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "rt_files.h"
#include "rt_util.h"
#include "sim_exec.h"
#include "sim_kernels.h"

void sb_err(builder *B, int line, const char *constraint, const char *fmt, ...)
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

void sb_oom(builder *B)
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

static int sb_lookup(builder *B, const char *name)
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
static int sb_add_value(builder *B, const char *name, int kind, mil_dtype dt, int rank, const int64_t *shape, int line, int named)
{
    if (named) {
        int prev = sb_lookup(B, name);
        if (prev >= 0) {
            sb_err(B, line, NULL, "'%s' is defined twice (first at line %d)", name, B->p->vals[prev].line);
            return -1;
        }
    }
    if (B->p->n_vals == B->cap_vals) {
        size_t nc = B->cap_vals ? B->cap_vals * 2 : 64;
        sim_value *nv = realloc(B->p->vals, nc * sizeof *nv);
        if (!nv) {
            sb_oom(B);
            return -1;
        }
        B->p->vals = nv;
        B->cap_vals = nc;
    }
    sim_value *v = &B->p->vals[B->p->n_vals];
    memset(v, 0, sizeof *v);
    v->name = rt_strdup(name);
    if (!v->name) {
        sb_oom(B);
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
        sb_err(B, line, NULL, "'%s' would have more than 2^34 elements, which the sim does not support", name);
        return -1;
    }
    if (named && hinsert(B, idx)) {
        sb_oom(B);
        return -1;
    }
    return idx;
}

sim_op *sb_add_op(builder *B, int kind, int line)
{
    if (B->p->n_ops == B->cap_ops) {
        size_t nc = B->cap_ops ? B->cap_ops * 2 : 32;
        sim_op *no = realloc(B->p->ops, nc * sizeof *no);
        if (!no) {
            sb_oom(B);
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

const char *sb_shape_str(int rank, const int64_t *shape, char *buf, size_t len)
{
    int k = snprintf(buf, len, "[");
    for (int i = 0; i < rank && k > 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k > 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, "]");
    return buf;
}

static const char *sb_vtype_str(mil_dtype dt, int rank, const int64_t *shape, char *buf, size_t len)
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

int sb_is_float(mil_dtype dt) { return dt == MIL_DT_FP16 || dt == MIL_DT_FP32; }

/* ---- constants ----------------------------------------------------------------- */

/* The integer element types: the values they hold. */
static const struct { mil_dtype dt; double lo, hi; const char *what; } INT_RANGES[] = {
    {MIL_DT_INT32, -2147483648.0, 2147483647.0, "an int32"},
    {MIL_DT_INT8, -128, 127, "an int8"},
    {MIL_DT_UINT8, 0, 255, "a uint8"},
    {MIL_DT_UINT32, 0, 4294967295.0, "a uint32"},
};

/* Fill v->cdata from numbers in the storage format of v->dt. */
static int store_numbers(builder *B, sim_value *v, const double *num, size_t n, int line)
{
    size_t es = mil_dtype_size(v->dt);
    if (!es) {
        sb_err(B, line, NULL, "const '%s': element type %s is not supported by the ANE", v->name, mil_dtype_name(v->dt));
        return -1;
    }
    v->cdata = calloc(n ? n : 1, es);
    v->cnum = malloc((n ? n : 1) * sizeof(double));
    if (!v->cdata || !v->cnum) {
        sb_oom(B);
        return -1;
    }
    memcpy(v->cnum, num, n * sizeof(double));
    v->cn = n;
    for (size_t i = 0; i < n; i++) {
        double d = num[i];
        for (size_t k = 0; k < sizeof INT_RANGES / sizeof INT_RANGES[0]; k++)
            if (v->dt == INT_RANGES[k].dt && (d != floor(d) || d < INT_RANGES[k].lo || d > INT_RANGES[k].hi)) {
                sb_err(B, line, NULL, "const '%s': %g is not %s", v->name, d, INT_RANGES[k].what);
                return -1;
            }
        switch (v->dt) {
        case MIL_DT_FP16: ((uint16_t *)v->cdata)[i] = anec_h_from_f((float)d); break;
        case MIL_DT_FP32: ((float *)v->cdata)[i] = (float)d; break;
        case MIL_DT_INT32: ((int32_t *)v->cdata)[i] = (int32_t)d; break;
        case MIL_DT_INT8: ((int8_t *)v->cdata)[i] = (int8_t)d; break;
        case MIL_DT_UINT8: ((uint8_t *)v->cdata)[i] = (uint8_t)d; break;
        case MIL_DT_UINT32: ((uint32_t *)v->cdata)[i] = (uint32_t)d; break;
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
int sb_literal_value(builder *B, const char *name, const mil_type *decl, const mil_value *lit, int line, int named)
{
    char b1[96], b2[96];
    if (lit->kind == MIL_V_BLOB) {
        if (!types_equal(decl, &lit->type)) {
            sb_err(B, line, NULL, "const '%s' is declared %s but its BLOBFILE value is %s", name,
                 mil_type_str(decl, b1, sizeof b1), mil_type_str(&lit->type, b2, sizeof b2));
            return -1;
        }
        mil_dtype dt = lit->type.dt;
        int sub = sim_dtype_subbyte(dt); /* packed payloads of compressed weights (sim_constexpr.c) */
        if (dt != MIL_DT_FP16 && dt != MIL_DT_FP32 && dt != MIL_DT_UINT8 && dt != MIL_DT_INT8 && !sub) {
            sb_err(B, line, NULL, "const '%s': BLOBFILE element type %s is not supported (fp16, fp32, uint8, int8; "
                 "uint1/2/3/4/6 and int4 for compressed weights)", name, mil_dtype_name(dt));
            return -1;
        }
        if (strncmp(lit->blob_path, "@model_path/", 12) != 0 || !lit->blob_path[12]) {
            sb_err(B, line, NULL, "const '%s': BLOBFILE path \"%s\" must start with @model_path/", name, lit->blob_path);
            return -1;
        }
        int idx = sb_add_value(B, name, SV_BLOB, dt, decl->rank, decl->shape, line, named);
        if (idx < 0)
            return -1;
        sim_value *v = &B->p->vals[idx];
        v->blob_path = rt_strdup(lit->blob_path);
        if (!v->blob_path) {
            sb_oom(B);
            return -1;
        }
        v->blob_offset = lit->blob_offset;
        if (sub)
            v->bytes = (size_t)blob_payload_bytes(rt_blob_dtype(dt), v->numel);
        B->p->n_blobs++;
        return idx;
    }
    if (lit->kind != MIL_V_LIT) {
        sb_err(B, line, NULL, "const '%s' needs a literal or BLOBFILE value", name);
        return -1;
    }
    if (decl && !types_equal(decl, &lit->type)) {
        sb_err(B, line, NULL, "const '%s' is declared %s but its value is %s", name, mil_type_str(decl, b1, sizeof b1),
             mil_type_str(&lit->type, b2, sizeof b2));
        return -1;
    }
    const mil_type *t = &lit->type;
    int idx = sb_add_value(B, name, SV_CONST, t->dt, t->rank, t->shape, line, named);
    if (idx < 0)
        return -1;
    sim_value *v = &B->p->vals[idx];
    if (t->dt == MIL_DT_STRING) {
        if (t->rank != 0 || !lit->str) {
            sb_err(B, line, NULL, "const '%s': only scalar strings are supported", name);
            return -1;
        }
        v->cstr = rt_strdup(lit->str);
        if (!v->cstr) {
            sb_oom(B);
            return -1;
        }
        return idx;
    }
    uint64_t numel = mil_type_numel(t);
    if (lit->n != numel) {
        sb_err(B, line, NULL, "const '%s': %s literal has %zu elements, expected %llu", name,
             mil_type_str(t, b1, sizeof b1), lit->n, (unsigned long long)numel);
        return -1;
    }
    if (store_numbers(B, v, lit->num, lit->n, line))
        return -1;
    return idx;
}

/* ---- statement arguments ------------------------------------------------------------ */

int sb_param(builder *B, const mil_stmt *st, const char *name, sb_param_t *pv)
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
        int idx = sb_lookup(B, a->val.ref);
        if (idx < 0) {
            sb_err(B, a->line, NULL, "%s: argument %s = %s refers to an undefined name", st->op, name, a->val.ref);
            return -1;
        }
        sim_value *v = &B->p->vals[idx];
        if (v->kind != SV_CONST) {
            sb_err(B, a->line, NULL, "%s: parameter '%s' must be a const, but '%s' is computed at run time", st->op,
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
    sb_err(B, a->line, NULL, "%s: parameter '%s' must be a const or a literal", st->op, name);
    return -1;
}

/* A parameter the op cannot do without: like get_param, but absence is an error. */
int sb_required_param(builder *B, const mil_stmt *st, const char *name, sb_param_t *pv)
{
    if (sb_param(B, st, name, pv))
        return -1;
    if (!pv->present) {
        sb_err(B, st->line, NULL, "%s: missing required argument '%s'", st->op, name);
        return -1;
    }
    return 0;
}

int sb_param_ints(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv, int64_t *out, size_t maxn, size_t *n)
{
    if (pv->str || (pv->dt != MIL_DT_INT32 && pv->dt != MIL_DT_INT64 && pv->dt != MIL_DT_INT16 &&
                    pv->dt != MIL_DT_INT8 && pv->dt != MIL_DT_UINT8 && pv->dt != MIL_DT_UINT16 && pv->dt != MIL_DT_UINT32)) {
        sb_err(B, pv->line, NULL, "%s: parameter '%s' must be integers, got %s", st->op, name, mil_dtype_name(pv->dt));
        return -1;
    }
    if (pv->n > maxn) {
        sb_err(B, pv->line, NULL, "%s: parameter '%s' has %zu values, at most %zu allowed", st->op, name, pv->n, maxn);
        return -1;
    }
    for (size_t i = 0; i < pv->n; i++) {
        if (pv->num[i] != floor(pv->num[i]) || fabs(pv->num[i]) > 2147483647.0) {
            sb_err(B, pv->line, NULL, "%s: parameter '%s' value %g is not an integer", st->op, name, pv->num[i]);
            return -1;
        }
        out[i] = (int64_t)pv->num[i];
    }
    *n = pv->n;
    return 0;
}

/* A required parameter holding up to maxn integers. */
int sb_required_ints(builder *B, const mil_stmt *st, const char *name, sb_param_t *pv, int64_t *out, size_t maxn, size_t *n)
{
    return sb_required_param(B, st, name, pv) || sb_param_ints(B, st, name, pv, out, maxn, n) ? -1 : 0;
}

int sb_param_int(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv, int64_t *out)
{
    size_t n;
    int64_t v[1];
    if (sb_param_ints(B, st, name, pv, v, 1, &n))
        return -1;
    if (n != 1 || pv->rank != 0) {
        sb_err(B, pv->line, NULL, "%s: parameter '%s' must be a scalar integer", st->op, name);
        return -1;
    }
    *out = v[0];
    return 0;
}

int sb_param_bool(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv, int *out)
{
    if (pv->dt != MIL_DT_BOOL || pv->n != 1 || pv->rank != 0) {
        sb_err(B, pv->line, NULL, "%s: parameter '%s' must be a bool scalar", st->op, name);
        return -1;
    }
    *out = pv->num[0] != 0;
    return 0;
}

int sb_param_bools(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv, int rank, int *mask)
{
    if (pv->dt != MIL_DT_BOOL || (int)pv->n != rank) {
        sb_err(B, pv->line, NULL, "%s: parameter '%s' must be %d bools", st->op, name, rank);
        return -1;
    }
    *mask = 0;
    for (int i = 0; i < rank; i++)
        if (pv->num[i] != 0)
            *mask |= 1 << i;
    return 0;
}

const char *sb_param_str(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv)
{
    if (!pv->str) {
        sb_err(B, pv->line, NULL, "%s: parameter '%s' must be a string", st->op, name);
        return NULL;
    }
    return pv->str;
}

/* A data operand: a named tensor, or an inline literal turned into a const. */
int sb_data(builder *B, const mil_stmt *st, const char *name, int required)
{
    const mil_arg *a = mil_find_arg(st, name);
    if (!a) {
        if (required)
            sb_err(B, st->line, NULL, "%s: missing required argument '%s'", st->op, name);
        return required ? -2 : -1;
    }
    if (a->val.kind == MIL_V_REF) {
        int idx = sb_lookup(B, a->val.ref);
        if (idx < 0) {
            sb_err(B, a->line, NULL, "%s: argument %s = %s refers to an undefined name", st->op, name, a->val.ref);
            return -2;
        }
        if (B->p->vals[idx].dt == MIL_DT_STRING) {
            sb_err(B, a->line, NULL, "%s: argument '%s' must be a tensor, '%s' is a string", st->op, name, a->val.ref);
            return -2;
        }
        return idx;
    }
    if (a->val.kind == MIL_V_LIT || a->val.kind == MIL_V_BLOB) {
        char nm[160];
        const char *res = st->n_results ? st->results[0].name : st->op;
        snprintf(nm, sizeof nm, "%s.%s", res, name);
        int idx = sb_literal_value(B, nm, &a->val.type, &a->val, a->line, 0);
        if (idx >= 0 && B->p->vals[idx].dt == MIL_DT_STRING) {
            sb_err(B, a->line, NULL, "%s: argument '%s' must be a tensor", st->op, name);
            return -2;
        }
        return idx < 0 ? -2 : idx;
    }
    sb_err(B, a->line, NULL, "%s: argument '%s' must be a variable or a literal, not a tuple", st->op, name);
    return -2;
}

int sb_tuple_ref(builder *B, const mil_stmt *st, const mil_arg *a, const mil_value *item)
{
    if (item->kind != MIL_V_REF) {
        sb_err(B, item->line, NULL, "%s: every item of '%s' must be a variable", st->op, a->name);
        return -1;
    }
    int idx = sb_lookup(B, item->ref);
    if (idx < 0) {
        sb_err(B, item->line, NULL, "%s: %s item %s refers to an undefined name", st->op, a->name, item->ref);
        return -1;
    }
    if (B->p->vals[idx].dt == MIL_DT_STRING) {
        sb_err(B, item->line, NULL, "%s: %s item '%s' must be a tensor, not a string", st->op, a->name, item->ref);
        return -1;
    }
    return idx;
}

/* Unknown argument names are errors (like coremltools' "Unrecognized input"). */
int sb_check_args(builder *B, const mil_stmt *st, const char *const *allowed)
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
            sb_err(B, st->args[i].line, NULL, "%s has no argument '%s' (arguments: %s)", st->op, st->args[i].name, list);
            return -1;
        }
    }
    return 0;
}

/* Compare the declared type of result k with the inferred one and create the value. */
int sb_result_value(builder *B, const mil_stmt *st, size_t k, mil_dtype dt, int rank, const int64_t *shape)
{
    const mil_result *r = &st->results[k];
    int ok = r->type.dt == dt && r->type.rank == rank;
    for (int i = 0; ok && i < rank; i++)
        ok = r->type.shape[i] == shape[i];
    if (!ok) {
        char b1[128], b2[128];
        sb_err(B, r->line, NULL, "%s: '%s' is declared %s but the op produces %s", st->op, r->name,
             mil_type_str(&r->type, b1, sizeof b1), sb_vtype_str(dt, rank, shape, b2, sizeof b2));
        return -1;
    }
    return sb_add_value(B, r->name, SV_OP, dt, rank, shape, r->line, 1);
}

int sb_need_results(builder *B, const mil_stmt *st, size_t n)
{
    if (st->n_results != n) {
        sb_err(B, st->line, NULL, "%s produces %zu result%s, but %zu are declared", st->op, n, n == 1 ? "" : "s", st->n_results);
        return -1;
    }
    return 0;
}

int sb_norm_axis(builder *B, const mil_stmt *st, int64_t axis, int rank, int line, int *out)
{
    if (axis < -rank || axis >= rank) {
        sb_err(B, line, NULL, "%s: axis %lld is out of range for rank %d", st->op, (long long)axis, rank);
        return -1;
    }
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}

int sb_broadcast(builder *B, const mil_stmt *st, const sim_value *x, const sim_value *y, int *rank, int64_t *shape)
{
    int r = x->rank > y->rank ? x->rank : y->rank;
    for (int i = 0; i < r; i++) {
        int ix = i - (r - x->rank), iy = i - (r - y->rank);
        int64_t a = ix >= 0 ? x->shape[ix] : 1, b = iy >= 0 ? y->shape[iy] : 1;
        if (a != b && a != 1 && b != 1) {
            char b1[96], b2[96];
            sb_err(B, st->line, NULL, "%s: shapes %s and %s do not broadcast", st->op, sb_shape_str(x->rank, x->shape, b1, sizeof b1),
                 sb_shape_str(y->rank, y->shape, b2, sizeof b2));
            return -1;
        }
        shape[i] = a > b ? a : b;
    }
    *rank = r;
    return 0;
}

int sb_need_float(builder *B, const mil_stmt *st, const sim_value *v, const char *arg)
{
    if (!sb_is_float(v->dt)) {
        sb_err(B, st->line, NULL, "%s: argument '%s' must be fp16 or fp32, '%s' is %s", st->op, arg, v->name, mil_dtype_name(v->dt));
        return -1;
    }
    return 0;
}

/* ---- the single-result op shape most rules share --------------------------------------- */

/* The start every single-result op shares: only known arguments, exactly one
   declared result, and the required data operand x. Returns x's value index,
   or a negative number after reporting the error. */
int sb_op_start(builder *B, const mil_stmt *st, const char *const *args)
{
    if (sb_check_args(B, st, args) || sb_need_results(B, st, 1))
        return -1;
    return sb_data(B, st, "x", 1);
}

/* Result 0, checked against its declaration, and the single-result op that produces it from x. */
sim_op *sb_op_out(builder *B, const mil_stmt *st, int kind, int x, mil_dtype dt, int rank, const int64_t *shape)
{
    int r = sb_result_value(B, st, 0, dt, rank, shape);
    if (r < 0)
        return NULL;
    sim_op *o = sb_add_op(B, kind, st->line);
    if (!o)
        return NULL;
    o->x = x;
    o->outs = malloc(sizeof(int));
    if (!o->outs) {
        sb_oom(B);
        return NULL;
    }
    o->outs[0] = r;
    o->n_outs = 1;
    return o;
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
    return sim_plan_build_accepting(mil, len, limits, NULL, status, err, errlen);
}

/* The fp16 weights that are only ever the weight of a pointwise, ungrouped conv (never another
   op's operand, nor returned) are held as slivers (sim_value.slivers), where the CPU has the
   narrow kernel: a decode step's products read them at memory speed, every product in one
   layout, and the weight is held once. */
static void mark_slivers(sim_plan *p)
{
    if (!sk_have_narrow())
        return;
    for (size_t i = 0; i < p->n_vals; i++) {
        sim_value *v = &p->vals[i];
        v->slivers = v->kind == SV_BLOB && !v->dec && !v->part && v->dt == MIL_DT_FP16 && v->rank == 4 &&
                     v->shape[2] == 1 && v->shape[3] == 1 && v->shape[0] <= INT_MAX && v->shape[1] <= INT_MAX;
    }
    for (size_t k = 0; k < p->n_ops; k++) {
        const sim_op *o = &p->ops[k];
        int as_weight = o->kind == SOP_CONV && o->groups == 1 && o->y >= 0 && sim_pointwise_conv(o, &p->vals[o->y]);
        if (o->x >= 0)
            p->vals[o->x].slivers = 0;
        if (o->y >= 0 && !as_weight)
            p->vals[o->y].slivers = 0;
        for (int i = 0; i < o->n_ins; i++)
            p->vals[o->ins[i]].slivers = 0;
    }
    for (size_t i = 0; i < p->n_outputs; i++)
        p->vals[p->outputs[i]].slivers = 0;
    for (size_t i = 0; i < p->n_vals; i++) {
        const sim_decomp *d = p->vals[i].dec;
        int used[] = {d ? d->data : -1, d ? d->scale : -1, d ? d->offset : -1, d ? d->lut : -1, d ? d->mask : -1};
        for (size_t k = 0; k < sizeof used / sizeof used[0]; k++)
            if (used[k] >= 0)
                p->vals[used[k]].slivers = 0;
    }
}

sim_plan *sim_plan_build_accepting(const char *mil, size_t len, const anec_limits *limits,
                                   const char *const *accept, int *status, char *err, size_t errlen)
{
    builder B;
    memset(&B, 0, sizeof B);
    B.accept = accept;
    B.err = err;
    B.errlen = errlen;
    if (!limits) {  /* limits come from the manifest or the open options, never from defaults here */
        *status = ANEC_EINVAL;
        snprintf(err, errlen, "sim_plan_build: no limits given");
        return NULL;
    }
    B.lim = *limits;
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
        sb_err(&B, f->line, NULL, "function '%s' has no inputs; the ANE needs at least one input surface", f->name);
    p->inputs = calloc(f->n_inputs + 1, sizeof(int));
    p->in_bind = calloc(f->n_inputs + 1, sizeof(int));
    if (!p->inputs || !p->in_bind)
        sb_oom(&B);
    for (size_t i = 0; i < f->n_inputs && !B.failed; i++) {
        const mil_result *in = &f->inputs[i];
        if (in->type.kind != MIL_TY_TENSOR || !sb_is_float(in->type.dt)) {
            char b[96];
            sb_err(&B, in->line, "ANE-IO-TENSORS", "input '%s' has type %s; ANE inputs are fp16 or fp32 tensors", in->name,
                 mil_type_str(&in->type, b, sizeof b));
            break;
        }
        if (in->type.dt == MIL_DT_FP32 && !B.lim.allow_fp32_io) {
            sb_err(&B, in->line, "ANE-FP32-IO", "input '%s' is fp32 but this target has no fp32 I/O; use fp16 inputs", in->name);
            break;
        }
        int idx = sb_add_value(&B, in->name, SV_INPUT, in->type.dt, in->type.rank, in->type.shape, in->line, 1);
        if (idx < 0)
            break;
        p->inputs[i] = idx;
        p->in_bind[i] = idx;
    }
    p->n_inputs = f->n_inputs;
    for (size_t i = 0; i < f->n_stmts && !B.failed; i++)
        sb_statement(&B, &f->stmts[i]);
    if (!B.failed) {
        /* in 64 bits: the limits come from the caller (a manifest) and may be any int */
        long long cap = (long long)B.lim.max_blob_tensors - (B.scalar_operand_line ? B.lim.scalar_penalty : 0);
        if (cap < 0)
            cap = 0;
        /* a compressed weight is one weight tensor: its constexpr result, not its payloads
           (hypothesis, ANE-COMPRESSED-WEIGHTS) */
        int weights = p->n_blobs - p->n_parts + p->n_decomp;
        if (weights > cap) {
            int line = f->line;
            long long count = 0;
            for (size_t i = 0; i < p->n_vals; i++)
                if (p->vals[i].kind == SV_BLOB && !p->vals[i].part && ++count == cap + 1)
                    line = p->vals[i].line;
            if (B.scalar_operand_line)
                sb_err(&B, line, "ANE-BLOB-BUDGET", "%d BLOBFILE weight tensors, but at most %lld are allowed: the limit is %d, "
                     "minus %d because an elementwise op takes a scalar const (line %d); split the program",
                     weights, cap, B.lim.max_blob_tensors, B.lim.scalar_penalty, B.scalar_operand_line);
            else
                sb_err(&B, line, "ANE-BLOB-BUDGET", "%d BLOBFILE weight tensors, but at most %lld are allowed per program; split the program",
                     weights, cap);
        }
    }
    if (!B.failed) {
        if (f->n_returns == 0)
            sb_err(&B, f->line, NULL, "function '%s' returns nothing", f->name);
        p->outputs = calloc(f->n_returns + 1, sizeof(int));
        p->out_bind = calloc(f->n_returns + 1, sizeof(int));
        if (!p->outputs || !p->out_bind)
            sb_oom(&B);
        for (size_t i = 0; i < f->n_returns && !B.failed; i++) {
            int idx = sb_lookup(&B, f->returns[i]);
            if (idx < 0) {
                sb_err(&B, f->return_lines[i], "ANE-LIVE-OUTPUTS", "returned name '%s' is not defined in function '%s'",
                     f->returns[i], f->name);
                break;
            }
            for (size_t j = 0; j < i; j++)
                if (p->outputs[j] == idx) {
                    sb_err(&B, f->return_lines[i], NULL, "'%s' is returned twice", f->returns[i]);
                    break;
                }
            sim_value *v = &p->vals[idx];
            if (!sb_is_float(v->dt) || v->rank == 0) {
                char b[96];
                sb_err(&B, f->return_lines[i], "ANE-IO-TENSORS", "returned '%s' has type %s; ANE outputs are fp16 or fp32 tensors", v->name,
                     sb_vtype_str(v->dt, v->rank, v->shape, b, sizeof b));
                break;
            }
            if (v->dt == MIL_DT_FP32 && !B.lim.allow_fp32_io) {
                sb_err(&B, f->return_lines[i], "ANE-FP32-IO", "output '%s' is fp32 but this target has no fp32 I/O; return fp16",
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
    mark_slivers(p);
    for (size_t k = 0; k < p->n_ops; k++) { /* a reshape reads its operand's bytes as they are */
        const sim_op *o = &p->ops[k];
        if ((o->kind == SOP_RESHAPE || o->kind == SOP_IDENTITY) && o->x >= 0 && o->n_outs == 1 &&
            p->vals[o->outs[0]].dt == p->vals[o->x].dt && p->vals[o->outs[0]].bytes == p->vals[o->x].bytes)
            p->vals[o->outs[0]].view = 1;
    }
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
        free(v->dec);
    }
    for (size_t i = 0; i < p->n_ops; i++) {
        free(p->ops[i].outs);
        free(p->ops[i].sizes);
        free(p->ops[i].ins);
    }
    free(p->vals);
    free(p->ops);
    free(p->inputs);
    free(p->outputs);
    free(p->in_bind);
    free(p->out_bind);
    free(p);
}
