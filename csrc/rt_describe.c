/*
 * rt_describe.c - what the core reads from a program's MIL, the same for
 * every driver: the I/O binding tables in alphabetical order of MIL names
 * (from a light parse of the func signature and return tuple), the BLOBFILE
 * consts and the weight files they read, and the checks of a weight file
 * against every const that reads it (layout, and finite values).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blobfile.h"
#include "rt_files.h"
#include "rt_internal.h"
#include "rt_util.h"
#include "mil_parse.h"

static int cmp_io(const void *a, const void *b) { return strcmp(((const io_desc *)a)->name, ((const io_desc *)b)->name); }
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int fill_io(io_desc *d, const char *name, const mil_type *t, size_t decl)
{
    d->name = rt_strdup(name);
    if (!d->name)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    d->dtype = mil_dtype_to_anec(t->dt);
    d->rank = t->rank;
    memcpy(d->shape, t->shape, sizeof d->shape);
    d->decl = decl;
    uint64_t numel = mil_type_numel(t);
    size_t bytes;
    if (numel > (uint64_t)SIZE_MAX || rt_mul_size((size_t)numel, mil_dtype_size(t->dt), &bytes))
        return rt_fail(ANEC_ECOMPILE, "I/O tensor '%s' is too large for this machine", name);
    d->numel = (size_t)numel;
    d->bytes = bytes;
    return ANEC_OK;
}

/* Light parse shared by every driver: signature, return tuple, BLOBFILE consts.
   Only syntax errors fail here; semantic errors are the driver's to report. */
int rt_describe(anec_program *p, const char *mil, size_t mil_len)
{
    char err[1024];
    mil_program *prog = mil_parse(mil, mil_len, err, sizeof err);
    if (!prog)
        return rt_fail(ANEC_EPARSE, "%s", err);
    const mil_func *f = mil_main_func(prog, err, sizeof err);
    if (!f) {
        mil_free(prog);
        return rt_fail(ANEC_ECOMPILE, "%s", err);
    }
    int rc = ANEC_OK;
    p->in = calloc(f->n_inputs + 1, sizeof *p->in);
    p->out = calloc(f->n_returns + 1, sizeof *p->out);
    size_t nconst = 0;
    for (size_t i = 0; i < f->n_stmts; i++)
        nconst += strcmp(f->stmts[i].op, "const") == 0;
    p->refs_tab = calloc(nconst + 1, sizeof *p->refs_tab);
    p->files = calloc(nconst + 1, sizeof *p->files);
    if (!p->in || !p->out || !p->refs_tab || !p->files) {
        mil_free(prog);
        return rt_fail(ANEC_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < f->n_inputs && rc == ANEC_OK; i++) {
        rc = fill_io(&p->in[i], f->inputs[i].name, &f->inputs[i].type, i);
        p->n_in++;
    }
    for (size_t r = 0; r < f->n_returns && rc == ANEC_OK; r++) {
        const mil_type *t = NULL;
        for (size_t i = 0; i < f->n_inputs && !t; i++)
            if (strcmp(f->inputs[i].name, f->returns[r]) == 0)
                t = &f->inputs[i].type;
        for (size_t i = 0; i < f->n_stmts && !t; i++)
            for (size_t k = 0; k < f->stmts[i].n_results; k++)
                if (strcmp(f->stmts[i].results[k].name, f->returns[r]) == 0)
                    t = &f->stmts[i].results[k].type;
        mil_type unknown;
        memset(&unknown, 0, sizeof unknown);
        rc = fill_io(&p->out[r], f->returns[r], t ? t : &unknown, r);
        p->n_out++;
    }
    for (size_t i = 0; i < f->n_stmts && rc == ANEC_OK; i++) {
        const mil_stmt *s = &f->stmts[i];
        if (strcmp(s->op, "const") || s->n_results != 1)
            continue;
        const mil_arg *val = mil_find_attr(s, "val");
        if (!val || val->val.kind != MIL_V_BLOB)
            continue;
        blob_ref *b = &p->refs_tab[p->n_refs++];
        b->path = rt_strdup(val->val.blob_path);
        b->const_name = rt_strdup(s->results[0].name);
        b->offset = val->val.blob_offset;
        b->dtype = rt_blob_dtype(s->results[0].type.dt);
        b->bytes = blob_payload_bytes(b->dtype, mil_type_numel(&s->results[0].type));
        b->line = s->results[0].line;
        if (!b->path || !b->const_name) {
            rc = rt_fail(ANEC_ENOMEM, "out of memory");
            break;
        }
        if (!rt_weight_path(b->path)) {
            rc = rt_fail(ANEC_ECOMPILE, "model.mil:%d: BLOBFILE path \"%s\" of const '%s' must be "
                         "@model_path/weights/<relative path> without '..'", b->line, b->path, b->const_name);
            break;
        }
        int seen = 0;
        for (size_t k = 0; k < p->n_files; k++)
            seen |= strcmp(p->files[k], b->path) == 0;
        if (!seen) {
            p->files[p->n_files] = rt_strdup(b->path);
            if (!p->files[p->n_files]) {
                rc = rt_fail(ANEC_ENOMEM, "out of memory");
                break;
            }
            p->n_files++;
        }
    }
    mil_free(prog);
    if (rc == ANEC_OK) {
        qsort(p->in, p->n_in, sizeof *p->in, cmp_io);
        qsort(p->out, p->n_out, sizeof *p->out, cmp_io);
        qsort(p->files, p->n_files, sizeof *p->files, cmp_str);
    }
    return rc;
}

/* After the driver accepted the program (its own messages are more precise). */
int rt_check_outputs(const anec_program *p)
{
    for (size_t i = 0; i < p->n_out; i++)
        if (!p->out[i].dtype || !p->out[i].rank)
            return rt_fail(ANEC_ECOMPILE, "[ANE-LIVE-OUTPUTS] returned name '%s' is not a tensor defined in the "
                           "function", p->out[i].name);
    return ANEC_OK;
}

int rt_check_blob(const anec_program *p, const anec_blob *b, int check_finite, const char *what)
{
    for (size_t k = 0; k < p->n_refs; k++) {
        const blob_ref *r = &p->refs_tab[k];
        if (strcmp(r->path, b->path))
            continue;
        blob_tensor t;
        char why[512];
        if (blob_read_tensor(b->data, b->len, r->offset, r->dtype, r->bytes, &t, why, sizeof why))
            return rt_fail(ANEC_EWEIGHTS, "%s: weight file %s for const '%s' (model.mil:%d, offset %llu): %s",
                           what, b->path, r->const_name, r->line, (unsigned long long)r->offset, why);
        if (check_finite) {
            long long bad = blob_first_nonfinite(&t);
            if (bad >= 0)
                return rt_fail(ANEC_EWEIGHTS, "%s: weight file %s for const '%s' has a non-finite value (NaN or Inf) "
                               "at element %lld%s", what, b->path, r->const_name, bad,
                               strcmp(what, "reload") == 0 ? "; the old weights stay in use" : "");
        }
    }
    return ANEC_OK;
}
