/* SPDX-License-Identifier: MIT */
/* The Gemma 3 host's weight file, mapped (weights.h). */
#define _POSIX_C_SOURCE 200809L
#include "weights.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "PKVG3W01"
#define VERSION 1
#define NAME_BYTES 64
#define HEADER_U32S 17
/* name, dtype, ndim, shape[4], offset, bytes */
#define ENTRY_BYTES (NAME_BYTES + 2 * 4 + 4 * 8 + 2 * 8)

int g3_fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* Little-endian reads at an offset already checked to be in the map. */
static uint32_t u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t u64_at(const uint8_t *p)
{
    return (uint64_t)u32_at(p) | (uint64_t)u32_at(p + 4) << 32;
}

static float f32_at(const uint8_t *p)
{
    uint32_t u = u32_at(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* [at, at + n) inside a file of size bytes, without overflow. */
static int inside(uint64_t at, uint64_t n, uint64_t size)
{
    return at <= size && n <= size - at;
}

static int parse_header(g3_file *f, const uint8_t *m, uint64_t size,
                        uint64_t *table, uint64_t *vocab, uint64_t *data,
                        char *err, size_t err_size)
{
    const size_t fixed = 8 + HEADER_U32S * 4 + 2 * 4 + 3 * 8 + 32;
    if (size < fixed || memcmp(m, MAGIC, 8) != 0)
        return g3_fail(err, err_size, "not a pkv Gemma 3 weight file (magic)");
    uint32_t u[HEADER_U32S];
    for (int i = 0; i < HEADER_U32S; i++)
        u[i] = u32_at(m + 8 + 4 * i);
    if (u[0] != VERSION)
        return g3_fail(err, err_size, "weight file version %u, expected %u",
                    u[0], VERSION);
    g3_file_config *c = &f->config;
    f->num_tensors = u[1];
    c->vocab_size = u[2];
    c->num_layers = u[3];
    c->dim = u[4];
    c->ffn_dim = u[5];
    c->num_heads = u[6];
    c->num_kv_heads = u[7];
    c->key_len = u[8];
    c->value_len = u[9];
    c->sliding_window = u[10];
    c->bos = (int32_t)u[11];
    c->eos = (int32_t)u[12];
    c->unk = (int32_t)u[13];
    c->pad = (int32_t)u[14];
    c->add_bos = u[15] != 0;
    c->add_space_prefix = u[16] != 0;
    const uint8_t *p = m + 8 + HEADER_U32S * 4;
    c->rope_base = f32_at(p);
    c->rms_eps = f32_at(p + 4);
    *table = u64_at(p + 8);
    *vocab = u64_at(p + 16);
    *data = u64_at(p + 24);
    if (f->num_tensors == 0 || f->num_tensors > 100000 ||
        c->vocab_size == 0 || c->vocab_size > (1u << 24) ||
        !inside(*table, (uint64_t)f->num_tensors * ENTRY_BYTES, size) ||
        *vocab > size || *data > size)
        return g3_fail(err, err_size, "weight file header out of range");
    return 0;
}

static int parse_tensors(g3_file *f, const uint8_t *m, uint64_t size,
                         uint64_t table, uint64_t data, char *err,
                         size_t err_size)
{
    f->tensors = calloc(f->num_tensors, sizeof *f->tensors);
    if (f->tensors == NULL)
        return g3_fail(err, err_size, "out of memory");
    for (uint32_t i = 0; i < f->num_tensors; i++) {
        const uint8_t *e = m + table + (uint64_t)i * ENTRY_BYTES;
        g3_tensor *t = &f->tensors[i];
        if (memchr(e, '\0', NAME_BYTES) == NULL)
            return g3_fail(err, err_size, "tensor %u: name not terminated", i);
        t->name = (const char *)e;
        t->dtype = u32_at(e + NAME_BYTES);
        t->ndim = u32_at(e + NAME_BYTES + 4);
        uint64_t elements = 1;
        for (int d = 0; d < 4; d++) {
            t->shape[d] = u64_at(e + NAME_BYTES + 8 + 8 * d);
            if (t->shape[d] == 0 || t->shape[d] > (1u << 30))
                return g3_fail(err, err_size, "%s: bad shape", t->name);
            elements *= t->shape[d];
        }
        uint64_t offset = u64_at(e + NAME_BYTES + 40);
        t->bytes = u64_at(e + NAME_BYTES + 48);
        uint64_t elem = t->dtype == G3_F32 ? 4 : t->dtype == G3_F16 ? 2 : 0;
        if (elem == 0 || t->ndim < 1 || t->ndim > 4 ||
            t->bytes != elements * elem || offset % 64 != 0 ||
            !inside(data + offset, t->bytes, size) || data > size)
            return g3_fail(err, err_size, "%s: bad table entry", t->name);
        t->data = m + data + offset;
    }
    return 0;
}

static int parse_vocab(g3_file *f, const uint8_t *m, uint64_t vocab,
                       uint64_t data, char *err, size_t err_size)
{
    uint32_t n = f->config.vocab_size;
    f->vocab = calloc(n, sizeof *f->vocab);
    if (f->vocab == NULL)
        return g3_fail(err, err_size, "out of memory");
    uint64_t at = vocab;
    for (uint32_t i = 0; i < n; i++) {
        if (!inside(at, 12, data))
            return g3_fail(err, err_size, "vocabulary entry %u out of range", i);
        g3_piece *p = &f->vocab[i];
        p->score = f32_at(m + at);
        p->type = (int32_t)u32_at(m + at + 4);
        p->len = u32_at(m + at + 8);
        if (!inside(at + 12, p->len, data))
            return g3_fail(err, err_size, "vocabulary entry %u out of range", i);
        p->text = (const char *)m + at + 12;
        at += 12 + p->len;
    }
    return 0;
}

int g3_file_open(g3_file *f, const char *path, char *err, size_t err_size)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return g3_fail(err, err_size, "cannot open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        close(fd);
        return g3_fail(err, err_size, "cannot read %s", path);
    }
    f->map_size = (size_t)st.st_size;
    f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return g3_fail(err, err_size, "cannot map %s", path);
    }
    const uint8_t *m = f->map;
    uint64_t table = 0, vocab = 0, data = 0;
    if (parse_header(f, m, f->map_size, &table, &vocab, &data, err,
                     err_size) != 0 ||
        parse_tensors(f, m, f->map_size, table, data, err, err_size) != 0 ||
        parse_vocab(f, m, vocab, data, err, err_size) != 0) {
        g3_file_close(f);
        return -1;
    }
    return 0;
}

const g3_tensor *g3_file_tensor(const g3_file *f, const char *name,
                                uint32_t dtype, uint32_t ndim,
                                const uint64_t *shape, char *err,
                                size_t err_size)
{
    for (uint32_t i = 0; i < f->num_tensors; i++) {
        const g3_tensor *t = &f->tensors[i];
        if (strcmp(t->name, name) != 0)
            continue;
        int same = t->dtype == dtype && t->ndim == ndim;
        for (uint32_t d = 0; same && d < ndim; d++)
            same = t->shape[d] == shape[d];
        if (!same) {
            g3_fail(err, err_size,
                 "%s: dtype %u shape [%llu %llu], expected dtype %u shape "
                 "[%llu %llu]",
                 name, t->dtype, (unsigned long long)t->shape[0],
                 (unsigned long long)t->shape[1], dtype,
                 (unsigned long long)shape[0],
                 (unsigned long long)(ndim > 1 ? shape[1] : 1));
            return NULL;
        }
        return t;
    }
    g3_fail(err, err_size, "no tensor %s in the weight file", name);
    return NULL;
}

void g3_file_close(g3_file *f)
{
    if (f->map != NULL)
        munmap(f->map, f->map_size);
    free(f->tensors);
    free(f->vocab);
    memset(f, 0, sizeof *f);
}

char *g3_default_weights_path(void)
{
    const char *cache = getenv("PKV_CACHE"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char base[4096];
    if (cache != NULL && *cache)
        snprintf(base, sizeof base, "%s", cache);
    else if (xdg != NULL && *xdg)
        snprintf(base, sizeof base, "%s/pkv", xdg);
    else
        snprintf(base, sizeof base, "%s/.cache/pkv", home ? home : ".");
    size_t n = strlen(base) + 64;
    char *path = malloc(n);
    if (path != NULL)
        snprintf(path, n, "%s/gemma3/gemma-3-270m.pkvw", base);
    return path;
}
