/* SPDX-License-Identifier: MIT */
/*
 * pkv-llama: a llama-architecture host serving many prompts at once through
 * pkv. Requests arrive while the engine runs (a few per step), every step's
 * batch mixes prompt chunks and decodes, and each sequence's tokens are
 * printed as they are sampled, prefixed by its id.
 *
 *   pkv-llama [--checkpoint model.bin] [--prompts FILE] [--kv f32|f16|u8|u4|u8k-u4v]
 *             [--backend auto|cpu|opencl] [--requests N] [--max-new N]
 *             [--temperature T] [--seed S] [--blocks N] [--stop ID]
 *             [--dense] [--quiet]
 *
 * Without --checkpoint the model has seeded random weights and the prompts
 * are synthetic: a shared 48-token system prompt, then a user part of
 * lognormal length, so prefix caching shows. Token ids in, token ids out:
 * there is no tokenizer. --prompts reads one prompt per line as ids.
 * --dense runs the same requests with plain dense attention computed here,
 * one after another, without pkv: the reference.
 */
#include "args.h"
#include "attend.h"
#include "model.h"
#include "sample.h"
#include "serve.h"

#include <pkv/pkv.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYSTEM_PROMPT_LEN 48
#define ARRIVALS_PER_STEP 4

typedef struct options {
    const char *checkpoint;
    const char *prompts;
    int32_t kv_dtype;
    int32_t backend;
    uint32_t requests;
    uint32_t max_new;
    float temperature;
    uint64_t seed;
    uint32_t blocks;
    int32_t stop;
    int dense;
    int quiet;  /* the summary only */
    int tokens; /* stream "[id] token" lines instead of one line per step */
} options;

static int usage(void)
{
    fprintf(stderr,
            "usage: pkv-llama [--checkpoint PATH] [--prompts FILE] "
            "[--kv f32|f16|u8|u4|u8k-u4v]\n"
            "                 [--backend auto|cpu|opencl] [--requests N] "
            "[--max-new N]\n"
            "                 [--temperature T] [--seed S] [--blocks N] "
            "[--stop ID]\n"
            "                 [--dense] [--quiet | --tokens]\n"
            "One status line per step (running, waiting, swapped, preempted,\n"
            "KV use, tokens/s), then a summary; --tokens streams every\n"
            "sampled token as \"[id] token\" instead, --quiet prints the\n"
            "summary only.\n");
    return 2;
}

static int bad_arg(const char *arg, const char *value, const char *takes)
{
    return host_bad_arg("pkv-llama", arg, value, takes);
}

static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->kv_dtype = PKV_KV_DTYPE_F16;
    o->backend = PKV_BACKEND_KIND_AUTO;
    o->requests = 32;
    o->max_new = 64;
    o->seed = 42;
    o->stop = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t u;
        if (strcmp(a, "--dense") == 0) {
            o->dense = 1;
            continue;
        }
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(a, "--tokens") == 0) {
            o->tokens = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return -1;
        int known = 0;
        static const char *const with_value[] = {
            "--checkpoint", "--prompts", "--kv",          "--backend",
            "--requests",   "--max-new", "--blocks",      "--seed",
            "--stop",       "--temperature"};
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= strcmp(a, with_value[k]) == 0;
        if (!known) {
            fprintf(stderr, "pkv-llama: unknown option %s\n", a);
            return -1;
        }
        if (v == NULL)
            return bad_arg(a, NULL, "see --help");
        i++;
        if (strcmp(a, "--checkpoint") == 0) {
            o->checkpoint = v;
        } else if (strcmp(a, "--prompts") == 0) {
            o->prompts = v;
        } else if (strcmp(a, "--kv") == 0) {
            if (host_parse_kv(v, &o->kv_dtype) != 0)
                return bad_arg(a, v, "f32, f16, u8, u4 or u8k-u4v");
        } else if (strcmp(a, "--backend") == 0) {
            if (host_parse_backend(v, &o->backend) != 0)
                return bad_arg(a, v, "auto, cpu or opencl");
        } else if (strcmp(a, "--temperature") == 0) {
            char *end;
            o->temperature = strtof(v, &end);
            if (*end || end == v || !(o->temperature >= 0))
                return bad_arg(a, v, "a number >= 0");
        } else if (host_parse_u32(v, &u) != 0 ||
                   (u == 0 && (strcmp(a, "--requests") == 0 ||
                               strcmp(a, "--max-new") == 0))) {
            return bad_arg(a, v,
                           strcmp(a, "--requests") == 0 ||
                                   strcmp(a, "--max-new") == 0
                               ? "a whole number >= 1"
                               : "a whole number >= 0");
        } else if (strcmp(a, "--requests") == 0) {
            o->requests = u;
        } else if (strcmp(a, "--max-new") == 0) {
            o->max_new = u;
        } else if (strcmp(a, "--blocks") == 0) {
            o->blocks = u;
        } else if (strcmp(a, "--seed") == 0) {
            o->seed = u;
        } else {
            o->stop = (int32_t)u; /* --stop */
        }
    }
    return 0;
}

/* The synthetic prompt set: a shared system prompt, then a user part. */
static int make_prompts(const options *o, const llama_config *c,
                        host_request *reqs)
{
    uint64_t rng = o->seed * 0x2545f4914f6cdd1dull + 1;
    int32_t system[SYSTEM_PROMPT_LEN];
    for (uint32_t t = 0; t < SYSTEM_PROMPT_LEN; t++)
        system[t] = (int32_t)(host_rand(&rng) % c->vocab_size);
    for (uint32_t i = 0; i < o->requests; i++) {
        host_request *r = &reqs[i];
        uint32_t user = host_lognormal_len(&rng, 40, 0.8, 4, 400);
        r->prompt_len = SYSTEM_PROMPT_LEN + user;
        r->prompt = malloc(r->prompt_len * sizeof *r->prompt);
        if (r->prompt == NULL)
            return -1;
        memcpy(r->prompt, system, sizeof system);
        for (uint32_t t = 0; t < user; t++)
            r->prompt[SYSTEM_PROMPT_LEN + t] =
                (int32_t)(host_rand(&rng) % c->vocab_size);
        r->max_new =
            host_lognormal_len(&rng, o->max_new / 2.0, 0.6, 1, o->max_new);
    }
    return 0;
}

/* One prompt per line of token ids; *count is how many were read. */
static int read_prompts(const options *o, const llama_config *c,
                        host_request **out, uint32_t *count)
{
    FILE *f = fopen(o->prompts, "r");
    if (f == NULL) {
        fprintf(stderr, "pkv-llama: cannot open %s\n", o->prompts);
        return -1;
    }
    host_request *reqs = NULL;
    uint32_t n = 0;
    char line[65536];
    uint32_t line_no = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        line_no++;
        line[strcspn(line, "\r\n")] = '\0';
        host_request r;
        memset(&r, 0, sizeof r);
        r.prompt = malloc(sizeof line / 2 * sizeof *r.prompt);
        char *p = line, *end;
        while (r.prompt != NULL) {
            long id = strtol(p, &end, 10);
            if (end == p) {
                while (isspace((unsigned char)*p))
                    p++;
                if (*p == '\0')
                    break; /* the end of the line */
                fprintf(stderr,
                        "pkv-llama: %s line %u: \"%.20s\" is not a token "
                        "id\n",
                        o->prompts, (unsigned)line_no, p);
                free(r.prompt);
                r.prompt = NULL;
                break;
            }
            if (id < 0 || (unsigned long)id >= c->vocab_size) {
                fprintf(stderr,
                        "pkv-llama: %s line %u: token %ld is not in 0..%u\n",
                        o->prompts, (unsigned)line_no, id,
                        (unsigned)c->vocab_size - 1);
                free(r.prompt);
                r.prompt = NULL;
                break;
            }
            r.prompt[r.prompt_len++] = (int32_t)id;
            p = end;
        }
        if (r.prompt == NULL) {
            fclose(f);
            return -1;
        }
        if (r.prompt_len == 0) {
            free(r.prompt);
            continue;
        }
        r.max_new = o->max_new;
        host_request *grown = realloc(reqs, (n + 1) * sizeof *reqs);
        if (grown == NULL) {
            free(r.prompt);
            fclose(f);
            return -1;
        }
        reqs = grown;
        reqs[n++] = r;
    }
    fclose(f);
    *out = reqs;
    *count = n;
    return n > 0 ? 0 : -1;
}

/* ------------------------------------------------------------ pkv serving */

/* --tokens: "[id] token" per sampled token, "[id] done: ..." at the end. */
static void print_token(void *user, uint32_t index, int32_t token)
{
    const host_request *reqs = user;
    printf("[%llu] %d\n", (unsigned long long)reqs[index].id, token);
}

static void print_finish(void *user, uint32_t index, const pkv_finished *f)
{
    (void)user;
    (void)index;
    printf("[%llu] done: %s, %u tokens\n", (unsigned long long)f->id,
           host_reason_name(f->reason), f->num_generated);
}

static int serve_pkv(const options *o, const llama_model *m,
                     host_request *reqs, uint32_t n)
{
    const llama_config *c = &m->config;
    pkv_engine_params p;
    llama_engine_params(&p, c);
    p.kv_dtype = o->kv_dtype;
    p.backend = o->backend;
    p.max_batch_tokens = 512;
    p.max_num_seqs = 64;
    if (o->blocks) {
        p.num_blocks = o->blocks;
    } else {
        /* Room for about 8 average sequences besides one of the longest:
         * a busy server, where the scheduler preempts and resumes. */
        p.num_blocks = 8 * (SYSTEM_PROMPT_LEN + 40 + o->max_new / 2) / 16 +
                       c->seq_len / 16 + 2;
    }
    p.log = host_log_stderr;
    p.log_level = PKV_LOG_LEVEL_WARN;
    pkv_engine *e = NULL;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "pkv-llama: engine: %s\n", pkv_last_error());
        return 1;
    }
    llama_host h;
    if (llama_host_init(&h, m, p.max_batch_tokens) != 0) {
        fprintf(stderr, "pkv-llama: out of memory\n");
        pkv_engine_destroy(e);
        return 1;
    }
    host_serve_options so = {0};
    so.temperature = o->temperature;
    so.top_p = 1;
    so.arrivals_per_step = ARRIVALS_PER_STEP;
    so.stop = &o->stop;
    so.num_stop = o->stop >= 0;
    so.status = o->quiet || o->tokens ? HOST_STATUS_NONE : HOST_STATUS_LINES;
    if (o->tokens) {
        so.on_token = print_token;
        so.on_finish = print_finish;
        so.user = reqs;
    }
    host_serve_result r;
    int rc = host_serve(e, &h.model, reqs, n, &so, &r);
    host_print_summary("pkv-llama", e, &p, n, &r);
    llama_host_free(&h);
    pkv_engine_destroy(e);
    return rc;
}

/* ----------------------------------------------------------- dense serving */

static int serve_dense(const options *o, const llama_model *m, host_request *reqs,
                       uint32_t n)
{
    const llama_config *c = &m->config;
    llama_dense_cache d;
    llama_scratch s;
    int32_t *out = malloc(o->max_new * sizeof *out);
    if (out == NULL || llama_dense_cache_init(&d, c) != 0 ||
        llama_scratch_init(&s, c, c->seq_len) != 0) {
        fprintf(stderr, "pkv-llama: out of memory\n");
        return 1;
    }
    uint64_t generated = 0, processed = 0;
    int rc = 0;
    double t0 = host_now_s();
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        host_request *r = &reqs[i];
        int got = llama_dense_generate(m, &s, &d, r->prompt, r->prompt_len,
                                       r->max_new, o->temperature, &r->rng,
                                       o->stop, out, &processed);
        if (got < 0) {
            fprintf(stderr, "pkv-llama: request %u does not fit\n", i);
            rc = 1;
            break;
        }
        generated += (uint64_t)got;
        for (int t = 0; t < got && o->tokens; t++)
            printf("[%u] %d\n", i + 1, out[t]);
    }
    double elapsed = host_now_s() - t0;
    printf("\npkv-llama --dense: %u requests one after another, %llu tokens "
           "generated, %llu processed in %.2f s\n",
           n, (unsigned long long)generated, (unsigned long long)processed,
           elapsed);
    printf("tokens/s:         %.1f generated, %.1f processed\n",
           (double)generated / elapsed, (double)processed / elapsed);
    printf("backend:          none (dense attention in the host, no pkv)\n");
    free(out);
    llama_dense_cache_free(&d);
    llama_scratch_free(&s);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o) != 0)
        return usage();
    llama_model m;
    if (o.checkpoint != NULL) {
        char err[512];
        if (llama_model_load(&m, o.checkpoint, err, sizeof err) != 0) {
            fprintf(stderr, "pkv-llama: %s\n", err);
            return 1;
        }
    } else {
        llama_config c = llama_default_config();
        if (llama_model_init_random(&m, &c, o.seed) != 0) {
            fprintf(stderr, "pkv-llama: out of memory\n");
            return 1;
        }
    }
    const llama_config *c = &m.config;
    if (llama_head_dim(c) % 4 != 0) {
        fprintf(stderr, "pkv-llama: head_dim %u: pkv needs a multiple of 4\n",
                llama_head_dim(c));
        llama_model_free(&m);
        return 1;
    }
    host_request *reqs = NULL;
    uint32_t n = o.requests;
    int rc = 1;
    if (o.prompts != NULL) {
        if (read_prompts(&o, c, &reqs, &n) != 0) {
            fprintf(stderr, "pkv-llama: no prompts read from %s\n", o.prompts);
            goto done;
        }
    } else {
        reqs = calloc(n, sizeof *reqs);
        if (reqs == NULL || make_prompts(&o, c, reqs) != 0)
            goto done;
    }
    for (uint32_t i = 0; i < n; i++)
        reqs[i].rng = o.seed ^ (0x9e3779b97f4a7c15ull * (i + 1));
    printf("pkv-llama: dim %u, %u layers, %u heads (%u kv), hidden %u, vocab "
           "%u, %s weights; %u requests, temperature %.2f, seed %llu\n",
           c->dim, c->num_layers, c->num_heads, c->num_kv_heads,
           c->hidden_dim, c->vocab_size,
           o.checkpoint ? o.checkpoint : "seeded random", n,
           (double)o.temperature, (unsigned long long)o.seed);
    rc = o.dense ? serve_dense(&o, &m, reqs, n) : serve_pkv(&o, &m, reqs, n);
done:
    for (uint32_t i = 0; reqs != NULL && i < n; i++)
        free(reqs[i].prompt);
    free(reqs);
    llama_model_free(&m);
    return rc;
}
