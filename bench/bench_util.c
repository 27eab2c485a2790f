/* SPDX-License-Identifier: MIT */
/* pkv-bench: the helpers every subcommand shares (declared in
 * bench_util.h): progress lines, timing and medians, the last-level
 * cache's size and --plot's gnuplot files. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, mkdir */
#include "bench_util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

void bench_progress(const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    fputs("... ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
}

double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int bench_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, bench_compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

size_t bench_llc_bytes(void)
{
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long kb = 0;
    if (f != NULL) {
        if (fscanf(f, "%luK", &kb) != 1)
            kb = 0;
        fclose(f);
    }
    size_t bytes = (size_t)kb * 1024;
    return bytes > 105000000u ? bytes : 105000000u;
}

FILE *bench_plot_open(const bench_options *opt, const char *name)
{
    static int gnuplot = -1;
    if (opt->plot == NULL)
        return NULL;
    if (gnuplot < 0) {
        gnuplot = system("command -v gnuplot >/dev/null 2>&1") == 0;
        if (!gnuplot)
            printf("--plot skipped: gnuplot is not installed\n");
    }
    if (!gnuplot)
        return NULL;
    mkdir(opt->plot, 0777);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.dat", opt->plot, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        printf("--plot: cannot write %s\n", path);
    return f;
}

void bench_plot_close(const bench_options *opt, FILE *data, const char *name,
                      const char *body)
{
    if (data == NULL)
        return;
    fclose(data);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.gp", opt->plot, name);
    FILE *g = fopen(path, "w");
    if (g == NULL)
        return;
    fprintf(g,
            "set terminal png size 900,500\n"
            "set output '%s/%s.png'\n"
            "data = '%s/%s.dat'\n"
            "set grid\nset termoption noenhanced\n%s\n",
            opt->plot, name, opt->plot, name, body);
    fclose(g);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", path);
    if (system(cmd) == 0)
        printf("plot: %s/%s.png\n", opt->plot, name);
    else
        printf("plot: gnuplot failed on %s\n", path);
}
