/* tharness.h - a minimal assertion harness for the C unit tests. */
#ifndef ANEC_THARNESS_H
#define ANEC_THARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failures, t_checks;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        t_checks++;                                                                    \
        if (!(cond)) {                                                                 \
            t_failures++;                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                              \
    } while (0)

/* err must contain needle */
#define CHECK_HAS(err, needle)                                                         \
    do {                                                                               \
        t_checks++;                                                                    \
        if (!strstr((err), (needle))) {                                                \
            t_failures++;                                                              \
            fprintf(stderr, "%s:%d: expected \"%s\" in: %s\n", __FILE__, __LINE__,     \
                    (needle), (err));                                                  \
        }                                                                              \
    } while (0)

#define T_DONE(name)                                                                   \
    do {                                                                               \
        printf("%s: %d checks, %d failures\n", (name), t_checks, t_failures);          \
        return t_failures ? 1 : 0;                                                     \
    } while (0)

#endif
