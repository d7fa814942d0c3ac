/* Subset of the macOS SDK <string.h> used by csrc/driver_ane.c (syntax check only). */
#ifndef _STRING_H_
#define _STRING_H_

#include <stddef.h>

int memcmp(const void *__s1, const void *__s2, size_t __n);
void *memcpy(void *__dst, const void *__src, size_t __n);
void *memset(void *__b, int __c, size_t __len);
char *strchr(const char *__s, int __c);
int strcmp(const char *__s1, const char *__s2);
size_t strlen(const char *__s);
int strncmp(const char *__s1, const char *__s2, size_t __n);
char *strrchr(const char *__s, int __c);
char *strstr(const char *__big, const char *__little);

#endif
