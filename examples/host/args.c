/* SPDX-License-Identifier: MIT */
/* Command-line values of the example hosts (args.h). */
#include "args.h"

#include <pkv/pkv.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int host_bad_arg(const char *program, const char *arg, const char *value,
                 const char *takes)
{
    if (value == NULL)
        fprintf(stderr, "%s: %s needs a value (%s)\n", program, arg, takes);
    else
        fprintf(stderr, "%s: %s %s: expected %s\n", program, arg, value,
                takes);
    return -1;
}

int host_parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s || v > UINT32_MAX || *s == '-')
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* The names of the pkv_kv_dtype values, in order. */
static const char *const KV_NAMES[] = {"f32", "f16", "u8", "u4", "u8k-u4v"};
#define NUM_KV (sizeof KV_NAMES / sizeof KV_NAMES[0])

int host_parse_kv(const char *s, int32_t *out)
{
    for (size_t i = 0; i < NUM_KV; i++)
        if (strcmp(s, KV_NAMES[i]) == 0) {
            *out = (int32_t)i;
            return 0;
        }
    return -1;
}

const char *host_kv_name(int32_t dtype)
{
    return dtype >= 0 && (size_t)dtype < NUM_KV ? KV_NAMES[dtype] : "?";
}

int host_parse_backend(const char *s, int32_t *out)
{
    static const char *const names[] = {"auto", "cpu", "opencl"};
    static const int32_t kinds[] = {PKV_BACKEND_KIND_AUTO, PKV_BACKEND_KIND_CPU,
                                    PKV_BACKEND_KIND_OPENCL};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = kinds[i];
            return 0;
        }
    return -1;
}

char *host_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *text = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (cap - *len < 2) {
            cap = cap ? 2 * cap : 65536;
            char *grown = realloc(text, cap);
            if (grown == NULL) {
                free(text);
                text = NULL;
                break;
            }
            text = grown;
        }
        size_t got = fread(text + *len, 1, cap - *len - 1, f);
        *len += got;
        if (got == 0) {
            if (ferror(f)) {
                free(text);
                text = NULL;
            }
            break;
        }
    }
    fclose(f);
    if (text != NULL)
        text[*len] = '\0';
    return text;
}

int host_option_with_value(const char *program, const char *a,
                           const char *v, const char *const *options,
                           size_t n)
{
    int known = 0;
    for (size_t k = 0; k < n; k++)
        known |= strcmp(a, options[k]) == 0;
    if (!known) {
        fprintf(stderr, "%s: unknown option %s\n", program, a);
        return -1;
    }
    return v == NULL ? host_bad_arg(program, a, NULL, "see --help") : 0;
}
