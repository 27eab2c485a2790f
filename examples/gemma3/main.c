/* SPDX-License-Identifier: MIT */
/*
 * pkv-gemma3: Gemma 3 270M served through pkv, text in and text out.
 *
 *   pkv-gemma3 [--weights PATH] [--kv f32|f16|u8|u4|u8k-u4v]
 *              [--backend auto|cpu|opencl]
 *              [--prompt TEXT | --file PATH] [--max-new N]
 *              [--temperature T] [--top-p P] [--seed S] [--threads N]
 *              [--json] [--quiet] [--store HOST:PORT]
 *   pkv-gemma3 --prompt-ids PATH [--logits PATH [--logits-from K]] ...
 *   pkv-gemma3 --perplexity PATH [--ctx N] [--max-tokens N] [--kv ...]
 *              [--keys channel|token]
 *   pkv-gemma3 --agreement [--max-new N] [--kv ...]
 *
 * Without --prompt or --file it serves the demo's 32 requests at once (a
 * shared preamble, then a topic each: prompts.c), printing each answer as
 * it finishes under a status line. With one prompt it streams the answer.
 * --prompt-ids reads the prompt as token ids; with --logits it writes the
 * logits of its positions K.. instead of generating (the tests compare
 * them with tests/gemma3/reference.py). --perplexity and --agreement
 * measure the KV formats (score.h). --store shares prompt blocks with
 * other processes through a Redis server (host/store.h): a second
 * pkv-gemma3 loads the prompt blocks the first computed. --weights is the
 * model's GGUF (default: where examples/gemma3/setup.sh puts it);
 * --threads the threads of its matrix products (default: every core).
 */
#define _POSIX_C_SOURCE 200809L /* fileno, isatty */
#include "args.h"
#include "host.h"
#include "prompts.h"
#include "score.h"
#include "store.h"
#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK_SIZE 16

typedef struct options {
    const char *weights;
    const char *prompt;
    const char *file;
    const char *prompt_ids;
    const char *logits;
    uint32_t logits_from;
    const char *perplexity;
    int agreement;
    int32_t kv_dtype;
    int32_t key_quant;
    int32_t backend;
    uint32_t max_new;
    uint32_t ctx;
    uint32_t max_tokens;
    float temperature;
    float top_p;
    uint64_t seed;
    uint32_t threads;
    int json;
    int quiet;
    const char *store; /* HOST:PORT of a Redis sharing blocks, or NULL */
} options;

/* A request's text: its prompt for printing and its answer so far. */
typedef struct text_request {
    const char *label;
    char *answer;
    size_t len, cap;
    int32_t *tokens;
    uint32_t num_tokens;
    int32_t finish;
} text_request;

typedef struct run {
    const options *o;
    const g3_tokenizer *tok;
    text_request *texts;
    uint32_t n;
    int stream; /* one request: print its tokens as they come */
} run;

static int usage(void)
{
    fprintf(stderr,
            "usage: pkv-gemma3 [--weights PATH] [--kv f32|f16|u8|u4|u8k-u4v] "
            "[--backend auto|cpu|opencl]\n"
            "                  [--prompt TEXT | --file PATH] [--max-new N] "
            "[--temperature T]\n"
            "                  [--top-p P] [--seed S] [--threads N] [--json] "
            "[--quiet]\n"
            "                  [--store HOST:PORT]\n"
            "       pkv-gemma3 --prompt-ids PATH [--logits PATH "
            "[--logits-from K]] ...\n"
            "       pkv-gemma3 --perplexity PATH [--ctx N] [--max-tokens N] "
            "[--kv ...]\n"
            "                  [--keys channel|token]\n"
            "       pkv-gemma3 --agreement [--max-new N] [--kv ...]\n"
            "Without --prompt or --file: the demo's 32 requests at once.\n"
            "Weights: the GGUF that sh examples/gemma3/setup.sh downloads\n"
            "(default path: $PKV_CACHE/gemma3/gemma-3-270m-q4_k_m.gguf,\n"
            "PKV_CACHE defaulting to ~/.cache/pkv).\n");
    return 2;
}

static int bad_arg(const char *arg, const char *value, const char *takes)
{
    return host_bad_arg("pkv-gemma3", arg, value, takes);
}

static int parse_float(const char *s, float lo, float hi, float *out)
{
    char *end;
    float v = strtof(s, &end);
    if (*end || end == s || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

/* One option with a value; returns -1 on a bad value. */
static int parse_value(options *o, const char *a, const char *v)
{
    uint32_t u;
    if (strcmp(a, "--weights") == 0) {
        o->weights = v;
    } else if (strcmp(a, "--prompt") == 0) {
        o->prompt = v;
    } else if (strcmp(a, "--store") == 0) {
        o->store = v;
    } else if (strcmp(a, "--file") == 0) {
        o->file = v;
    } else if (strcmp(a, "--prompt-ids") == 0) {
        o->prompt_ids = v;
    } else if (strcmp(a, "--logits") == 0) {
        o->logits = v;
    } else if (strcmp(a, "--perplexity") == 0) {
        o->perplexity = v;
    } else if (strcmp(a, "--kv") == 0) {
        if (host_parse_kv(v, &o->kv_dtype) != 0)
            return bad_arg(a, v, "f32, f16, u8, u4 or u8k-u4v");
    } else if (strcmp(a, "--keys") == 0) {
        if (strcmp(v, "channel") == 0)
            o->key_quant = PKV_QUANT_PER_CHANNEL;
        else if (strcmp(v, "token") == 0)
            o->key_quant = PKV_QUANT_PER_TOKEN;
        else
            return bad_arg(a, v, "channel or token");
    } else if (strcmp(a, "--backend") == 0) {
        if (host_parse_backend(v, &o->backend) != 0)
            return bad_arg(a, v, "auto, cpu or opencl");
    } else if (strcmp(a, "--temperature") == 0) {
        if (parse_float(v, 0, 100, &o->temperature) != 0)
            return bad_arg(a, v, "a number >= 0");
    } else if (strcmp(a, "--top-p") == 0) {
        if (parse_float(v, 0, 1, &o->top_p) != 0 || o->top_p == 0)
            return bad_arg(a, v, "a number in (0, 1]");
    } else if (host_parse_u32(v, &u) != 0 ||
               (u == 0 && strcmp(a, "--seed") != 0 &&
                strcmp(a, "--threads") != 0 &&
                strcmp(a, "--logits-from") != 0)) {
        return bad_arg(a, v, "a whole number >= 1");
    } else if (strcmp(a, "--max-new") == 0) {
        o->max_new = u;
    } else if (strcmp(a, "--ctx") == 0) {
        o->ctx = u;
    } else if (strcmp(a, "--max-tokens") == 0) {
        o->max_tokens = u;
    } else if (strcmp(a, "--seed") == 0) {
        o->seed = u;
    } else if (strcmp(a, "--logits-from") == 0) {
        o->logits_from = u;
    } else {
        o->threads = u; /* --threads */
    }
    return 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->kv_dtype = PKV_KV_F16;
    o->backend = PKV_BACKEND_AUTO;
    o->max_new = 48;
    o->ctx = 512;
    o->max_tokens = 4096;
    o->top_p = 1;
    o->seed = 42;
    static const char *const with_value[] = {
        "--weights", "--prompt",      "--file",  "--perplexity",
        "--kv",      "--backend",     "--max-new", "--ctx",
        "--max-tokens", "--temperature", "--top-p", "--seed",
        "--threads", "--keys", "--prompt-ids", "--logits",
        "--logits-from", "--store"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
            continue;
        }
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(a, "--agreement") == 0) {
            o->agreement = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return -1;
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= strcmp(a, with_value[k]) == 0;
        if (!known) {
            fprintf(stderr, "pkv-gemma3: unknown option %s\n", a);
            return -1;
        }
        if (v == NULL)
            return bad_arg(a, NULL, "see --help");
        i++;
        if (parse_value(o, a, v) != 0)
            return -1;
    }
    if ((o->prompt != NULL) + (o->file != NULL) + (o->prompt_ids != NULL) >
        1) {
        fprintf(stderr, "pkv-gemma3: --prompt, --file and --prompt-ids "
                        "exclude each other\n");
        return -1;
    }
    if (o->logits != NULL && o->prompt_ids == NULL) {
        fprintf(stderr, "pkv-gemma3: --logits needs --prompt-ids\n");
        return -1;
    }
    return 0;
}

/* Whitespace-separated token ids, each below vocab. NULL after printing
 * why. */
static int32_t *read_ids(const char *path, uint32_t vocab, uint32_t *n)
{
    size_t len;
    char *text = host_read_file(path, &len);
    if (text == NULL) {
        fprintf(stderr, "pkv-gemma3: cannot read %s\n", path);
        return NULL;
    }
    int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
    char *p = text, *end;
    *n = 0;
    while (ids != NULL) {
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p)
            break;
        if (errno || id < 0 || (unsigned long)id >= vocab) {
            fprintf(stderr, "pkv-gemma3: %s: token %ld is not in 0..%u\n",
                    path, id, vocab - 1);
            free(ids);
            ids = NULL;
            break;
        }
        ids[(*n)++] = (int32_t)id;
        p = end;
    }
    while (ids != NULL && (*p == ' ' || *p == '\n' || *p == '\t' ||
                           *p == '\r'))
        p++;
    if (ids != NULL && (*p != '\0' || *n == 0)) {
        fprintf(stderr, "pkv-gemma3: %s: not a list of token ids\n", path);
        free(ids);
        ids = NULL;
    }
    free(text);
    return ids;
}

static int append(text_request *t, const char *bytes, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = 2 * t->cap + n + 64;
        char *grown = realloc(t->answer, cap);
        if (grown == NULL)
            return -1;
        t->answer = grown;
        t->cap = cap;
    }
    memcpy(t->answer + t->len, bytes, n);
    t->len += n;
    t->answer[t->len] = '\0';
    return 0;
}

static void on_token(void *user, uint32_t index, int32_t token)
{
    run *r = user;
    text_request *t = &r->texts[index];
    char piece[64];
    size_t n = g3_detokenize(r->tok, token, piece, sizeof piece);
    int32_t *grown =
        realloc(t->tokens, (t->num_tokens + 1) * sizeof *t->tokens);
    if (grown != NULL) {
        t->tokens = grown;
        t->tokens[t->num_tokens++] = token;
    }
    append(t, piece, n);
    if (r->stream && !r->o->json) {
        fwrite(piece, 1, n, stdout);
        fflush(stdout);
    }
}

static void on_finish(void *user, uint32_t index, const pkv_finished *f)
{
    run *r = user;
    text_request *t = &r->texts[index];
    t->finish = f->reason;
    if (r->stream || r->o->json || r->o->quiet)
        return;
    printf("[%u] %s:%s\n", index + 1, t->label, t->answer ? t->answer : "");
}

/* A JSON string. */
static void json_string(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void print_json(const run *r, pkv_engine *e, const host_serve_result *s)
{
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    pkv_engine_get_stats(e, &st);
    printf("{\"backend\": \"%s\", \"requests\": [", pkv_engine_backend_name(e));
    for (uint32_t i = 0; i < r->n; i++) {
        const text_request *t = &r->texts[i];
        printf("%s\n  {\"prompt\": ", i ? "," : "");
        json_string(t->label, strlen(t->label));
        printf(", \"finish\": \"%s\", \"text\": ", host_reason_name(t->finish));
        json_string(t->answer ? t->answer : "", t->len);
        printf(", \"tokens\": [");
        for (uint32_t k = 0; k < t->num_tokens; k++)
            printf("%s%d", k ? ", " : "", t->tokens[k]);
        printf("]}");
    }
    printf("],\n \"generated\": %llu, \"processed\": %llu, \"seconds\": %.3f, "
           "\"tokens_per_s\": %.2f, \"prefix_hit_tokens\": %llu, "
           "\"prefix_query_tokens\": %llu, \"preemptions\": %llu}\n",
           (unsigned long long)s->generated, (unsigned long long)s->processed,
           s->elapsed, (double)s->generated / s->elapsed,
           (unsigned long long)st.prefix_hit_tokens,
           (unsigned long long)st.prefix_query_tokens,
           (unsigned long long)st.preemptions);
}

/* The requests: --prompt, --file, or the demo's. Labels point into the
 * options or the demo's topics; prompts are token arrays. */
static int make_requests(const options *o, const g3_tokenizer *tok,
                         host_request **out_reqs, text_request **out_texts,
                         uint32_t *out_n, char **file_text)
{
    uint32_t n = o->prompt || o->file || o->prompt_ids ? 1
                                                       : g3_demo_num_topics;
    host_request *reqs = calloc(n, sizeof *reqs);
    text_request *texts = calloc(n, sizeof *texts);
    *out_reqs = reqs;
    *out_texts = texts;
    *out_n = n;
    if (reqs == NULL || texts == NULL)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        char demo[512];
        const char *text;
        size_t len;
        if (o->prompt_ids != NULL) {
            texts[i].label = o->prompt_ids;
            reqs[i].prompt = read_ids(o->prompt_ids, tok->n,
                                      &reqs[i].prompt_len);
            if (reqs[i].prompt == NULL)
                return -1;
            reqs[i].max_new = o->max_new;
            reqs[i].rng = o->seed ^ 0x9e3779b97f4a7c15ull;
            continue;
        }
        if (o->prompt != NULL) {
            text = texts[i].label = o->prompt;
            len = strlen(text);
        } else if (o->file != NULL) {
            *file_text = host_read_file(o->file, &len);
            if (*file_text == NULL) {
                fprintf(stderr, "pkv-gemma3: cannot read %s\n", o->file);
                return -1;
            }
            text = *file_text;
            texts[i].label = o->file;
        } else {
            texts[i].label = g3_demo_topics[i];
            len = (size_t)snprintf(demo, sizeof demo, "%sTopic: %s\nEntry:",
                                   g3_demo_preamble, g3_demo_topics[i]);
            text = demo;
        }
        reqs[i].prompt = malloc((len + 2) * sizeof *reqs[i].prompt);
        if (reqs[i].prompt == NULL)
            return -1;
        int got = g3_tokenize(tok, text, len, 1, reqs[i].prompt,
                              (uint32_t)len + 2);
        if (got <= 0)
            return -1;
        reqs[i].prompt_len = (uint32_t)got;
        reqs[i].max_new = o->max_new;
        reqs[i].rng = o->seed ^ (0x9e3779b97f4a7c15ull * (i + 1));
    }
    return 0;
}

static int serve(const options *o, g3_model *m, const g3_tokenizer *tok)
{
    host_request *reqs = NULL;
    text_request *texts = NULL;
    char *file_text = NULL;
    uint32_t n = 0;
    int rc = 1;
    pkv_engine *e = NULL;
    g3_host h = {0};
    host_store store = {0};
    /* The weights' name for the store's keys: this model, this file. */
    if (o->store != NULL &&
        host_store_open(&store, "pkv-gemma3", o->store,
                        "gemma-3-270m/q4_k_m-on-ggml") != 0)
        goto out;
    if (make_requests(o, tok, &reqs, &texts, &n, &file_text) != 0) {
        fprintf(stderr, "pkv-gemma3: cannot make the requests\n");
        goto out;
    }
    pkv_engine_params p;
    uint32_t longest = 0, blocks = 1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = reqs[i].prompt_len + reqs[i].max_new;
        longest = len > longest ? len : longest;
        blocks += (len + BLOCK_SIZE - 1) / BLOCK_SIZE;
    }
    g3_engine_params(&p, m, longest);
    p.kv_dtype = o->kv_dtype;
    p.key_quant = o->key_quant;
    p.backend = o->backend;
    p.block_size = BLOCK_SIZE;
    p.num_blocks = blocks;
    p.max_batch_tokens = 256;
    p.log = host_log_stderr;
    p.log_level = PKV_LOG_WARN;
    p.store = o->store != NULL ? &store.store : NULL;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "pkv-gemma3: engine: %s\n", pkv_last_error());
        goto out;
    }
    if (g3_host_init(&h, m, p.max_batch_tokens) != 0) {
        fprintf(stderr, "pkv-gemma3: out of memory\n");
        goto out;
    }
    run r = {o, tok, texts, n, n == 1};
    host_serve_options so = {0};
    so.temperature = o->temperature;
    so.top_p = o->top_p;
    so.stop = &m->config.eos;
    so.num_stop = 1;
    so.status = o->json || o->quiet || r.stream ? HOST_STATUS_NONE
                : isatty(fileno(stdout))       ? HOST_STATUS_LIVE
                                               : HOST_STATUS_LINES;
    so.on_token = on_token;
    so.on_finish = on_finish;
    so.user = &r;
    if (r.stream && !o->json)
        printf("%s", o->prompt ? o->prompt : "");
    host_serve_result s;
    rc = host_serve(e, &h.model, reqs, n, &so, &s);
    if (r.stream && !o->json)
        putchar('\n');
    if (o->json)
        print_json(&r, e, &s);
    else
        host_print_summary("pkv-gemma3", e, &p, n, &s);
    if (o->store != NULL && !o->json)
        host_store_print(e);
out:
    for (uint32_t i = 0; i < n; i++) {
        free(reqs[i].prompt);
        free(texts[i].answer);
        free(texts[i].tokens);
    }
    free(reqs);
    free(texts);
    free(file_text);
    g3_host_free(&h);
    pkv_engine_destroy(e);
    host_store_close(&store);
    return rc;
}

static int dump_logits(const options *o, g3_model *m, const g3_tokenizer *tok,
                       const g3_kv_choice *kv)
{
    uint32_t n;
    int32_t *ids = read_ids(o->prompt_ids, tok->n, &n);
    if (ids == NULL)
        return 1;
    int rc = g3_score_logits(m, ids, n, o->logits_from, kv, o->logits);
    free(ids);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o) != 0)
        return usage();
    char *path = o.weights ? NULL : g3_default_weights_path();
    const char *weights = o.weights ? o.weights : path;
    g3_model m;
    g3_tokenizer tok;
    char err[512];
    if (weights == NULL ||
        g3_model_load(&m, weights, o.threads, err, sizeof err) != 0) {
        fprintf(stderr, "pkv-gemma3: %s\n(sh examples/gemma3/setup.sh "
                        "downloads the model)\n",
                weights ? err : "out of memory");
        free(path);
        return 1;
    }
    free(path);
    if (g3_tokenizer_init(&tok, m.file.vocab, m.config.vocab_size, &m.config,
                          err, sizeof err) != 0) {
        fprintf(stderr, "pkv-gemma3: tokenizer: %s\n", err);
        g3_model_free(&m);
        return 1;
    }
    g3_kv_choice kv = {o.kv_dtype, o.key_quant, o.backend};
    int rc;
    if (o.logits != NULL)
        rc = dump_logits(&o, &m, &tok, &kv);
    else if (o.perplexity != NULL)
        rc = g3_score_perplexity(&m, &tok, o.perplexity, o.ctx, o.max_tokens,
                                 &kv);
    else if (o.agreement)
        rc = g3_score_agreement(&m, &tok, o.max_new, &kv);
    else
        rc = serve(&o, &m, &tok);
    g3_tokenizer_free(&tok);
    g3_model_free(&m);
    return rc;
}
