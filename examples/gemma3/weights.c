/* SPDX-License-Identifier: MIT */
/* The Gemma 3 host's GGUF, read with ggml's gguf reader (weights.h). */
#define _POSIX_C_SOURCE 200809L
#include "weights.h"

#include <ggml-cpu.h>
#include <ggml.h>
#include <gguf.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* Sizes past these are not a Gemma 3 this host can run, whatever the file
 * says, and keep every product below in range. */
#define MAX_LAYERS 1024
#define MAX_WIDTH 65536    /* dim, heads * key length */
#define MAX_FFN 262144
#define MAX_VOCAB (1u << 24)
#define MAX_PIECE 65536 /* bytes of one vocabulary piece */

int g3_fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* ggml's reader says why it refused a file through ggml's log: its first
 * error line (the later ones repeat it), kept while the file is read. */
typedef struct log_capture {
    char line[256];
} log_capture;

static void capture_log(enum ggml_log_level level, const char *text,
                        void *user)
{
    log_capture *c = user;
    if (level != GGML_LOG_LEVEL_ERROR)
        return;
    if (*c->line)
        return;
    snprintf(c->line, sizeof c->line, "%s", text);
    size_t n = strlen(c->line);
    if (n > 0 && c->line[n - 1] == '\n')
        c->line[n - 1] = '\0';
}

/* ------------------------------------------------------------ the keys */

typedef struct reader {
    const struct gguf_context *g;
    char *err;
    size_t err_size;
} reader;

static int64_t key(reader *r, const char *name, enum gguf_type type)
{
    int64_t id = gguf_find_key(r->g, name);
    if (id < 0) {
        g3_fail(r->err, r->err_size, "no key %s in the file", name);
        return -1;
    }
    if (gguf_get_kv_type(r->g, id) != type) {
        g3_fail(r->err, r->err_size, "key %s is a %s, expected a %s", name,
                gguf_type_name(gguf_get_kv_type(r->g, id)),
                gguf_type_name(type));
        return -1;
    }
    return id;
}

/* An unsigned value in [lo, hi], stored as u32 or i32 (writers differ). */
static int get_u32(reader *r, const char *name, uint32_t lo, uint32_t hi,
                   uint32_t *out)
{
    int64_t id = gguf_find_key(r->g, name);
    enum gguf_type t = id < 0 ? GGUF_TYPE_UINT32 : gguf_get_kv_type(r->g, id);
    if (t == GGUF_TYPE_INT32) {
        int32_t v = gguf_get_val_i32(r->g, id);
        if (v < 0)
            return g3_fail(r->err, r->err_size, "key %s is %d", name, v);
        *out = (uint32_t)v;
    } else {
        if ((id = key(r, name, GGUF_TYPE_UINT32)) < 0)
            return -1;
        *out = gguf_get_val_u32(r->g, id);
    }
    if (*out < lo || *out > hi)
        return g3_fail(r->err, r->err_size, "key %s is %u, not in %u..%u",
                       name, *out, lo, hi);
    return 0;
}

static int get_f32(reader *r, const char *name, float lo, float hi,
                   float *out)
{
    int64_t id = key(r, name, GGUF_TYPE_FLOAT32);
    if (id < 0)
        return -1;
    *out = gguf_get_val_f32(r->g, id);
    if (!(*out >= lo && *out <= hi))
        return g3_fail(r->err, r->err_size, "key %s is %g, not in %g..%g",
                       name, (double)*out, (double)lo, (double)hi);
    return 0;
}

/* A boolean key; absent means fallback. */
static int get_bool(reader *r, const char *name, int fallback, int *out)
{
    *out = fallback;
    if (gguf_find_key(r->g, name) < 0)
        return 0;
    int64_t id = key(r, name, GGUF_TYPE_BOOL);
    if (id < 0)
        return -1;
    *out = gguf_get_val_bool(r->g, id);
    return 0;
}

static int has_string(reader *r, const char *name, const char *want)
{
    int64_t id = key(r, name, GGUF_TYPE_STRING);
    if (id < 0)
        return -1;
    if (strcmp(gguf_get_val_str(r->g, id), want) != 0)
        return g3_fail(r->err, r->err_size, "key %s is \"%.40s\", expected "
                       "\"%s\"", name, gguf_get_val_str(r->g, id), want);
    return 0;
}

static int read_config(reader *r, g3_file_config *c)
{
    if (has_string(r, "general.architecture", "gemma3") != 0 ||
        has_string(r, "tokenizer.ggml.model", "llama") != 0 ||
        get_u32(r, "gemma3.block_count", 1, MAX_LAYERS, &c->num_layers) ||
        get_u32(r, "gemma3.embedding_length", 1, MAX_WIDTH, &c->dim) ||
        get_u32(r, "gemma3.feed_forward_length", 1, MAX_FFN, &c->ffn_dim) ||
        get_u32(r, "gemma3.attention.head_count", 1, MAX_WIDTH,
                &c->num_heads) ||
        get_u32(r, "gemma3.attention.head_count_kv", 1, MAX_WIDTH,
                &c->num_kv_heads) ||
        get_u32(r, "gemma3.attention.key_length", 1, MAX_WIDTH,
                &c->key_len) ||
        get_u32(r, "gemma3.attention.value_length", 1, MAX_WIDTH,
                &c->value_len) ||
        get_u32(r, "gemma3.attention.sliding_window", 1, UINT32_MAX,
                &c->sliding_window) ||
        get_u32(r, "gemma3.context_length", 1, UINT32_MAX,
                &c->context_length) ||
        get_f32(r, "gemma3.rope.freq_base", 1.0f, 1e12f, &c->rope_base) ||
        get_f32(r, "gemma3.attention.layer_norm_rms_epsilon", 1e-12f, 1.0f,
                &c->rms_eps))
        return -1;
    uint32_t ids[4];
    static const char *const id_keys[4] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    for (int i = 0; i < 4; i++)
        if (get_u32(r, id_keys[i], 0, MAX_VOCAB - 1, &ids[i]) != 0)
            return -1;
    c->bos = (int32_t)ids[0];
    c->eos = (int32_t)ids[1];
    c->unk = (int32_t)ids[2];
    c->pad = (int32_t)ids[3];
    /* llama.cpp's defaults for a SentencePiece vocabulary. */
    return get_bool(r, "tokenizer.ggml.add_bos_token", 1, &c->add_bos) ||
                   get_bool(r, "tokenizer.ggml.add_space_prefix", 1,
                            &c->add_space_prefix)
               ? -1
               : 0;
}

/* An array key of n entries of type type (n 0: any count, returned). */
static int64_t array(reader *r, const char *name, enum gguf_type type,
                     size_t *n)
{
    int64_t id = key(r, name, GGUF_TYPE_ARRAY);
    if (id < 0)
        return -1;
    size_t got = gguf_get_arr_n(r->g, id);
    if (gguf_get_arr_type(r->g, id) != type ||
        (*n != 0 && got != *n)) {
        g3_fail(r->err, r->err_size, "key %s: %zu values of %s, expected "
                "%zu of %s", name, got,
                gguf_type_name(gguf_get_arr_type(r->g, id)), *n,
                gguf_type_name(type));
        return -1;
    }
    *n = got;
    return id;
}

static int read_vocab(reader *r, g3_file *f)
{
    size_t n = 0;
    int64_t tokens = array(r, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &n);
    if (tokens < 0)
        return -1;
    if (n == 0 || n > MAX_VOCAB)
        return g3_fail(r->err, r->err_size, "%zu vocabulary entries", n);
    int64_t scores = array(r, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &n);
    int64_t types = scores < 0 ? -1
                               : array(r, "tokenizer.ggml.token_type",
                                       GGUF_TYPE_INT32, &n);
    if (types < 0)
        return -1;
    f->config.vocab_size = (uint32_t)n;
    f->vocab = calloc(n, sizeof *f->vocab);
    if (f->vocab == NULL)
        return g3_fail(r->err, r->err_size, "out of memory");
    const float *score = gguf_get_arr_data(r->g, scores);
    const int32_t *type = gguf_get_arr_data(r->g, types);
    for (size_t i = 0; i < n; i++) {
        const char *text = gguf_get_arr_str(r->g, tokens, i);
        size_t len = strlen(text);
        if (len > MAX_PIECE)
            return g3_fail(r->err, r->err_size, "vocabulary entry %zu has "
                           "%zu bytes", i, len);
        f->vocab[i] = (g3_piece){text, (uint32_t)len, score[i], type[i]};
    }
    const g3_file_config *c = &f->config;
    if ((uint32_t)c->bos >= n || (uint32_t)c->eos >= n ||
        (uint32_t)c->unk >= n || (uint32_t)c->pad >= n)
        return g3_fail(r->err, r->err_size, "a special token id is past "
                       "the %zu-entry vocabulary", n);
    return 0;
}

/* ------------------------------------------------------------ the file */

/* Point every tensor at its bytes in the map, each checked to lie inside
 * the file: ggml's reader does not read tensor data when asked not to
 * allocate, so a truncated file is found here. */
static int place_tensors(g3_file *f, const char *path, char *err,
                         size_t err_size)
{
    uint64_t base = gguf_get_data_offset(f->gguf), size = f->map_size;
    int64_t n = gguf_get_n_tensors(f->gguf);
    for (int64_t i = 0; i < n; i++) {
        const char *name = gguf_get_tensor_name(f->gguf, i);
        struct ggml_tensor *t = ggml_get_tensor(f->tensors, name);
        uint64_t at = gguf_get_tensor_offset(f->gguf, i);
        uint64_t bytes = t != NULL ? ggml_nbytes(t) : 0;
        if (t == NULL || base > size || at > size - base ||
            bytes > size - base - at)
            return g3_fail(err, err_size,
                           "%s is truncated: tensor %s ends past its %llu "
                           "bytes",
                           path, name ? name : "?",
                           (unsigned long long)size);
        t->data = (uint8_t *)f->map + base + at;
        f->tensor_bytes += bytes;
    }
    return 0;
}

int g3_file_open(g3_file *f, const char *path, char *err, size_t err_size)
{
    memset(f, 0, sizeof *f);
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return g3_fail(err, err_size, "cannot open %s", path);
    struct stat st;
    if (fstat(fileno(file), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(file);
        return g3_fail(err, err_size, "cannot read %s", path);
    }
    log_capture said = {""};
    ggml_log_callback old_log;
    void *old_user;
    ggml_log_get(&old_log, &old_user);
    ggml_log_set(capture_log, &said);
    struct gguf_init_params params = {true, &f->tensors};
    f->gguf = gguf_init_from_file_ptr(file, params);
    ggml_log_set(old_log, old_user);
    if (f->gguf == NULL) {
        fclose(file);
        return g3_fail(err, err_size, "%s is not a readable GGUF file: "
                       "not one, truncated or damaged (ggml: %s)", path,
                       *said.line ? said.line : "no reason given");
    }
    f->map_size = (size_t)st.st_size;
    f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fileno(file),
                  0);
    fclose(file);
    reader r = {f->gguf, err, err_size};
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        g3_fail(err, err_size, "cannot map %s", path);
    } else if (read_config(&r, &f->config) == 0 && read_vocab(&r, f) == 0 &&
               place_tensors(f, path, err, err_size) == 0) {
        return 0;
    }
    g3_file_close(f);
    return -1;
}

struct ggml_tensor *g3_file_tensor(const g3_file *f, const char *name,
                                   uint32_t ndim, const int64_t *ne, int f32,
                                   char *err, size_t err_size)
{
    struct ggml_tensor *t = ggml_get_tensor(f->tensors, name);
    if (t == NULL) {
        g3_fail(err, err_size, "no tensor %s in the file", name);
        return NULL;
    }
    int same = 1;
    for (uint32_t d = 0; d < GGML_MAX_DIMS; d++)
        same &= t->ne[d] == (d < ndim ? ne[d] : 1);
    /* A type ggml's CPU backend multiplies by an f32 row: the stored
     * quantizations (its dot product with a Q8 or f32 row exists). */
    int usable = f32 ? t->type == GGML_TYPE_F32
                     : ggml_get_type_traits_cpu(t->type)->vec_dot != NULL;
    if (!same || !usable) {
        g3_fail(err, err_size,
                "%s: %s [%lld %lld], expected %s[%lld %lld]", name,
                ggml_type_name(t->type), (long long)t->ne[0],
                (long long)t->ne[1], f32 ? "f32 " : "",
                (long long)ne[0], (long long)(ndim > 1 ? ne[1] : 1));
        return NULL;
    }
    return t;
}

void g3_file_close(g3_file *f)
{
    if (f->map != NULL)
        munmap(f->map, f->map_size);
    if (f->tensors != NULL)
        ggml_free(f->tensors);
    if (f->gguf != NULL)
        gguf_free(f->gguf);
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
        snprintf(path, n, "%s/gemma3/gemma-3-270m-q4_k_m.gguf", base);
    return path;
}
