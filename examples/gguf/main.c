/* SPDX-License-Identifier: MIT */
/*
 * pkv-gguf: a GGUF model served through pkv, text in and text out: Gemma 3
 * (the 270M base model) or a llama-architecture model (SmolLM2-135M-
 * Instruct), the architecture read from the file.
 *
 *   pkv-gguf [--model gemma3|smollm2 | --weights PATH]
 *            [--kv f32|f16|u8|u4|u8k-u4v] [--backend auto|cpu|opencl]
 *            [--prompt TEXT | --file PATH] [--chat] [--system TEXT]
 *            [--parse-special] [--max-new N] [--ctx N]
 *            [--temperature T] [--top-p P] [--seed S] [--threads N]
 *            [--json] [--quiet] [--store HOST:PORT] [--every-token]
 *            [--warmup]
 *   pkv-gguf --prompt-ids PATH [--logits PATH [--logits-from K]] ...
 *   pkv-gguf --perplexity PATH [--ctx N] [--max-tokens N] [--kv ...]
 *            [--keys channel|token] [--parse-special]
 *   pkv-gguf --agreement [--max-new N] [--kv ...]
 *   pkv-gguf --help
 *
 * Without --prompt or --file it serves the demo's 32 requests at once
 * (prompts.h: a base model's share a preamble, a chat model's a system
 * prompt, each then a topic), printing each answer as it finishes under a
 * status line. With one prompt it streams the answer. --chat writes the
 * prompt (--file's text, or --prompt) as a user's message in the model's
 * chat template (chat.h: ChatML for SmolLM2, Gemma's turns), after
 * --system's prompt if given, and the answer stops at the template's end
 * of turn; a chat model's demo is always so. --prompt-ids reads the
 * prompt as token ids; with --logits it writes the logits of its
 * positions K.. instead of generating (the tests compare them with
 * tests/gemma3/reference.py and tests/smollm2/reference.py).
 * --perplexity and --agreement measure the KV formats (score.h). --store
 * shares prompt blocks with other processes through a Redis server
 * (host/store.h): a second pkv-gguf loads the prompt blocks the first
 * computed. --model names a model examples/gguf/setup.sh caches (default
 * gemma3), --weights any GGUF; --threads the threads of its matrix
 * products (default: every core). The windowed layers keep only their
 * window's KV (pkv's default, hybrid memory); --every-token keeps every
 * token in every layer (pkv_engine_params.kv_memory
 * PKV_KV_MEMORY_EVERY_TOKEN), with every mode: the same outputs, bit for
 * bit, in more memory.
 *
 * --warmup serves the requests once before the run that is reported, on
 * the same engine, each prompt's ids after its first moved by one so
 * that nothing of it is a prefix hit, and discards what it generated:
 * the reported run finds the weights mapped, the buffers and the KV pool
 * touched and the threads started, as llama-bench's warm-up run leaves
 * llama.cpp before it measures (bench/peer.py compares the two so).
 *
 * A sequence holds at most the model's context (its GGUF's
 * context_length: Gemma 3 270M's 32,768 tokens, SmolLM2's 8,192), or
 * --ctx (with --perplexity, --ctx is the chunk length instead, 512 by
 * default): a longer prompt is refused before any work, and the answer
 * stops there whatever --max-new asks. Files are read before the model is
 * loaded.
 *
 * --parse-special reads the texts of control pieces in the prompt or
 * perplexity text ("<start_of_turn>", "<|im_end|>", "<eos>") as those
 * tokens, as llama.cpp's llama-cli reads a prompt. It is off by default:
 * a text from elsewhere may hold such texts as text (code,
 * documentation) that must not end or restructure the prompt unasked,
 * and plain text is how SentencePiece, Hugging Face's tokenizers and
 * llama-perplexity read it; --chat writes the template's own markers as
 * their tokens.
 */
#define _POSIX_C_SOURCE 200809L /* fileno, isatty */
#include "args.h"
#include "chat.h"
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

/* The longest --ctx, before the model says its own context. */
#define MAX_CTX (1u << 30)

typedef struct options {
    const char *model; /* --model, or NULL */
    const char *weights;
    int chat;           /* --chat */
    const char *system; /* --system, or NULL */
    const char *prompt;
    const char *file;
    const char *prompt_ids;
    const char *logits;
    uint32_t logits_from;
    const char *perplexity;
    int agreement;
    int32_t kv_dtype;
    int every_token; /* --every-token */
    int warmup;      /* --warmup */
    int32_t key_quant;
    int32_t backend;
    uint32_t max_new;
    uint32_t ctx;
    int ctx_given;
    uint32_t model_context; /* the model's, once it is loaded */
    uint32_t max_tokens;
    float temperature;
    float top_p;
    uint64_t seed;
    uint32_t threads;
    int json;
    int quiet;
    unsigned tokenize_flags; /* GG_PARSE_SPECIAL, and GG_ADD_BOS where
                              * the file asks for BOS */
    const char *store; /* HOST:PORT of a Redis sharing blocks, or NULL */
    /* The file --file, --prompt-ids or --perplexity names, read before
     * the model is loaded. */
    const char *input;
    char *input_text;
    size_t input_len;
} options;

/* A request's text: its prompt for printing and its answer so far. */
typedef struct text_request {
    const char *label;
    char *answer;
    size_t len, cap;
    int32_t *tokens;
    uint32_t num_tokens;
    uint32_t prompt_tokens;
    int32_t finish;
} text_request;

typedef struct run {
    const options *o;
    const gg_tokenizer *tok;
    text_request *texts;
    uint32_t n;
    int stream; /* one request: print its tokens as they come */
} run;

/* The usage on out; returns the exit code: 0 when asked for (--help, on
 * stdout), 2 after a bad argument (on stderr). */
static int usage(FILE *out, int code)
{
    fprintf(out,
            "usage: pkv-gguf [--model gemma3|smollm2 | --weights PATH]\n"
            "                [--kv f32|f16|u8|u4|u8k-u4v] "
            "[--backend auto|cpu|opencl]\n"
            "                [--prompt TEXT | --file PATH] [--chat] "
            "[--system TEXT]\n"
            "                [--parse-special] [--max-new N] [--ctx N] "
            "[--temperature T]\n"
            "                [--top-p P] [--seed S] [--threads N] [--json] "
            "[--quiet]\n"
            "                [--store HOST:PORT] [--every-token] "
            "[--warmup]\n"
            "       pkv-gguf --prompt-ids PATH [--logits PATH "
            "[--logits-from K]] ...\n"
            "       pkv-gguf --perplexity PATH [--ctx N] [--max-tokens N] "
            "[--kv ...]\n"
            "                [--keys channel|token] [--parse-special]\n"
            "       pkv-gguf --agreement [--max-new N] [--kv ...]\n"
            "       pkv-gguf --help\n"
            "Without --prompt or --file: the demo's 32 requests at once (a\n"
            "  chat model's in its chat template, with a system prompt).\n"
            "--chat: the prompt is a user's message in the model's chat\n"
            "  template (ChatML, Gemma's turns), after --system's prompt;\n"
            "  the answer stops at the template's end of turn.\n"
            "--ctx N: the tokens a sequence holds, prompt and answer (4 to\n"
            "  the model's context, which is the default); a longer prompt\n"
            "  is refused, the answer stops there. With --perplexity: the\n"
            "  chunk length (default 512).\n"
            "--every-token: every layer keeps every token's KV (by default\n"
            "  the windowed layers keep only their window's); any mode.\n"
            "--warmup: the requests served once first, on other ids,\n"
            "  unreported: the run reported is a warm one.\n"
            "--parse-special: control-piece texts in the text\n"
            "  (<start_of_turn>, <|im_end|>, <eos>...) read as those\n"
            "  tokens, as llama-cli reads a prompt. Off by default: the text\n"
            "  is plain text, as SentencePiece and tokenizers read it.\n"
            "Weights: --weights PATH, or --model NAME, the GGUF that\n"
            "sh examples/gguf/setup.sh downloads: gemma3 (the default,\n"
            "$PKV_CACHE/gemma3/gemma-3-270m-q4_k_m.gguf) or smollm2\n"
            "($PKV_CACHE/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf),\n"
            "PKV_CACHE defaulting to ~/.cache/pkv.\n");
    return code;
}

static int bad_arg(const char *arg, const char *value, const char *takes)
{
    return host_bad_arg("pkv-gguf", arg, value, takes);
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
    } else if (strcmp(a, "--model") == 0) {
        o->model = v;
        char *path = gg_default_weights_path(v);
        if (path == NULL)
            return bad_arg(a, v, "gemma3 or smollm2");
        free(path);
    } else if (strcmp(a, "--system") == 0) {
        o->system = v;
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
            o->key_quant = PKV_QUANT_GROUP_PER_CHANNEL;
        else if (strcmp(v, "token") == 0)
            o->key_quant = PKV_QUANT_GROUP_PER_TOKEN;
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
        /* The model's context bounds it too, once loaded (check_ctx). */
        if (u < 4 || u > MAX_CTX)
            return bad_arg(a, v, "a whole number from 4 to the model's "
                                 "context");
        o->ctx = u;
        o->ctx_given = 1;
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

/* 0, 1 for --help, or -1 after printing what is wrong. */
static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->kv_dtype = PKV_KV_DTYPE_F16;
    o->backend = PKV_BACKEND_KIND_AUTO;
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
        "--logits-from", "--store", "--model", "--system"};
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
        if (strcmp(a, "--every-token") == 0) {
            o->every_token = 1;
            continue;
        }
        if (strcmp(a, "--warmup") == 0) {
            o->warmup = 1;
            continue;
        }
        if (strcmp(a, "--chat") == 0) {
            o->chat = 1;
            continue;
        }
        if (strcmp(a, "--agreement") == 0) {
            o->agreement = 1;
            continue;
        }
        if (strcmp(a, "--parse-special") == 0) {
            o->tokenize_flags |= GG_PARSE_SPECIAL;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (host_option_with_value(
                "pkv-gguf", a, v, with_value,
                sizeof with_value / sizeof *with_value) != 0)
            return -1;
        i++;
        if (parse_value(o, a, v) != 0)
            return -1;
    }
    if ((o->prompt != NULL) + (o->file != NULL) + (o->prompt_ids != NULL) +
            (o->perplexity != NULL) + o->agreement >
        1) {
        fprintf(stderr, "pkv-gguf: --prompt, --file, --prompt-ids, "
                        "--perplexity and --agreement exclude each other\n");
        return -1;
    }
    o->input = o->file         ? o->file
               : o->prompt_ids ? o->prompt_ids
                               : o->perplexity;
    if (o->logits != NULL && o->prompt_ids == NULL) {
        fprintf(stderr, "pkv-gguf: --logits needs --prompt-ids\n");
        return -1;
    }
    if (o->model != NULL && o->weights != NULL) {
        fprintf(stderr, "pkv-gguf: --model and --weights exclude each "
                        "other\n");
        return -1;
    }
    if (o->warmup && (o->perplexity || o->agreement || o->logits)) {
        fprintf(stderr, "pkv-gguf: --warmup is for serving (a prompt or "
                        "the demo), not --perplexity, --agreement or "
                        "--logits\n");
        return -1;
    }
    if ((o->chat || o->system) &&
        (o->prompt_ids || o->perplexity || o->agreement)) {
        fprintf(stderr, "pkv-gguf: --chat and --system are for --prompt, "
                        "--file and the demo\n");
        return -1;
    }
    return 0;
}

/* Whitespace-separated token ids, each below vocab. NULL after printing
 * why. */
static int32_t *read_ids(const char *path, const char *text, size_t len,
                         uint32_t vocab, uint32_t *n)
{
    if (len / 2 + 1 > UINT32_MAX) {
        fprintf(stderr, "pkv-gguf: %s: %zu bytes, too long\n", path, len);
        return NULL;
    }
    int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
    const char *p = text;
    char *end;
    *n = 0;
    while (ids != NULL) {
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p)
            break;
        if (errno || id < 0 || (unsigned long)id >= vocab) {
            fprintf(stderr, "pkv-gguf: %s: token %ld is not in 0..%u\n",
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
    if (ids != NULL && (p != text + len || *n == 0)) {
        fprintf(stderr, "pkv-gguf: %s: not a list of token ids\n", path);
        free(ids);
        ids = NULL;
    }
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
    size_t n = gg_detokenize(r->tok, token, piece, sizeof piece);
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

/* A JSON string, which must be UTF-8: a byte of invalid UTF-8 (in a
 * prompt, or an answer cut inside a character) is written as U+FFFD, as
 * the tokenizer reads it. */
static void json_string(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        uint32_t k = c < 0x80 ? 1 : gg_utf8_len(s + i, n - i);
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
        } else if (c == '\n') {
            fputs("\\n", stdout);
        } else if (c < 0x20) {
            printf("\\u%04x", c);
        } else if (k == 0) {
            fputs("\\ufffd", stdout);
        } else {
            fwrite(s + i, 1, k, stdout);
            i += k - 1;
        }
    }
    putchar('"');
}

static void print_json(const run *r, pkv_engine *e,
                       const host_request *reqs, const host_serve_result *s)
{
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    pkv_engine_get_stats(e, &st);
    printf("{\"backend\": \"%s\", \"requests\": [", pkv_engine_backend_name(e));
    for (uint32_t i = 0; i < r->n; i++) {
        const text_request *t = &r->texts[i];
        printf("%s\n  {\"prompt\": ", i ? "," : "");
        json_string(t->label, strlen(t->label));
        printf(", \"prompt_tokens\": %u, \"finish\": \"%s\", \"text\": ",
               t->prompt_tokens, host_reason_name(t->finish));
        json_string(t->answer ? t->answer : "", t->len);
        printf(", \"tokens\": [");
        for (uint32_t k = 0; k < t->num_tokens; k++)
            printf("%s%d", k ? ", " : "", t->tokens[k]);
        /* Seconds from the start to the first token, and between tokens
         * after it on average. */
        const host_request *q = &reqs[i];
        printf("], \"ttft_s\": %.4f, \"itl_s\": %.4f}", q->first_token_s,
               q->generated > 1 ? (q->last_token_s - q->first_token_s) /
                                      (double)(q->generated - 1)
                                : 0.0);
    }
    printf("],\n \"generated\": %llu, \"processed\": %llu, \"seconds\": %.3f, "
           "\"tokens_per_s\": %.2f, \"prefix_hit_tokens\": %llu, "
           "\"prefix_query_tokens\": %llu, \"preemptions\": %llu, "
           "\"block_bytes\": %llu, \"block_size\": %u}\n",
           (unsigned long long)s->generated, (unsigned long long)s->processed,
           s->elapsed, (double)s->generated / s->elapsed,
           (unsigned long long)st.prefix_hit_tokens,
           (unsigned long long)st.prefix_query_tokens,
           (unsigned long long)st.preemptions,
           (unsigned long long)st.block_bytes, GG_BLOCK_SIZE);
}

/* The tokens a sequence may hold, prompt and answer together: --ctx, or
 * the model's context; and its name for messages. */
static uint32_t seq_limit(const options *o, char *name, size_t size)
{
    if (o->ctx_given)
        snprintf(name, size, "--ctx %u", o->ctx);
    else
        snprintf(name, size, "the model's context of %u tokens",
                 o->model_context);
    return o->ctx_given ? o->ctx : o->model_context;
}

/* --ctx against the model's context, once it is known (--perplexity's
 * chunks too). 0, or -1 after printing why. */
static int check_ctx(const options *o)
{
    if (o->ctx_given && o->ctx > o->model_context) {
        fprintf(stderr, "pkv-gguf: --ctx %u: more than the model's context "
                        "of %u tokens\n",
                o->ctx, o->model_context);
        return -1;
    }
    return 0;
}

/* Refuse a prompt with no room left for an answer, and cut max_new to the
 * room there is (in 64 bits: --max-new goes up to 2^32 - 1), saying so
 * once. 0, or -1 after printing why. */
static int fit(const options *o, const char *label, host_request *r,
               int *said)
{
    char name[64];
    uint32_t limit = seq_limit(o, name, sizeof name);
    if (r->prompt_len >= limit) {
        fprintf(stderr, "pkv-gguf: %s: a prompt of %u tokens does not fit "
                        "%s (prompt and answer together)\n",
                label, r->prompt_len, name);
        return -1;
    }
    if ((uint64_t)r->prompt_len + r->max_new > limit) {
        r->max_new = limit - r->prompt_len;
        if (!*said)
            fprintf(stderr, "pkv-gguf: --max-new %u: the answer stops at "
                            "%s (prompt and answer together)\n",
                    o->max_new, name);
        *said = 1;
    }
    return 0;
}

/* The requests: --prompt, --file, --prompt-ids, or the demo's. Labels
 * point into the options or the demo's topics; prompts are token arrays.
 * 0, or -1 after printing why. */
static int make_requests(const options *o, const gg_tokenizer *tok,
                         const gg_chat *chat, host_request **out_reqs,
                         text_request **out_texts, uint32_t *out_n)
{
    uint32_t n = o->prompt || o->input ? 1 : gg_demo_num_topics;
    host_request *reqs = calloc(n, sizeof *reqs);
    text_request *texts = calloc(n, sizeof *texts);
    *out_reqs = reqs;
    *out_texts = texts;
    *out_n = n;
    if (reqs == NULL || texts == NULL) {
        fprintf(stderr, "pkv-gguf: out of memory\n");
        return -1;
    }
    int said = 0;
    for (uint32_t i = 0; i < n; i++) {
        char demo[512];
        const char *text, *what;
        size_t len;
        reqs[i].max_new = o->max_new;
        reqs[i].rng = o->seed ^ (0x9e3779b97f4a7c15ull * (i + 1));
        if (o->prompt_ids != NULL) {
            texts[i].label = what = o->prompt_ids;
            reqs[i].prompt = read_ids(o->prompt_ids, o->input_text,
                                      o->input_len, tok->n,
                                      &reqs[i].prompt_len);
            if (reqs[i].prompt == NULL || fit(o, what, &reqs[i], &said) != 0)
                return -1;
            texts[i].prompt_tokens = reqs[i].prompt_len;
            continue;
        }
        if (o->prompt != NULL) {
            text = texts[i].label = o->prompt;
            len = strlen(text);
            what = "--prompt";
        } else if (o->file != NULL) {
            text = o->input_text;
            len = o->input_len;
            texts[i].label = what = o->file;
        } else {
            texts[i].label = what = gg_demo_topics[i];
            len = gg_demo_text(i, chat->kind != GG_CHAT_NONE, demo,
                               sizeof demo);
            text = demo;
        }
        if (len > GG_MAX_TEXT / 2) {
            fprintf(stderr, "pkv-gguf: %s: %zu bytes, more than the "
                            "tokenizer reads (%zu)\n",
                    what, len, GG_MAX_TEXT / 2);
            return -1;
        }
        const char *sys = o->system;
        size_t sys_len = sys ? strlen(sys) : 0;
        if (o->prompt == NULL && o->file == NULL && sys == NULL) {
            sys = gg_demo_system;
            sys_len = strlen(sys);
        }
        uint32_t most = chat->kind != GG_CHAT_NONE
                            ? gg_chat_bound(tok, sys_len, len)
                            : gg_tokenize_bound(tok, len, o->tokenize_flags);
        reqs[i].prompt = malloc(most * sizeof *reqs[i].prompt);
        int got = reqs[i].prompt == NULL ? -1
                  : chat->kind != GG_CHAT_NONE
                      ? gg_chat_tokenize(chat, tok, sys, sys_len, text, len,
                                         reqs[i].prompt, most)
                      : gg_tokenize(tok, text, len, o->tokenize_flags,
                                    reqs[i].prompt, most);
        if (got < 0) {
            fprintf(stderr, "pkv-gguf: %s: cannot tokenize (out of "
                            "memory, or a byte with no token)\n",
                    what);
            return -1;
        }
        reqs[i].prompt_len = (uint32_t)got;
        if (fit(o, what, &reqs[i], &said) != 0)
            return -1;
        texts[i].prompt_tokens = reqs[i].prompt_len;
    }
    return 0;
}

/* Each prompt id after the first moved by step (mod vocab). */
static void shift_prompts(host_request *reqs, uint32_t n, uint32_t vocab,
                          uint32_t step)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 1; j < reqs[i].prompt_len; j++)
            reqs[i].prompt[j] =
                (int32_t)(((uint32_t)reqs[i].prompt[j] + step) % vocab);
}

/* --warmup: the requests served once on other ids (none of their blocks
 * a prefix of the real ones), silently; the ids and the sampling states
 * put back after, so that the reported run samples as it would alone. */
static int warm_up(pkv_engine *e, gg_host *h, host_request *reqs, uint32_t n,
                   const host_serve_options *so)
{
    uint32_t vocab = h->model.vocab_size;
    uint64_t *rng = malloc((n ? n : 1) * sizeof *rng);
    if (rng == NULL) {
        fprintf(stderr, "pkv-gguf: out of memory\n");
        return 1;
    }
    for (uint32_t i = 0; i < n; i++)
        rng[i] = reqs[i].rng;
    host_serve_options quiet = *so;
    quiet.on_token = NULL;
    quiet.on_finish = NULL;
    quiet.status = HOST_STATUS_NONE;
    host_serve_result ignored;
    shift_prompts(reqs, n, vocab, 1);
    int rc = host_serve(e, &h->model, reqs, n, &quiet, &ignored);
    shift_prompts(reqs, n, vocab, vocab - 1);
    for (uint32_t i = 0; i < n; i++)
        reqs[i].rng = rng[i];
    free(rng);
    return rc;
}

static int serve(const options *o, gg_model *m, const char *weights,
                 const gg_tokenizer *tok, const gg_chat *chat)
{
    host_request *reqs = NULL;
    text_request *texts = NULL;
    uint32_t n = 0;
    int rc = 1;
    pkv_engine *e = NULL;
    gg_host h = {0};
    host_store store = {0};
    char model_name[256];
    gg_store_model_name(m, weights, model_name, sizeof model_name);
    if (o->store != NULL &&
        host_store_open(&store, "pkv-gguf", o->store, model_name) != 0)
        goto out;
    if (make_requests(o, tok, chat, &reqs, &texts, &n) != 0)
        goto out;
    uint32_t longest = 0, blocks = 1;
    for (uint32_t i = 0; i < n; i++) {
        /* At most the context (fit). */
        uint32_t len = reqs[i].prompt_len + reqs[i].max_new;
        longest = len > longest ? len : longest;
        blocks += (len + GG_BLOCK_SIZE - 1) / GG_BLOCK_SIZE;
    }
    gg_kv_choice kv = {.dtype = o->kv_dtype,
                       .key_quant = o->key_quant,
                       .backend = o->backend,
                       .every_token = o->every_token};
    pkv_engine_params p;
    e = gg_engine_create(&p, m, &kv, longest, blocks, 256,
                         o->store != NULL ? &store.store : NULL);
    if (e == NULL)
        goto out;
    if (gg_host_init(&h, m, p.max_batch_tokens) != 0) {
        fprintf(stderr, "pkv-gguf: out of memory\n");
        goto out;
    }
    run r = {o, tok, texts, n, n == 1};
    /* The end of text, and in a chat the end of the assistant's turn. */
    int32_t stop[2] = {m->config.eos, chat->end};
    host_serve_options so = {0};
    so.temperature = o->temperature;
    so.top_p = o->top_p;
    so.stop = stop;
    so.num_stop = chat->kind != GG_CHAT_NONE && chat->end != stop[0] ? 2 : 1;
    so.status = o->json || o->quiet || r.stream ? HOST_STATUS_NONE
                : isatty(fileno(stdout))       ? HOST_STATUS_LIVE
                                               : HOST_STATUS_LINES;
    so.on_token = on_token;
    so.on_finish = on_finish;
    so.user = &r;
    if (r.stream && !o->json)
        printf("%s", o->prompt && chat->kind == GG_CHAT_NONE ? o->prompt
                                                            : "");
    host_serve_result s;
    if (o->warmup && (rc = warm_up(e, &h, reqs, n, &so)) != 0)
        goto out;
    rc = host_serve(e, &h.model, reqs, n, &so, &s);
    if (r.stream && !o->json)
        putchar('\n');
    if (o->json)
        print_json(&r, e, reqs, &s);
    else
        host_print_summary("pkv-gguf", e, &p, n, &s);
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
    gg_host_free(&h);
    pkv_engine_destroy(e);
    host_store_close(&store);
    return rc;
}

static int dump_logits(const options *o, gg_model *m, const gg_tokenizer *tok,
                       const gg_kv_choice *kv)
{
    uint32_t n;
    int32_t *ids =
        read_ids(o->prompt_ids, o->input_text, o->input_len, tok->n, &n);
    if (ids == NULL)
        return 1;
    char name[64];
    if (n > seq_limit(o, name, sizeof name)) {
        fprintf(stderr, "pkv-gguf: %s: %u tokens do not fit %s\n",
                o->prompt_ids, n, name);
        free(ids);
        return 1;
    }
    int rc = gg_score_logits(m, ids, n, o->logits_from, kv, o->logits);
    free(ids);
    return rc;
}

/* The file --file, --prompt-ids or --perplexity names, before the model
 * is loaded: an unreadable one is named at once. 0, or -1 after printing
 * why. */
static int read_input(options *o)
{
    if (o->input == NULL)
        return 0;
    errno = 0;
    o->input_text = host_read_file(o->input, &o->input_len);
    if (o->input_text == NULL) {
        fprintf(stderr, "pkv-gguf: cannot read %s: %s\n", o->input,
                errno ? strerror(errno) : "out of memory");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int asked = parse_options(argc, argv, &o);
    if (asked != 0)
        return asked > 0 ? usage(stdout, 0) : usage(stderr, 2);
    if (read_input(&o) != 0)
        return 1;
    gg_loaded loaded;
    if (gg_load(&loaded, "pkv-gguf", o.model, o.weights, o.threads) != 0) {
        free(o.input_text);
        return 1;
    }
    gg_model *m = &loaded.model;
    gg_tokenizer *tok = &loaded.tok;
    const char *weights = loaded.weights;
    o.model_context = m->config.context_length;
    o.tokenize_flags |= tok->add_bos;
    gg_chat chat = gg_chat_detect(&m->config, tok);
    /* A chat model's demo is a chat; --chat and --system ask for one. */
    int chatting = o.chat || o.system ||
                   (chat.kind != GG_CHAT_NONE && !o.prompt && !o.input &&
                    !o.agreement);
    gg_chat plain = {GG_CHAT_NONE, -1, "none"};
    gg_kv_choice kv = {.dtype = o.kv_dtype,
                       .key_quant = o.key_quant,
                       .backend = o.backend,
                       .every_token = o.every_token};
    char name[64];
    int rc;
    if (chatting && chat.kind == GG_CHAT_NONE) {
        fprintf(stderr, "pkv-gguf: --chat: %s has no chat template this "
                        "host knows (ChatML, Gemma's)\n",
                weights);
        rc = 2;
    } else if (check_ctx(&o) != 0) {
        rc = 2;
    } else if (o.logits != NULL) {
        rc = dump_logits(&o, m, tok, &kv);
    } else if (o.perplexity != NULL) {
        rc = gg_score_perplexity(m, tok, o.perplexity, o.input_text,
                                 o.input_len, o.tokenize_flags, o.ctx,
                                 o.max_tokens, &kv);
    } else if (o.agreement) {
        rc = gg_score_agreement(m, tok, o.max_new,
                                seq_limit(&o, name, sizeof name), &kv);
    } else {
        rc = serve(&o, m, weights, tok, chatting ? &chat : &plain);
    }
    gg_unload(&loaded);
    free(o.input_text);
    return rc;
}
