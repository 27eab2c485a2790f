/* SPDX-License-Identifier: MIT */
/*
 * gguf-tokenize: the GGUF host's tokenizer on the command line, for
 * tests/gemma3/check_tokenizer.py to compare with SentencePiece and
 * llama.cpp, and tests/smollm2/check_tokenizer.py with Hugging Face's
 * tokenizers.
 *
 *   gguf-tokenize WEIGHTS              each line of stdin (C escapes \n \t
 *                                    \r \\ \xHH) -> its ids, one line
 *   gguf-tokenize --file PATH WEIGHTS  the ids of the whole file, one line
 *                                    (checked to decode back; time on
 *                                    stderr)
 *   gguf-tokenize --decode WEIGHTS     check each line of stdin decodes back
 *                                    from its ids to itself (and that the
 *                                    count-only and BOS calls agree)
 *   gguf-tokenize --parse-special ...  control-piece texts read as their ids
 *                                    (GG_PARSE_SPECIAL)
 *
 * Ids are space-separated, without BOS; each count is checked against
 * gg_tokenize_bound. Exit 0, or 1 with a message.
 */
#define _POSIX_C_SOURCE 200809L
#include "args.h"
#include "tokenizer.h"
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Undo the C escapes of line[0, n) in place; its new length, or -1 for a
 * malformed escape. */
static long unescape(char *line, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (line[i] != '\\') {
            line[o++] = line[i];
            continue;
        }
        if (++i == n)
            return -1;
        switch (line[i]) {
        case 'n':
            line[o++] = '\n';
            break;
        case 't':
            line[o++] = '\t';
            break;
        case 'r':
            line[o++] = '\r';
            break;
        case '\\':
            line[o++] = '\\';
            break;
        case 'x': {
            int hi = i + 2 < n ? hex_value(line[i + 1]) : -1;
            int lo = i + 2 < n ? hex_value(line[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            line[o++] = (char)(hi * 16 + lo);
            i += 2;
            break;
        }
        default:
            return -1;
        }
    }
    return (long)o;
}

/* The ids of text[0, len) without BOS, in a new array; its length in *n. */
static int32_t *encode(const gg_tokenizer *t, const char *text, size_t len,
                       unsigned flags, int *n)
{
    uint32_t most = gg_tokenize_bound(t, len, flags);
    int32_t *ids = malloc(((size_t)most + 1) * sizeof *ids); /* not 0 */
    if (ids == NULL)
        return NULL;
    /* The count comes back whole even past max_out. */
    *n = gg_tokenize(t, text, len, flags, ids, most);
    if (*n >= 0 && (uint32_t)*n > most)
        fprintf(stderr, "gguf-tokenize: %d ids for %zu bytes, past the bound "
                        "of %u\n",
                *n, len, most);
    if (*n < 0 || (uint32_t)*n > most) {
        free(ids);
        return NULL;
    }
    return ids;
}

static void print_ids(const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    putchar('\n');
}

/* Whether the ids decode back to text[0, len). */
static int decodes_back(const gg_tokenizer *t, const int32_t *ids, int n,
                        const char *text, size_t len)
{
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        char piece[64];
        size_t k = gg_detokenize(t, ids[i], piece, sizeof piece);
        if (k > len - at || memcmp(text + at, piece, k) != 0)
            return 0;
        at += k;
    }
    return at == len;
}

/* The calls besides the one encode makes: asking for the count only, and
 * with BOS, give the same ids. */
static int same_other_ways(const gg_tokenizer *t, const int32_t *ids,
                           int n, const char *text, size_t len,
                           unsigned flags)
{
    if (gg_tokenize(t, text, len, flags, NULL, 0) != n)
        return 0;
    int32_t *with_bos = malloc(((size_t)n + 1) * sizeof *with_bos);
    int ok = with_bos != NULL &&
             gg_tokenize(t, text, len, flags | GG_ADD_BOS, with_bos,
                         (uint32_t)n + 1) ==
                 n + 1 &&
             with_bos[0] == t->bos &&
             memcmp(with_bos + 1, ids, (size_t)n * sizeof *ids) == 0;
    free(with_bos);
    return ok;
}

static int run_lines(const gg_tokenizer *t, unsigned flags, int decode)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    unsigned long number = 0;
    int rc = 0;
    while (rc == 0 && (got = getline(&line, &cap, stdin)) >= 0) {
        number++;
        size_t n = (size_t)got;
        if (n > 0 && line[n - 1] == '\n')
            n--;
        long len = unescape(line, n);
        int count;
        int32_t *ids =
            len < 0 ? NULL : encode(t, line, (size_t)len, flags, &count);
        if (ids == NULL) {
            fprintf(stderr, "gguf-tokenize: line %lu: %s\n", number,
                    len < 0 ? "bad escape" : "cannot tokenize");
            rc = 1;
        } else if (!decode) {
            print_ids(ids, count);
        } else if (!same_other_ways(t, ids, count, line, (size_t)len,
                                    flags)) {
            fprintf(stderr, "gguf-tokenize: line %lu: other calls differ\n",
                    number);
            rc = 1;
        } else if (!decodes_back(t, ids, count, line, (size_t)len)) {
            fprintf(stderr, "gguf-tokenize: line %lu does not decode back:",
                    number);
            for (int i = 0; i < count; i++)
                fprintf(stderr, " %d", (int)ids[i]);
            fputc('\n', stderr);
            rc = 1;
        }
        free(ids);
    }
    free(line);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The ids of the file, on stdout; the time it took, on stderr. */
static int run_file(const gg_tokenizer *t, unsigned flags, const char *path)
{
    size_t len;
    char *text = host_read_file(path, &len);
    if (text == NULL) {
        fprintf(stderr, "gguf-tokenize: cannot read %s\n", path);
        return 1;
    }
    int count;
    double t0 = now_s();
    int32_t *ids = encode(t, text, len, flags, &count);
    double seconds = now_s() - t0;
    int rc = 1;
    if (ids == NULL) {
        fprintf(stderr, "gguf-tokenize: %s: cannot tokenize\n", path);
    } else if (!decodes_back(t, ids, count, text, len)) {
        fprintf(stderr, "gguf-tokenize: %s does not decode back\n", path);
    } else {
        print_ids(ids, count);
        fprintf(stderr, "gguf-tokenize: %zu bytes, %d tokens, %.1f ms\n", len,
                count, 1e3 * seconds);
        rc = 0;
    }
    free(ids);
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    const char *file = NULL;
    int decode = 0, a = 1;
    unsigned flags = 0;
    for (; a < argc - 1; a++) {
        if (strcmp(argv[a], "--file") == 0 && a + 2 < argc)
            file = argv[++a];
        else if (strcmp(argv[a], "--decode") == 0)
            decode = 1;
        else if (strcmp(argv[a], "--parse-special") == 0)
            flags |= GG_PARSE_SPECIAL;
        else
            break;
    }
    if (a != argc - 1 || argv[a][0] == '-' || (file && decode)) {
        fprintf(stderr, "usage: gguf-tokenize [--file PATH | --decode] "
                        "[--parse-special] WEIGHTS\n");
        return 2;
    }
    gg_file f;
    gg_tokenizer t;
    char err[256];
    if (gg_file_open(&f, argv[a], err, sizeof err) != 0) {
        fprintf(stderr, "gguf-tokenize: %s\n", err);
        return 1;
    }
    if (gg_tokenizer_init(&t, &f, err, sizeof err) != 0) {
        fprintf(stderr, "gguf-tokenize: tokenizer: %s\n", err);
        gg_file_close(&f);
        return 1;
    }
    int rc = file ? run_file(&t, flags, file) : run_lines(&t, flags, decode);
    gg_tokenizer_free(&t);
    gg_file_close(&f);
    return rc;
}
