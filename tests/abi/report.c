/* test_abi's reports (report.h). */
#include "report.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

abi_report *abi_new(void) {
    abi_report *r = calloc(1, sizeof *r);
    if (!r) abort();
    return r;
}

void abi_free(abi_report *r) {
    if (!r) return;
    free(r->v);
    free(r);
}

static abi_val *add(abi_report *r, char kind, const char *fmt, va_list ap) {
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 256;
        r->v = realloc(r->v, r->cap * sizeof *r->v);
        if (!r->v) abort();
    }
    abi_val *v = &r->v[r->n++];
    memset(v, 0, sizeof *v);
    vsnprintf(v->key, sizeof v->key, fmt, ap);
    v->kind = kind;
    return v;
}

#define ADD(kind, assign)                                                                                          \
    do {                                                                                                           \
        va_list ap;                                                                                                \
        va_start(ap, fmt);                                                                                         \
        abi_val *x = add(r, kind, fmt, ap);                                                                        \
        va_end(ap);                                                                                                \
        assign;                                                                                                    \
    } while (0)

void abi_u(abi_report *r, uint64_t v, const char *fmt, ...) { ADD('u', x->u = v); }
void abi_i(abi_report *r, int64_t v, const char *fmt, ...) { ADD('i', x->i = v); }
void abi_d(abi_report *r, double v, const char *fmt, ...) { ADD('d', x->d = v); }
void abi_s(abi_report *r, const char *v, const char *fmt, ...) {
    ADD('s', snprintf(x->s, sizeof x->s, "%s", v ? v : "(null)"));
}

const abi_val *abi_get(const abi_report *r, const char *key) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->v[i].key, key)) return &r->v[i];
    return NULL;
}

void abi_field(abi_report *r, const char *type, const char *field, size_t offset, size_t size, size_t align) {
    abi_u(r, offset, "%s.%s.offset", type, field);
    abi_u(r, size, "%s.%s.size", type, field);
    abi_u(r, align, "%s.%s.align", type, field);
}
