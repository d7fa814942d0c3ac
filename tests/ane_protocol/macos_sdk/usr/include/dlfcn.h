/* Subset of the macOS SDK <dlfcn.h> used by csrc/driver_ane.c (syntax check only). */
#ifndef _DLFCN_H_
#define _DLFCN_H_

#define RTLD_LAZY   0x1
#define RTLD_NOW    0x2
#define RTLD_LOCAL  0x4
#define RTLD_GLOBAL 0x8

extern int dlclose(void *__handle);
extern char *dlerror(void);
extern void *dlopen(const char *__path, int __mode);
extern void *dlsym(void *__handle, const char *__symbol);

#endif
