/* SPDX-License-Identifier: MIT */
/* pkv-bench: figures that back every performance claim in docs/.
 * Usage: pkv-bench SUBCOMMAND [--quick] [--json FILE|-] [--plot DIR] */
#define _POSIX_C_SOURCE 200809L /* mkdir */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

uint64_t bench_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double bench_uniform(uint64_t *state)
{
    return ((double)(bench_rand(state) >> 11) + 0.5) / 9007199254740992.0;
}

double bench_normal(uint64_t *state)
{
    double u1 = bench_uniform(state), u2 = bench_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
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

typedef struct subcommand {
    const char *name;
    int (*run)(const bench_options *opt);
    const char *help;
} subcommand;

static const subcommand SUBCOMMANDS[] = {
    {"memory", bench_memory,
     "KV memory: static max-length allocation vs paged blocks"},
    {"scheduler", bench_scheduler,
     "host microseconds per step at 1 to 1,024 running sequences"},
    {"serve", bench_serve,
     "llama model over an arrival trace: continuous vs static batching"},
    {"kernels", bench_kernels,
     "OpenCL decode attention: KV GB/s vs memory bandwidth, paged vs "
     "contiguous"},
#ifdef PKV_BENCH_OPENCL
    {"interop", bench_interop,
     "attend with host tensors wrapped (zero copy), copied, and cl_mem"},
#endif
};
#define NUM_SUBCOMMANDS (sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0])

static int usage(FILE *to)
{
    fprintf(to, "usage: pkv-bench SUBCOMMAND [--quick] [--json FILE|-] "
                "[--plot DIR]\n\nsubcommands:\n");
    for (size_t i = 0; i < NUM_SUBCOMMANDS; i++)
        fprintf(to, "  %-10s %s\n", SUBCOMMANDS[i].name, SUBCOMMANDS[i].help);
    fprintf(to, "  all        every subcommand in turn\n");
    return to == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(stderr);
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
        return usage(stdout);
    bench_options opt = {0, NULL, NULL};
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            opt.quick = 1;
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            const char *path = argv[++i];
            opt.json = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
            if (opt.json == NULL) {
                fprintf(stderr, "pkv-bench: cannot write %s\n", path);
                return 1;
            }
        } else if (strcmp(argv[i], "--plot") == 0 && i + 1 < argc) {
            opt.plot = argv[++i];
        } else {
            fprintf(stderr, "pkv-bench: unknown option %s\n", argv[i]);
            return usage(stderr);
        }
    }
    int all = strcmp(argv[1], "all") == 0, ran = 0, rc = 0;
    for (size_t i = 0; i < NUM_SUBCOMMANDS; i++) {
        if (all || strcmp(argv[1], SUBCOMMANDS[i].name) == 0) {
            rc |= SUBCOMMANDS[i].run(&opt);
            ran = 1;
        }
    }
    if (opt.json != NULL && opt.json != stdout)
        fclose(opt.json);
    if (!ran) {
        fprintf(stderr, "pkv-bench: unknown subcommand %s\n", argv[1]);
        return usage(stderr);
    }
    return rc;
}
