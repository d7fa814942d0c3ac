/*
 * tap_runner.h - the runner the ane protocol programs share (test_ane_protocol.c,
 * test_ane_core.c, test_ane_driver_edges.c): each declares its tests and how a
 * mode sets the fake device up; tap_run runs every test once per mode, each in
 * a fresh directory under one mkdtemp root with a fresh fake of the Apple side,
 * fails a test that left protocol violations, open autorelease pools or (where
 * asked) live objects, and prints TAP-like lines ("ok N - name [mode]").
 */
#ifndef ANEC_TAP_RUNNER_H
#define ANEC_TAP_RUNNER_H

#include <stddef.h>

typedef struct tap_test {
    const char *name;
    void (*fn)(void);
    int real_symbols;   /* runs without the fake installed */
} tap_test;

typedef struct tap_suite {
    const char *name;            /* the run's root: $TMPDIR/<name>-XXXXXX */
    const tap_test *tests;
    size_t n_tests;
    size_t n_modes;              /* every test runs once per mode */
    int digits;                  /* of the per-test directory names (t01, t001, ...) */
    int check_leaks;             /* a test that passed must leave no live object */
    /* Before the test numbered `number` in `mode` (fk_init done on g_root): set the
       device up and name the mode in tag (left empty: no mode in the output). */
    void (*setup)(size_t mode, size_t number, char *tag, size_t cap);
} tap_suite;

extern int g_failed_now;  /* set by a failed check: the running test fails */
extern char g_base[1024]; /* mkdtemp root of the whole run */
extern char g_root[1100]; /* this test's root (the fake's NSTemporaryDirectory()) */

/* Run the suite; returns the number of failed tests (99: no temp root). */
int tap_run(const tap_suite *suite);

#endif /* ANEC_TAP_RUNNER_H */
