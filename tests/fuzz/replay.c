/* SPDX-License-Identifier: MIT */
/*
 * Replay driver for the fuzz target, for plain ctest (no libFuzzer):
 *   replay [corpus_dir_or_file ...] [--ops N] [--seed S]
 * runs every corpus input, then random inputs from a fixed-seed PRNG until
 * the target has executed at least N operations. A broken invariant aborts.
 * With PKV_FUZZ_LAST=path, each random input is written to path before it
 * runs, so the one that aborted is left there to replay and reduce.
 */
#define _POSIX_C_SOURCE 200809L

#include "fuzz_blocks.h"

#include "../rng.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { MAX_INPUT = 1u << 20, MAX_RANDOM = 600 };

static uint8_t buf[MAX_INPUT];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Run one file; 1 if it ran, 0 if it could not be read. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "fuzz: cannot open %s\n", path);
        return 0;
    }
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    return 1;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every regular file of a directory, in name order; -1 on error. */
static long run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "fuzz: cannot open directory %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t count = 0;
    size_t cap = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        if (e->d_name[0] == '.')
            continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (grown == NULL)
                abort();
            names = grown;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[count] = malloc(len);
        if (names[count] == NULL)
            abort();
        snprintf(names[count], len, "%s/%s", dir, e->d_name);
        count++;
    }
    closedir(d);
    qsort(names, count, sizeof *names, by_name);
    long ran = 0;
    for (size_t i = 0; i < count; i++) {
        if (!is_dir(names[i])) {
            if (!run_file(names[i]))
                ran = -1;
            else if (ran >= 0)
                ran++;
        }
        free(names[i]);
    }
    free(names);
    return ran;
}

/* Write the random input about to run to path, so that one that fails
 * (an abort) is left there to replay. */
static void save_input(const char *path, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, n, f) != n) {
        fprintf(stderr, "fuzz: cannot write %s\n", path);
        abort();
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    const char *last = getenv("PKV_FUZZ_LAST");
    uint64_t want_ops = 0;
    uint64_t seed = 0x706b76u;
    unsigned long corpus = 0;
    unsigned long inputs = 0;
    double start = now();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
            want_ops = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else if (is_dir(argv[i])) {
            long ran = run_dir(argv[i]);
            if (ran < 0)
                return 1;
            corpus += (unsigned long)ran;
        } else {
            if (!run_file(argv[i]))
                return 1;
            corpus++;
        }
    }
    uint64_t corpus_ops = pkv_fuzz_ops;
    inputs = corpus;
    while (pkv_fuzz_ops < want_ops) {
        size_t n = 3 + (size_t)(test_rand(&seed) % MAX_RANDOM);
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = test_rand(&seed);
            size_t k = n - i < 8 ? n - i : 8;
            memcpy(buf + i, &r, k);
        }
        if (last != NULL)
            save_input(last, n);
        LLVMFuzzerTestOneInput(buf, n);
        inputs++;
    }
    double seconds = now() - start;
    printf("fuzz: %lu inputs (%lu from the corpus), %llu operations "
           "(%llu from the corpus) in %.2f s\n",
           inputs, corpus, (unsigned long long)pkv_fuzz_ops,
           (unsigned long long)corpus_ops, seconds);
    printf("fuzz: %lu passed, 0 failed\n", inputs);
    return 0;
}
