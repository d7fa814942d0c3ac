/*
 * tap_runner.c - the ane protocol programs' shared runner (see tap_runner.h):
 * one temp root per run, removed when every test passed; per test a fresh
 * directory and fake, the mode's device, the test, then the postconditions
 * every test has (no protocol violation, no autorelease pool left open, no
 * leaked object where the suite asks), and one TAP-like line.
 */
#define _GNU_SOURCE
#include "tap_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "ane_syms.h"
#include "fake_apple.h"

int g_failed_now;
char g_base[1024];
char g_root[1100];

static void check_postconditions(const tap_suite *S)
{
    for (size_t v = 0; v < fk_nviolations(); v++) {
        printf("#   protocol violation: %s\n", fk_violation(v));
        g_failed_now = 1;
    }
    if (fk_pool_depth() != 0) {
        printf("#   %d autorelease pool(s) left open\n", fk_pool_depth());
        g_failed_now = 1;
    }
    if (S->check_leaks && !g_failed_now && fk_live() != 0) {
        printf("#   %zu object(s) leaked\n", fk_live());
        g_failed_now = 1;
    }
}

int tap_run(const tap_suite *S)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_base, sizeof g_base, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", S->name);
    if (!mkdtemp(g_base)) {
        perror("mkdtemp");
        return 99;
    }
    size_t n = S->n_tests * S->n_modes;
    int failed = 0;
    printf("1..%zu\n", n);
    for (size_t t = 0; t < n; t++) {
        const tap_test *T = &S->tests[t % S->n_tests];
        snprintf(g_root, sizeof g_root, "%s/t%0*zu", g_base, S->digits, t + 1);
        mkdir(g_root, 0755);
        fk_init(g_root);
        char tag[160] = "";
        if (S->setup)
            S->setup(t / S->n_tests, t + 1, tag, sizeof tag);
        g_failed_now = 0;
        if (T->real_symbols)
            ane_syms_install_fake(NULL);
        T->fn();
        check_postconditions(S);
        printf("%sok %zu - %s%s%s%s\n", g_failed_now ? "not " : "", t + 1, T->name, *tag ? " [" : "", tag,
               *tag ? "]" : "");
        failed += g_failed_now;
        fk_shutdown();
    }
    if (!failed) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_base);
        if (system(cmd) != 0)
            printf("# could not remove %s\n", g_base);
    }
    printf("# %zu tests, %d failed\n", n, failed);
    return failed;
}
