/* SPDX-License-Identifier: MIT */
/* pkv-bench: the options and helpers every subcommand shares
 * (bench_util.c). Nothing here calls a subcommand. */
#ifndef PKV_BENCH_UTIL_H
#define PKV_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct bench_options {
    int quick;        /* a subset (each subcommand's --help says how long) */
    FILE *json;       /* JSON lines (one object per line), or NULL */
    const char *plot; /* directory for gnuplot PNGs, or NULL */
    int resident;     /* kernels --resident: KV that stays in cache */
    const char *model; /* serve --model: llama (NULL) or gemma3 */
    uint32_t prompt;   /* store --prompt: tokens (0: its default) */
    uint32_t runs;     /* store --runs: second engines (0: default) */
    const char *redis; /* store --redis HOST:PORT, or NULL: its own */
    uint32_t threads;  /* serve --threads: gemma3's (0: every core) */
} bench_options;

/* --plot: bench_plot_open gives a file for NAME's data columns in the plot
 * directory (NULL when not plotting, or when gnuplot is missing: it then
 * says so once). bench_plot_close renders DIR/NAME.png with gnuplot from
 * `body`, gnuplot commands in which the variable `data` names the file. */
FILE *bench_plot_open(const bench_options *opt, const char *name);
void bench_plot_close(const bench_options *opt, FILE *data, const char *name,
                      const char *body);

/* One line of progress on stderr ("... " + the formatted text), shown
 * also when stdout is piped. */
void bench_progress(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Seconds on the monotonic clock. */
double bench_now_s(void);

/* qsort's comparison of doubles, ascending. */
int bench_compare_double(const void *a, const void *b);

/* The median of n values, sorting them in place (0 when n is 0). */
double bench_median(double *v, size_t n);

/* Bytes of the last-level cache, as the cache behaves: at least 105 MB
 * (the machine the benches were tuned on reports 32 MiB per instance but
 * about 105 MB behave as last-level cache). */
size_t bench_llc_bytes(void);

#endif
