/*
 * mil_lex.h - the MIL parser's internal state and lexer (mil_lex.c), shared
 * by the parser (mil_parse.c) only: tokens, the parser state, the arena, the
 * first error, and the token helpers.
 */
#ifndef ANEC_MIL_LEX_H
#define ANEC_MIL_LEX_H

#include <stddef.h>

#include "mil_parse.h"

enum { T_EOF = 0, T_IDENT, T_NUMBER, T_STRING, T_PUNCT, T_ARROW };

typedef struct tok {
    int kind;
    char punct;
    size_t start, end;     /* byte range in the text (STRING: without quotes) */
    int line, col;
} tok;

typedef struct parser {
    const char *s;
    size_t n, pos;
    int line;
    size_t line_start;
    tok cur;
    int depth;
    mil_arena *arena;
    char *err;
    size_t errlen;
    int failed;
} parser;

/* n zeroed bytes (16-aligned) from the arena; NULL when out of memory. */
void *mil_arena_alloc(mil_arena **a, size_t n);
void mil_arena_free(mil_arena *a);
/* Record the first error at line:col (later ones are dropped). */
void mil_fail(parser *P, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Advance P->cur to the next token. */
void mil_lex(parser *P);
/* The token after P->cur, without consuming anything. */
tok mil_peek2(parser *P);
int mil_is_punct(const tok *t, char c);
/* Is t the identifier `word`? */
int mil_tok_is(parser *P, const tok *t, const char *word);
/* t as text for messages, in buf. */
const char *mil_tok_desc(parser *P, const tok *t, char *buf, size_t len);
/* In a list: consume a ',' (1) or stop before the closing token (0). */
int mil_list_comma(parser *P);
/* Consume the punctuation c (what: for the message) or fail. */
int mil_expect_punct(parser *P, char c, const char *what);
/* t's text, NUL-terminated, in the arena. */
char *mil_tok_strdup(parser *P, const tok *t);
/* Consume an identifier (what: for the message) and return it, or NULL. */
char *mil_expect_ident(parser *P, const char *what);
/* Grow an arena array of *cap elements of elsize to hold n. */
void *mil_grow(parser *P, void *old, size_t n, size_t *cap, size_t elsize);

#endif /* ANEC_MIL_LEX_H */
