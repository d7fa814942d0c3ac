/*
 * mil_lex.c - the MIL parser's lexer and its arena: the arena every node of a
 * parsed program lives in (freed at once by mil_free), tokens (identifiers,
 * numbers, strings, punctuation, `->`; spaces optional, `//` comments
 * skipped) with their line and column, the error message every parse error
 * goes through ("model.mil:LINE:COL: message", the first one kept), and the
 * token helpers the parser (mil_parse.c) reads the text with (mil_lex.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mil_lex.h"
#include "rt_files.h"

/* ---- arena ------------------------------------------------------------- */

struct mil_arena {
    struct mil_arena *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *mil_arena_alloc(mil_arena **a, size_t n)
{
    if (rt_round_up(n, 16, &n))
        return NULL;
    if (!*a || (*a)->cap - (*a)->used < n) {
        size_t cap = n > 65536 ? n : 65536, total;
        if (rt_add_size(sizeof(mil_arena), cap, &total))
            return NULL;
        mil_arena *c = malloc(total);
        if (!c)
            return NULL;
        c->next = *a;
        c->used = 0;
        c->cap = cap;
        *a = c;
    }
    void *p = (*a)->data + (*a)->used;
    (*a)->used += n;
    memset(p, 0, n);
    return p;
}

void mil_arena_free(mil_arena *a)
{
    while (a) {
        mil_arena *n = a->next;
        free(a);
        a = n;
    }
}

/* ---- lexer ------------------------------------------------------------- */

void mil_fail(parser *P, int line, int col, const char *fmt, ...)
{
    if (P->failed)
        return;
    P->failed = 1;
    int k = snprintf(P->err, P->errlen, "model.mil:%d:%d: ", line, col);
    if (k < 0 || (size_t)k >= P->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err + k, P->errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

static int is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_ident_char(int c) { return is_ident_start(c) || (c >= '0' && c <= '9') || c == '.'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

static void skip_space(parser *P)
{
    while (P->pos < P->n) {
        char c = P->s[P->pos];
        if (c == '\n') {
            P->pos++;
            P->line++;
            P->line_start = P->pos;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            P->pos++;
        } else if (c == '/' && P->pos + 1 < P->n && P->s[P->pos + 1] == '/') {
            while (P->pos < P->n && P->s[P->pos] != '\n')
                P->pos++;
        } else {
            break;
        }
    }
}

void mil_lex(parser *P)
{
    skip_space(P);
    tok t = {0};
    t.start = P->pos;
    t.line = P->line;
    t.col = (int)(P->pos - P->line_start) + 1;
    if (P->pos >= P->n) {
        t.kind = T_EOF;
        t.end = P->pos;
        P->cur = t;
        return;
    }
    const char *s = P->s;
    char c = s[P->pos];
    char c1 = P->pos + 1 < P->n ? s[P->pos + 1] : 0;
    if (is_ident_start((unsigned char)c)) {
        while (P->pos < P->n && is_ident_char((unsigned char)s[P->pos]))
            P->pos++;
        t.kind = T_IDENT;
    } else if (is_digit((unsigned char)c) || ((c == '-' || c == '+') && (is_digit((unsigned char)c1) || c1 == '.' || c1 == 'i' || c1 == 'n' || c1 == 'I' || c1 == 'N')) ||
               (c == '.' && is_digit((unsigned char)c1))) {
        size_t p = P->pos;
        if (s[p] == '-' || s[p] == '+')
            p++;
        int hex = p + 1 < P->n && s[p] == '0' && (s[p + 1] == 'x' || s[p + 1] == 'X');
        while (p < P->n) {
            char d = s[p];
            if (is_ident_char((unsigned char)d)) {
                p++;
            } else if ((d == '-' || d == '+') && p > P->pos &&
                       (s[p - 1] == 'p' || s[p - 1] == 'P' || (!hex && (s[p - 1] == 'e' || s[p - 1] == 'E')))) {
                p++;
            } else {
                break;
            }
        }
        P->pos = p;
        t.kind = T_NUMBER;
    } else if (c == '"') {
        P->pos++;
        t.start = P->pos;
        while (P->pos < P->n && s[P->pos] != '"' && s[P->pos] != '\n') {
            if (s[P->pos] == '\\' && P->pos + 1 < P->n)
                P->pos++;
            P->pos++;
        }
        if (P->pos >= P->n || s[P->pos] != '"') {
            mil_fail(P, t.line, t.col, "unterminated string literal");
            t.kind = T_EOF;
            t.end = P->pos;
            P->cur = t;
            return;
        }
        t.end = P->pos;
        P->pos++;
        t.kind = T_STRING;
        P->cur = t;
        return;
    } else if (c == '-' && c1 == '>') {
        P->pos += 2;
        t.kind = T_ARROW;
    } else if (c && strchr("()[]{}<>,=;?", c)) { /* strchr finds the terminating NUL too */
        P->pos++;
        t.kind = T_PUNCT;
        t.punct = c;
    } else {
        if ((unsigned char)c >= 32 && (unsigned char)c < 127)
            mil_fail(P, t.line, t.col, "unexpected character '%c'", c);
        else
            mil_fail(P, t.line, t.col, "unexpected byte 0x%02x", (unsigned)(unsigned char)c);
        t.kind = T_EOF;
    }
    t.end = P->pos;
    P->cur = t;
}

/* Look at the token after the current one without consuming anything. */
tok mil_peek2(parser *P)
{
    parser save = *P;
    int failed = P->failed;
    mil_lex(P);
    tok t = P->cur;
    size_t pos = P->pos;
    (void)pos;
    /* restore everything (the error flag too: a lexing error is reported when it is reached) */
    if (!failed && P->failed && P->errlen)
        P->err[0] = 0;
    *P = save;
    P->failed = failed;
    return t;
}

int mil_is_punct(const tok *t, char c) { return t->kind == T_PUNCT && t->punct == c; }

int mil_tok_is(parser *P, const tok *t, const char *word)
{
    size_t n = strlen(word);
    return t->kind == T_IDENT && t->end - t->start == n && memcmp(P->s + t->start, word, n) == 0;
}

const char *mil_tok_desc(parser *P, const tok *t, char *buf, size_t len)
{
    switch (t->kind) {
    case T_EOF: return "end of input";
    case T_ARROW: return "'->'";
    case T_PUNCT: snprintf(buf, len, "'%c'", t->punct); return buf;
    case T_STRING: snprintf(buf, len, "string \"%.*s\"", (int)(t->end - t->start > 32 ? 32 : t->end - t->start), P->s + t->start); return buf;
    default: snprintf(buf, len, "'%.*s'", (int)(t->end - t->start > 40 ? 40 : t->end - t->start), P->s + t->start); return buf;
    }
}

/* After a list item: a comma continues the list (and is consumed); anything else ends it. */
int mil_list_comma(parser *P)
{
    if (!mil_is_punct(&P->cur, ','))
        return 0;
    mil_lex(P);
    return 1;
}

int mil_expect_punct(parser *P, char c, const char *what)
{
    if (P->failed)
        return -1;
    if (!mil_is_punct(&P->cur, c)) {
        char b[64];
        mil_fail(P, P->cur.line, P->cur.col, "expected '%c' %s, found %s", c, what, mil_tok_desc(P, &P->cur, b, sizeof b));
        return -1;
    }
    mil_lex(P);
    return 0;
}

char *mil_tok_strdup(parser *P, const tok *t)
{
    size_t n = t->end - t->start;
    char *r = mil_arena_alloc(&P->arena, n + 1);
    if (!r) {
        mil_fail(P, t->line, t->col, "out of memory");
        return NULL;
    }
    if (t->kind != T_STRING) {
        memcpy(r, P->s + t->start, n);
        r[n] = 0;
        return r;
    }
    size_t j = 0;
    for (size_t i = t->start; i < t->end; i++) {
        char c = P->s[i];
        if (c == '\\' && i + 1 < t->end) {
            char e = P->s[++i];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == '0' ? '\0' : e;
        }
        r[j++] = c;
    }
    r[j] = 0;
    return r;
}

char *mil_expect_ident(parser *P, const char *what)
{
    if (P->failed)
        return NULL;
    if (P->cur.kind != T_IDENT) {
        char b[64];
        mil_fail(P, P->cur.line, P->cur.col, "expected %s, found %s", what, mil_tok_desc(P, &P->cur, b, sizeof b));
        return NULL;
    }
    char *r = mil_tok_strdup(P, &P->cur);
    mil_lex(P);
    return r;
}

/* Growable arrays inside the arena. */
void *mil_grow(parser *P, void *old, size_t n, size_t *cap, size_t elsize)
{
    if (n < *cap)
        return old;
    size_t nc = 4, bytes = 0;
    void *p = NULL;
    if ((!*cap || rt_mul_size(*cap, 2, &nc) == 0) && rt_mul_size(nc, elsize, &bytes) == 0)
        p = mil_arena_alloc(&P->arena, bytes);
    if (!p) {
        mil_fail(P, P->cur.line, P->cur.col, "out of memory");
        return NULL;
    }
    if (old && n)
        memcpy(p, old, n * elsize);
    *cap = nc;
    return p;
}
