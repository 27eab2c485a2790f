/* SPDX-License-Identifier: MIT */
/*
 * g3-tokenize: the Gemma 3 host's tokenizer on the command line, for
 * check_tokenizer.py to compare with SentencePiece and llama.cpp.
 *
 *   g3-tokenize WEIGHTS              each line of stdin (C escapes \n \t
 *                                    \r \\ \xHH) -> its ids, one line
 *   g3-tokenize --file PATH WEIGHTS  the ids of the whole file, one line
 *                                    (checked to decode back; time on
 *                                    stderr)
 *   g3-tokenize --decode WEIGHTS     check each line of stdin decodes back
 *                                    from its ids to itself (and that the
 *                                    count-only and BOS calls agree)
 *
 * Ids are space-separated, without BOS. Exit 0, or 1 with a message.
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
static int32_t *encode(const g3_tokenizer *t, const char *text, size_t len,
                       int *n)
{
    /* Never more ids than bytes (plus one for a BOS, not asked here). */
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    if (ids == NULL)
        return NULL;
    *n = g3_tokenize(t, text, len, 0, ids, (uint32_t)len + 1);
    if (*n < 0 || (size_t)*n > len + 1) {
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
static int decodes_back(const g3_tokenizer *t, const int32_t *ids, int n,
                        const char *text, size_t len)
{
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        char piece[64];
        size_t k = g3_detokenize(t, ids[i], piece, sizeof piece);
        if (k > len - at || memcmp(text + at, piece, k) != 0)
            return 0;
        at += k;
    }
    return at == len;
}

/* The calls besides the one encode makes: asking for the count only, and
 * with BOS, give the same ids. */
static int same_other_ways(const g3_tokenizer *t, const int32_t *ids,
                           int n, const char *text, size_t len)
{
    if (g3_tokenize(t, text, len, 0, NULL, 0) != n)
        return 0;
    int32_t *with_bos = malloc(((size_t)n + 1) * sizeof *with_bos);
    int ok = with_bos != NULL &&
             g3_tokenize(t, text, len, 1, with_bos, (uint32_t)n + 1) ==
                 n + 1 &&
             with_bos[0] == t->bos &&
             memcmp(with_bos + 1, ids, (size_t)n * sizeof *ids) == 0;
    free(with_bos);
    return ok;
}

static int run_lines(const g3_tokenizer *t, int decode)
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
        int32_t *ids = len < 0 ? NULL : encode(t, line, (size_t)len, &count);
        if (ids == NULL) {
            fprintf(stderr, "g3-tokenize: line %lu: %s\n", number,
                    len < 0 ? "bad escape" : "cannot tokenize");
            rc = 1;
        } else if (!decode) {
            print_ids(ids, count);
        } else if (!same_other_ways(t, ids, count, line, (size_t)len)) {
            fprintf(stderr, "g3-tokenize: line %lu: other calls differ\n",
                    number);
            rc = 1;
        } else if (!decodes_back(t, ids, count, line, (size_t)len)) {
            fprintf(stderr, "g3-tokenize: line %lu does not decode back:",
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
static int run_file(const g3_tokenizer *t, const char *path)
{
    size_t len;
    char *text = host_read_file(path, &len);
    if (text == NULL) {
        fprintf(stderr, "g3-tokenize: cannot read %s\n", path);
        return 1;
    }
    int count;
    double t0 = now_s();
    int32_t *ids = encode(t, text, len, &count);
    double seconds = now_s() - t0;
    int rc = 1;
    if (ids == NULL) {
        fprintf(stderr, "g3-tokenize: %s: cannot tokenize\n", path);
    } else if (!decodes_back(t, ids, count, text, len)) {
        fprintf(stderr, "g3-tokenize: %s does not decode back\n", path);
    } else {
        print_ids(ids, count);
        fprintf(stderr, "g3-tokenize: %zu bytes, %d tokens, %.1f ms\n", len,
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
    if (argc == 4 && strcmp(argv[1], "--file") == 0) {
        file = argv[2];
        a = 3;
    } else if (argc == 3 && strcmp(argv[1], "--decode") == 0) {
        decode = 1;
        a = 2;
    } else if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: g3-tokenize [--file PATH | --decode] "
                        "WEIGHTS\n");
        return 2;
    }
    g3_file f;
    g3_tokenizer t;
    char err[256];
    if (g3_file_open(&f, argv[a], err, sizeof err) != 0) {
        fprintf(stderr, "g3-tokenize: %s\n", err);
        return 1;
    }
    if (g3_tokenizer_init(&t, f.vocab, f.config.vocab_size, &f.config, err,
                          sizeof err) != 0) {
        fprintf(stderr, "g3-tokenize: tokenizer: %s\n", err);
        g3_file_close(&f);
        return 1;
    }
    int rc = file ? run_file(&t, file) : run_lines(&t, decode);
    g3_tokenizer_free(&t);
    g3_file_close(&f);
    return rc;
}
