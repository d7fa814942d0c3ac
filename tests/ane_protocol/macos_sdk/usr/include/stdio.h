/* Subset of the macOS SDK <stdio.h> used by csrc/driver_ane.c (syntax check only). */
#ifndef _STDIO_H_
#define _STDIO_H_

#include <stdarg.h>
#include <stddef.h>

int snprintf(char *__restrict __str, size_t __size, const char *__restrict __format, ...)
    __attribute__((__format__(__printf__, 3, 4)));
int vsnprintf(char *__restrict __str, size_t __size, const char *__restrict __format,
              va_list)
    __attribute__((__format__(__printf__, 3, 0)));

#endif
