/*
 * mil_parse.h - a recursive-descent parser for Apple MIL text (internal):
 * the grammar in mil_parse.c, the tokens in mil_lex.c. The runtime core reads a
 * program's signature with it, the sim compiles the whole program.
 *
 * It reads the text our emitter writes and the forms other emitters and
 * coremlc use: program(1.0|1.3) with an optional [buildInfo = dict<..>(..)],
 * func NAME<opset>(params) { stmts } -> (names);, statements
 * `TYPE name = op(k = v, ...)[name = string("n"), val = ...];`, multi-result
 * statements with or without parentheses, inline typed literals
 * (`bool(false)`, `tensor<int32, [2]>([1, 1])`, legacy `tensor<string, []>("x")`),
 * C hex floats, decimal floats, inf/nan, BLOBFILE(path = .., offset = ..) and
 * tuples `values = (a, b)`. Spaces are optional everywhere, `//` comments
 * are skipped.
 *
 * The parser only checks syntax; types and op semantics are checked by
 * sim_plan.c. All nodes live in one arena freed by mil_free. Errors are
 * reported as "model.mil:LINE:COL: message". The parser never reads outside
 * the given bytes and bounds its recursion, so any input is safe.
 */
#ifndef ANEC_MIL_PARSE_H
#define ANEC_MIL_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "anec_rt.h"

/* The most elements a tensor may have (parsed types and every value the sim plans). */
#define MIL_MAX_NUMEL (1ull << 34)

typedef enum mil_dtype {
    MIL_DT_INVALID = 0,
    MIL_DT_FP16, MIL_DT_FP32, MIL_DT_FP64, MIL_DT_BF16,
    MIL_DT_INT4, MIL_DT_INT8, MIL_DT_INT16, MIL_DT_INT32, MIL_DT_INT64,
    MIL_DT_UINT1, MIL_DT_UINT2, MIL_DT_UINT4, MIL_DT_UINT8, MIL_DT_UINT16, MIL_DT_UINT32, MIL_DT_UINT64,
    MIL_DT_BOOL, MIL_DT_STRING,
    MIL_DT_UINT3, MIL_DT_UINT6
} mil_dtype;

enum { MIL_TY_SCALAR = 0, MIL_TY_TENSOR = 1, MIL_TY_DICT = 2 };

typedef struct mil_type {
    int kind;                        /* MIL_TY_*; a rank-0 tensor<> is a scalar */
    mil_dtype dt;
    int rank;
    int64_t shape[ANEC_MAX_RANK];
} mil_type;

enum { MIL_V_REF = 1, MIL_V_LIT, MIL_V_BLOB, MIL_V_TUPLE, MIL_V_DICT };

typedef struct mil_value {
    int kind;                        /* MIL_V_* */
    int line, col;
    const char *ref;                 /* REF: variable name */
    mil_type type;                   /* LIT, BLOB: declared type of the literal */
    size_t n;                        /* LIT: number of elements; TUPLE: items */
    double *num;                     /* LIT numbers and bools (flattened, row-major) */
    const char *str;                 /* LIT string */
    const char *blob_path;           /* BLOB */
    uint64_t blob_offset;
    struct mil_value *items;         /* TUPLE */
} mil_value;

typedef struct mil_arg {
    const char *name;
    mil_value val;
    int line, col;
} mil_arg;

typedef struct mil_result {
    mil_type type;
    const char *name;
    int line, col;
} mil_result;

typedef struct mil_stmt {
    const char *op;
    int line, col;                   /* of the op name */
    mil_result *results;
    size_t n_results;
    mil_arg *args;
    size_t n_args;
    mil_arg *attrs;                  /* [name = .., val = ..] */
    size_t n_attrs;
} mil_stmt;

typedef struct mil_func {
    const char *name;
    const char *opset;               /* "ios18", ... or NULL */
    int line;
    mil_result *inputs;
    size_t n_inputs;
    mil_stmt *stmts;
    size_t n_stmts;
    const char **returns;
    int *return_lines, *return_cols;
    size_t n_returns;
} mil_func;

typedef struct mil_arena mil_arena;

typedef struct mil_program {
    const char *version;             /* "1.3" */
    mil_func *funcs;
    size_t n_funcs;
    mil_arena *arena;
} mil_program;

/* Parse; NULL on error with the message in err. */
mil_program *mil_parse(const char *text, size_t len, char *err, size_t errlen);
void mil_free(mil_program *p);

/* The function to run: "main" if present, else the only one; NULL + err otherwise. */
const mil_func *mil_main_func(const mil_program *p, char *err, size_t errlen);

/* Helpers shared by the plan builder and the runtime core. */
const char *mil_dtype_name(mil_dtype dt);
size_t mil_dtype_size(mil_dtype dt);       /* bytes per element, 0 if not storable */
int mil_dtype_to_anec(mil_dtype dt);       /* ANEC_DTYPE_* or 0 */
uint64_t mil_type_numel(const mil_type *t);
/* "tensor<fp16, [1, 2]>" / "fp16" into buf; returns buf. */
const char *mil_type_str(const mil_type *t, char *buf, size_t buflen);
/* Find a named statement argument / attribute, or NULL. */
const mil_arg *mil_find_arg(const mil_stmt *s, const char *name);
const mil_arg *mil_find_attr(const mil_stmt *s, const char *name);

#endif
