/* Subset of the macOS SDK <stdlib.h> used by csrc/driver_ane.c (syntax check only). */
#ifndef _STDLIB_H_
#define _STDLIB_H_

#include <stddef.h>

void *calloc(size_t __count, size_t __size);
void free(void *);
void *malloc(size_t __size);
void *realloc(void *__ptr, size_t __size);

#endif
