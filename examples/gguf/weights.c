/* SPDX-License-Identifier: MIT */
/* The GGUF host's model file, read with ggml's gguf reader (weights.h). */
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

/* Sizes past these are not a model this host can run, whatever the file
 * says, and keep every product below in range. */
#define MAX_LAYERS 1024
#define MAX_WIDTH 65536    /* dim, heads * key length */
#define MAX_FFN 262144
#define MAX_VOCAB (1u << 24)
#define MAX_PIECE 65536 /* bytes of one vocabulary piece */
#define MAX_MERGES (1u << 24)

int gg_fail(char *err, size_t size, const char *fmt, ...)
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
        gg_fail(r->err, r->err_size, "no key %s in the file", name);
        return -1;
    }
    if (gguf_get_kv_type(r->g, id) != type) {
        gg_fail(r->err, r->err_size, "key %s is a %s, expected a %s", name,
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
            return gg_fail(r->err, r->err_size, "key %s is %d", name, v);
        *out = (uint32_t)v;
    } else {
        if ((id = key(r, name, GGUF_TYPE_UINT32)) < 0)
            return -1;
        *out = gguf_get_val_u32(r->g, id);
    }
    if (*out < lo || *out > hi)
        return gg_fail(r->err, r->err_size, "key %s is %u, not in %u..%u",
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
        return gg_fail(r->err, r->err_size, "key %s is %g, not in %g..%g",
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

/* A string key's value (in gguf's memory), or NULL with a message. */
static const char *get_string(reader *r, const char *name)
{
    int64_t id = key(r, name, GGUF_TYPE_STRING);
    return id < 0 ? NULL : gguf_get_val_str(r->g, id);
}

/* The keys of a model of this architecture, "<arch>.<name>": get_u32's or
 * get_f32's value, or *fallback where fallback is given and the key is
 * absent (an optional key). */
typedef struct arch_reader {
    reader *r;
    const char *arch;
    char name[128];
} arch_reader;

static const char *arch_key(arch_reader *a, const char *name)
{
    snprintf(a->name, sizeof a->name, "%s.%s", a->arch, name);
    return a->name;
}

static int arch_u32(arch_reader *a, const char *name, uint32_t lo,
                    uint32_t hi, const uint32_t *fallback, uint32_t *out)
{
    const char *k = arch_key(a, name);
    if (fallback != NULL && gguf_find_key(a->r->g, k) < 0) {
        *out = *fallback;
        return 0;
    }
    return get_u32(a->r, k, lo, hi, out);
}

static int arch_f32(arch_reader *a, const char *name, float lo, float hi,
                    const float *fallback, float *out)
{
    const char *k = arch_key(a, name);
    if (fallback != NULL && gguf_find_key(a->r->g, k) < 0) {
        *out = *fallback;
        return 0;
    }
    return get_f32(a->r, k, lo, hi, out);
}

/* The model's geometry. Gemma 3 has every key llama.cpp requires of it;
 * a llama model may leave out the head lengths (the width over the
 * heads), the RoPE base (llama.cpp's 10,000) and the window (none). */
static int read_geometry(reader *r, const char *arch, gg_file_config *c)
{
    arch_reader a = {r, arch, ""};
    int gemma = c->arch == GG_ARCH_GEMMA3;
    static const uint32_t none = 0;
    static const float llama_rope_base = 10000.0f;
    if (arch_u32(&a, "block_count", 1, MAX_LAYERS, NULL, &c->num_layers) ||
        arch_u32(&a, "embedding_length", 1, MAX_WIDTH, NULL, &c->dim) ||
        arch_u32(&a, "feed_forward_length", 1, MAX_FFN, NULL,
                 &c->ffn_dim) ||
        arch_u32(&a, "attention.head_count", 1, MAX_WIDTH, NULL,
                 &c->num_heads) ||
        arch_u32(&a, "attention.head_count_kv", 1, MAX_WIDTH, NULL,
                 &c->num_kv_heads) ||
        arch_u32(&a, "context_length", 1, UINT32_MAX, NULL,
                 &c->context_length) ||
        arch_f32(&a, "rope.freq_base", 1.0f, 1e12f,
                 gemma ? NULL : &llama_rope_base, &c->rope_base) ||
        arch_f32(&a, "attention.layer_norm_rms_epsilon", 1e-12f, 1.0f, NULL,
                 &c->rms_eps) ||
        arch_u32(&a, "attention.sliding_window", 1, UINT32_MAX,
                 gemma ? NULL : &none, &c->sliding_window))
        return -1;
    uint32_t head = c->dim / c->num_heads, rotated;
    if (arch_u32(&a, "attention.key_length", 1, MAX_WIDTH,
                 gemma ? NULL : &head, &c->key_len) ||
        arch_u32(&a, "attention.value_length", 1, MAX_WIDTH,
                 gemma ? NULL : &c->key_len, &c->value_len) ||
        arch_u32(&a, "rope.dimension_count", 1, MAX_WIDTH, &c->key_len,
                 &rotated))
        return -1;
    /* RoPE over part of a head (partial rotary) is not built. */
    if (rotated != c->key_len)
        return gg_fail(r->err, r->err_size, "key %s is %u, not the head's "
                       "%u: partial RoPE is not supported", a.name, rotated,
                       c->key_len);
    return 0;
}

static int read_config(reader *r, gg_file_config *c)
{
    const char *arch = get_string(r, "general.architecture");
    const char *model = arch ? get_string(r, "tokenizer.ggml.model") : NULL;
    if (model == NULL)
        return -1;
    if (strcmp(arch, "gemma3") == 0)
        c->arch = GG_ARCH_GEMMA3;
    else if (strcmp(arch, "llama") == 0)
        c->arch = GG_ARCH_LLAMA;
    else
        return gg_fail(r->err, r->err_size, "architecture \"%.40s\" is "
                       "not one this host runs (gemma3, llama)", arch);
    if (strcmp(model, "llama") == 0)
        c->vocab_kind = GG_VOCAB_SPM;
    else if (strcmp(model, "gpt2") == 0)
        c->vocab_kind = GG_VOCAB_BPE;
    else
        return gg_fail(r->err, r->err_size, "tokenizer model \"%.40s\" is "
                       "not one this host reads (llama, gpt2)", model);
    if (read_geometry(r, arch, c) != 0)
        return -1;
    /* bos and eos are needed; unk and pad may be absent (-1). */
    static const char *const id_keys[4] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    int32_t *ids[4] = {&c->bos, &c->eos, &c->unk, &c->pad};
    for (int i = 0; i < 4; i++) {
        uint32_t v;
        if (i >= 2 && gguf_find_key(r->g, id_keys[i]) < 0) {
            *ids[i] = -1;
            continue;
        }
        if (get_u32(r, id_keys[i], 0, MAX_VOCAB - 1, &v) != 0)
            return -1;
        *ids[i] = (int32_t)v;
    }
    c->pre = "default";
    if (gguf_find_key(r->g, "tokenizer.ggml.pre") >= 0 &&
        (c->pre = get_string(r, "tokenizer.ggml.pre")) == NULL)
        return -1;
    c->chat_template = NULL;
    if (gguf_find_key(r->g, "tokenizer.chat_template") >= 0 &&
        (c->chat_template = get_string(r, "tokenizer.chat_template")) ==
            NULL)
        return -1;
    /* llama.cpp's defaults: BOS and a space prefix for a SentencePiece
     * vocabulary, neither for a byte-level BPE one. */
    int spm = c->vocab_kind == GG_VOCAB_SPM;
    return get_bool(r, "tokenizer.ggml.add_bos_token", spm, &c->add_bos) ||
                   get_bool(r, "tokenizer.ggml.add_space_prefix", spm,
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
        gg_fail(r->err, r->err_size, "key %s: %zu values of %s, expected "
                "%zu of %s", name, got,
                gguf_type_name(gguf_get_arr_type(r->g, id)), *n,
                gguf_type_name(type));
        return -1;
    }
    *n = got;
    return id;
}

/* BPE's merges, each "left right" (split at its first space after the
 * first byte, as llama.cpp splits them). */
static int read_merges(reader *r, gg_file *f)
{
    size_t n = 0;
    int64_t merges = array(r, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &n);
    if (merges < 0)
        return -1;
    if (n > MAX_MERGES)
        return gg_fail(r->err, r->err_size, "%zu merges", n);
    f->config.num_merges = (uint32_t)n;
    f->merges = calloc(n + 1, sizeof *f->merges);
    if (f->merges == NULL)
        return gg_fail(r->err, r->err_size, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *text = gguf_get_arr_str(r->g, merges, i);
        size_t len = strlen(text);
        const char *space = len > 1 ? memchr(text + 1, ' ', len - 1) : NULL;
        if (space == NULL || len > MAX_PIECE)
            return gg_fail(r->err, r->err_size, "merge %zu is not two "
                           "pieces apart by a space", i);
        uint32_t left = (uint32_t)(space - text);
        f->merges[i] = (gg_merge){text, space + 1, left,
                                  (uint32_t)(len - left - 1)};
    }
    return 0;
}

static int read_vocab(reader *r, gg_file *f)
{
    size_t n = 0;
    int spm = f->config.vocab_kind == GG_VOCAB_SPM;
    int64_t tokens = array(r, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &n);
    if (tokens < 0)
        return -1;
    if (n == 0 || n > MAX_VOCAB)
        return gg_fail(r->err, r->err_size, "%zu vocabulary entries", n);
    /* SentencePiece merges by score; BPE by the merges' order. */
    int64_t scores = spm ? array(r, "tokenizer.ggml.scores",
                                 GGUF_TYPE_FLOAT32, &n)
                         : 0;
    int64_t types = scores < 0 ? -1
                               : array(r, "tokenizer.ggml.token_type",
                                       GGUF_TYPE_INT32, &n);
    if (types < 0 || (!spm && read_merges(r, f) != 0))
        return -1;
    f->config.vocab_size = (uint32_t)n;
    f->vocab = calloc(n, sizeof *f->vocab);
    if (f->vocab == NULL)
        return gg_fail(r->err, r->err_size, "out of memory");
    const float *score = spm ? gguf_get_arr_data(r->g, scores) : NULL;
    const int32_t *type = gguf_get_arr_data(r->g, types);
    for (size_t i = 0; i < n; i++) {
        const char *text = gguf_get_arr_str(r->g, tokens, i);
        size_t len = strlen(text);
        if (len > MAX_PIECE)
            return gg_fail(r->err, r->err_size, "vocabulary entry %zu has "
                           "%zu bytes", i, len);
        f->vocab[i] = (gg_piece){text, (uint32_t)len,
                                 score ? score[i] : 0.0f, type[i]};
    }
    const gg_file_config *c = &f->config;
    if ((uint32_t)c->bos >= n || (uint32_t)c->eos >= n ||
        (c->unk >= 0 && (uint32_t)c->unk >= n) ||
        (c->pad >= 0 && (uint32_t)c->pad >= n))
        return gg_fail(r->err, r->err_size, "a special token id is past "
                       "the %zu-entry vocabulary", n);
    return 0;
}

/* ------------------------------------------------------------ the file */

/* Point every tensor at its bytes in the map, each checked to lie inside
 * the file: ggml's reader does not read tensor data when asked not to
 * allocate, so a truncated file is found here. */
static int place_tensors(gg_file *f, const char *path, char *err,
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
            return gg_fail(err, err_size,
                           "%s is truncated: tensor %s ends past its %llu "
                           "bytes",
                           path, name ? name : "?",
                           (unsigned long long)size);
        t->data = (uint8_t *)f->map + base + at;
        f->tensor_bytes += bytes;
    }
    return 0;
}

int gg_file_open(gg_file *f, const char *path, char *err, size_t err_size)
{
    memset(f, 0, sizeof *f);
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return gg_fail(err, err_size, "cannot open %s", path);
    struct stat st;
    if (fstat(fileno(file), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(file);
        return gg_fail(err, err_size, "cannot read %s", path);
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
        return gg_fail(err, err_size, "%s is not a readable GGUF file: "
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
        gg_fail(err, err_size, "cannot map %s", path);
    } else if (read_config(&r, &f->config) == 0 && read_vocab(&r, f) == 0 &&
               place_tensors(f, path, err, err_size) == 0) {
        return 0;
    }
    gg_file_close(f);
    return -1;
}

struct ggml_tensor *gg_file_tensor(const gg_file *f, const char *name,
                                   uint32_t ndim, const int64_t *ne, int f32,
                                   char *err, size_t err_size)
{
    struct ggml_tensor *t = ggml_get_tensor(f->tensors, name);
    if (t == NULL) {
        gg_fail(err, err_size, "no tensor %s in the file", name);
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
        gg_fail(err, err_size,
                "%s: %s [%lld %lld], expected %s[%lld %lld]", name,
                ggml_type_name(t->type), (long long)t->ne[0],
                (long long)t->ne[1], f32 ? "f32 " : "",
                (long long)ne[0], (long long)(ndim > 1 ? ne[1] : 1));
        return NULL;
    }
    return t;
}

void gg_file_close(gg_file *f)
{
    if (f->map != NULL)
        munmap(f->map, f->map_size);
    if (f->tensors != NULL)
        ggml_free(f->tensors);
    if (f->gguf != NULL)
        gguf_free(f->gguf);
    free(f->vocab);
    free(f->merges);
    memset(f, 0, sizeof *f);
}

const gg_known_model gg_known_models[] = {
    {"gemma3", "gemma3/gemma-3-270m-q4_k_m.gguf"},
    {"smollm2", "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
};
const uint32_t gg_num_known_models =
    sizeof gg_known_models / sizeof gg_known_models[0];

char *gg_default_weights_path(const char *name)
{
    const char *file = NULL;
    for (uint32_t i = 0; i < gg_num_known_models; i++)
        if (strcmp(name, gg_known_models[i].name) == 0)
            file = gg_known_models[i].file;
    if (file == NULL)
        return NULL;
    const char *cache = getenv("PKV_CACHE"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char base[4096];
    if (cache != NULL && *cache)
        snprintf(base, sizeof base, "%s", cache);
    else if (xdg != NULL && *xdg)
        snprintf(base, sizeof base, "%s/pkv", xdg);
    else
        snprintf(base, sizeof base, "%s/.cache/pkv", home ? home : ".");
    size_t n = strlen(base) + strlen(file) + 2;
    char *path = malloc(n);
    if (path != NULL)
        snprintf(path, n, "%s/%s", base, file);
    return path;
}
