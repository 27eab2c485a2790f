/* SPDX-License-Identifier: MIT */
/* pkv-bench: figures that back every performance claim in docs/. This
 * file is the command line: options, --help and the dispatch to the
 * subcommands (serve --speculative included).
 * Usage: pkv-bench SUBCOMMAND [--quick] [--json FILE|-] [--plot DIR]
 *        pkv-bench SUBCOMMAND --help */
#define _POSIX_C_SOURCE 200809L /* dup, fdopen */
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct subcommand {
    const char *name;
    int (*run)(const bench_options *opt);
    const char *help;    /* one line, for the list */
    const char *details; /* SUBCOMMAND --help: what, how long */
} subcommand;

#define COMMON_OPTIONS                                                        \
    "\noptions:\n"                                                            \
    "  --quick       the subset named above\n"                                 \
    "  --json FILE   one JSON object per line to FILE; '-' writes them to\n"   \
    "                stdout and the tables to stderr (pkv-bench ... | jq)\n"   \
    "  --plot DIR    PNG plots into DIR with gnuplot (installed by\n"          \
    "                tests/deps.sh)\n"

static const subcommand SUBCOMMANDS[] = {
    {"memory", bench_memory,
     "KV memory: static max-length allocation vs paged blocks",
     "KV memory that 100 and 10,000 requests of a length mix use when each\n"
     "reserves max_model_len (static) against pkv's paged block tables\n"
     "(Llama-3-8B-like geometry, f16, block 16), and what n parallel\n"
     "samples of one prompt share. Host-side, deterministic. Plots GiB per\n"
     "request count. Then sequences of 2k, 8k and 32k tokens that fit in 1\n"
     "GiB with and without hybrid memory (Gemma 3 270M's windows, and a\n"
     "Llama-like geometry without), f16 and U8, from engines on the CPU\n"
     "backend. About 30 s on a quiet 2-core machine, most of it the 32k\n"
     "prompts' attention (--quick: 2k and 8k, about 7 s)."},
    {"scheduler", bench_scheduler,
     "host microseconds per step at 1 to 1,024 running sequences",
     "Host time of step_begin + step_end per decode step (attention\n"
     "excluded) at 1 to 1,024 running sequences, then 256 and 1,024 over 64\n"
     "tenants with quotas and 10,000 waiting, then 256 with 2,048-token\n"
     "prompts instead of 64; warm, then cold (caches evicted before\n"
     "step_begin and step_end, as a model's forward pass would). Plots\n"
     "us/step. About 60 s on a 2-core machine with a 260 MB last-level\n"
     "cache, most of it evicting and the long prompts' prefill (--quick:\n"
     "1 and 256, and the loaded 256, about 10 s)."},
    {"serve", bench_serve,
     "llama model over an arrival trace: continuous vs static batching",
     "A small llama-architecture model (examples/llama) served over a\n"
     "Poisson arrival trace by the example hosts' serving loop: continuous\n"
     "batching with pkv against static batching; tokens/s, latency\n"
     "percentiles, KV utilisation. Plots KV use over time and the\n"
     "inter-token latency CDF. Progress on stderr.\n"
     "80 requests; --quick 20, about 1.5 minutes on a 2-core machine (93 s\n"
     "measured), most of it the model's forward passes.\n"
     "--model gemma3 or smollm2: the same on Gemma 3 270M or\n"
     "SmolLM2-135M-Instruct (examples/gguf, from setup.sh's cache),\n"
     "random token ids as prompts; gemma3 --quick about 4 minutes (247 s\n"
     "measured beside another busy process); --threads N: ggml's threads\n"
     "(default: every core).\n"
     "--speculative instead: decode tokens/s of one sequence (32-token\n"
     "prompt, 128 new tokens: the latency case drafts are for) with 4\n"
     "drafts per step (pkv_seq_propose) right with probability 0.5, 0.7\n"
     "and 0.9, against plain decoding, greedy; every run must give the\n"
     "plain run's tokens. The draft model is simulated and not timed.\n"
     "About 30 s; --quick p 0.7 only."},
    {"restart", bench_restart,
     "first token of a 2,000-token prompt: cold vs a reloaded prefix cache",
     "Time to first token of a 2,000-token shared prompt through the llama\n"
     "example's model (random weights, CPU backend, f16 KV) on a cold\n"
     "engine, against a new engine that loaded the prefix cache the first\n"
     "one saved (pkv_engine_save/load_prefix_cache); both must sample the\n"
     "same first token. Nothing to plot. 5 rounds, about 25 seconds on a\n"
     "2-core machine; --quick 1 round (4.5 s measured)."},
    {"seal", bench_seal,
     "KV store saves and installs of 1 MiB values, sealed against not",
     "What a deployment key (pkv_engine_params.seal_key) costs the KV\n"
     "store's path: per value of 1 MiB of f16 KV (16 layers, 8 kv heads,\n"
     "head_dim 128, blocks of 16), the step_end that saves a prompt's 8\n"
     "blocks (read out, checksummed, sealed) and the step_begin that\n"
     "installs them in a second engine (opened, verified, written into\n"
     "its pool), with a key and without, taking turns in one run; the\n"
     "in-process store of the tests, CPU backend. Then the hashes alone:\n"
     "a block's digest (the store's names, SHA-256) for blocks of 16 and\n"
     "64 tokens, and the checksum of one unsealed value (XXH3). Medians\n"
     "of 9 rounds, about 3 s on a 2-core machine; --quick 3 rounds, under\n"
     "1 s."},
    {"attend", bench_attend,
     "CPU attention: decode at 2k-32k and a prompt, per KV format",
     "The CPU backend's attention, per layer: decode (one row) at context\n"
     "2k, 8k and 32k, and a 2,048-token prompt's rows in one step, for f16,\n"
     "u8, u8 with per-token keys, u4 and u8k-u4v, each version of the\n"
     "arithmetic this processor runs (portable, avx2, avx512:\n"
     "PKV_CPU_ATTEND) on 1 and 2 threads; Gemma 3 270M's geometry and\n"
     "SmolLM2-135M's, blocks of 16 in a random order. ms per attend\n"
     "(median of 7, the formats taking turns), decode's KV GB/s against\n"
     "the memory read bandwidth measured first, and time over f16's.\n"
     "--quick: Gemma's geometry, decode at 8k and the prompt, the fastest\n"
     "version on 2 threads, 3 runs."},
    {"kernels", bench_kernels,
     "OpenCL decode attention: KV GB/s vs memory bandwidth, paged vs "
     "contiguous",
     "The OpenCL decode kernel pkv picks for the device (PKV_OPENCL_DECODE\n"
     "forces a variant): ms per step, KV GB/s and share of the machine's\n"
     "read bandwidth (measured first), paged/contiguous, over dtype, context,\n"
     "batch and block size; checks the outputs against a C reference first.\n"
     "Plots GB/s. Progress on stderr. 83 cases (f32, f16, u8, u4, u8k-u4v);\n"
     "--quick 5 (u8, u4, u8k-u4v and f16 at ctx 4096, batch 16; u8 at block\n"
     "64), about 16 seconds on a 2-core machine's CPU device (PoCL).\n"
     "--resident: every sequence's block table cycles through the same 8\n"
     "blocks, so the paged kernel's KV stays in cache: its compute floor\n"
     "(ms and CPU ms of the paged kernel; GB/s count the bytes it reads).\n"
     "The contiguous kernel and the bandwidth references still read\n"
     "beyond the cache, so paged/contig and the shares compare the floor\n"
     "with them."},
    {"isa", bench_isa,
     "Intel GPU code: registers, spills, instructions per KV byte",
     "The kernels pkv picks on an Intel GPU, compiled by Intel's offline\n"
     "compiler (ocloc) for tgllp, adl-p and dg2-g10 over head_dim, GQA,\n"
     "block size and KV dtype (tests/check_isa.sh): per kernel the SIMD\n"
     "width, instructions, spill and private memory bytes, for the\n"
     "decode partials the hottest loops' instructions and ALU cycles per\n"
     "K and V byte, for the prefill kernels per product\n"
     "(docs/performance.md, \"Intel GPU code\"). Fails on a spill, or on\n"
     "private memory in a kernel pkv picks on an Intel GPU. Table on\n"
     "stderr. Each build's lines are cached: every one of the 699 made\n"
     "afresh, about 5.5 minutes on a 2-core machine; --quick (tgllp and\n"
     "dg2-g10, head_dim 128 and 256, and a few geometries beyond: 206\n"
     "builds) about 2 minutes; from the cache seconds. Skipped without\n"
     "ocloc (Debian package intel-opencl-icd)."},
#ifdef PKV_BENCH_OPENCL
    {"interop", bench_interop,
     "attend with host tensors copied, host memory wrapped, and cl_mem",
     "pkv_engine_attend on the OpenCL backend with host tensors (copied),\n"
     "host memory the host wrapped once (CL_MEM_USE_HOST_PTR, passed as\n"
     "cl_mem), and device cl_mem tensors, taking turns step by step; us per\n"
     "attend and bytes copied. Nothing to plot. Progress on stderr.\n"
     "About 20 seconds either way on a 2-core machine (20.5 s, --quick with\n"
     "12 instead of 60 decode steps per mode 18.5 s, PoCL)."},
#endif
#ifdef PKV_BENCH_REDIS
    {"store", bench_store,
     "first token of a 2,000-token prompt: cold vs loaded from Redis",
     "Time to first token of a 2,000-token shared prompt (restart's model\n"
     "and prompt, CPU backend), f16 and u8 KV, and f16 sealed under a\n"
     "deployment key (seal_key), for N tenants (salts): a\n"
     "cold engine per tenant computes it and saves its blocks to Redis\n"
     "through libpkv_redis; a second engine (a new engine and connector)\n"
     "serves the tenants in turn, loading them (its first request apart,\n"
     "the medians over the others); every run must sample the same first\n"
     "token. Then load GB/s: the engine's wait, the connector alone (one\n"
     "MGET) and redis-benchmark against the same server (GET -P 16 at the\n"
     "same value size; MGET of the same keys). Starts its own\n"
     "redis-server on a free loopback port (skips without one) unless\n"
     "--redis names a server (keys under a prefix of the run's, deleted\n"
     "at the end). About 16 s on a quiet 2-core machine; --quick 2\n"
     "tenants and a tenth of the redis-benchmark requests, about 5 s.\n"
     "  --prompt N         prompt tokens, 17 to 2047 (default 2000)\n"
     "  --runs N           tenants, 2 to 99 (default 5)\n"
     "  --redis HOST:PORT  an existing server instead of its own"},
#endif
};
#define NUM_SUBCOMMANDS (sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0])

#ifdef PKV_BENCH_REDIS
#define STORE_USAGE                                                           \
    "       pkv-bench store [--prompt N] [--runs N] [--redis HOST:PORT] "    \
    "[...]\n"
#else
#define STORE_USAGE ""
#endif

static int usage(FILE *to)
{
    fprintf(to, "usage: pkv-bench SUBCOMMAND [--quick] [--json FILE|-] "
                "[--plot DIR]\n"
                "       pkv-bench serve --speculative [...]\n"
                "       pkv-bench serve --model gemma3 [--threads N] "
                "[...]\n"
                "       pkv-bench kernels --resident [...]\n" STORE_USAGE
                "       pkv-bench SUBCOMMAND --help\n\n"
                "subcommands:\n");
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
    bench_options opt = {0, NULL, NULL, 0, NULL, 0, 0, NULL, 0};
    int speculative = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            for (size_t k = 0; k < NUM_SUBCOMMANDS; k++)
                if (strcmp(argv[1], SUBCOMMANDS[k].name) == 0) {
                    printf("pkv-bench %s: %s\n\n%s\n%s",
                           SUBCOMMANDS[k].name, SUBCOMMANDS[k].help,
                           SUBCOMMANDS[k].details, COMMON_OPTIONS);
                    return 0;
                }
            if (strcmp(argv[1], "all") == 0) {
                printf("pkv-bench all: every subcommand in turn\n%s",
                       COMMON_OPTIONS);
                return 0;
            }
            fprintf(stderr, "pkv-bench: unknown subcommand %s\n", argv[1]);
            return usage(stderr);
        }
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            opt.quick = 1;
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            const char *path = argv[++i];
            if (strcmp(path, "-") == 0) {
                /* JSON keeps stdout; everything the subcommands print
                 * (tables, notes) goes to stderr. */
                fflush(stdout);
                int json_fd = dup(STDOUT_FILENO);
                opt.json = json_fd < 0 ? NULL : fdopen(json_fd, "w");
                if (opt.json != NULL)
                    dup2(STDERR_FILENO, STDOUT_FILENO);
            } else {
                opt.json = fopen(path, "w");
            }
            if (opt.json == NULL) {
                fprintf(stderr, "pkv-bench: cannot write %s\n", path);
                return 1;
            }
        } else if (strcmp(argv[i], "--speculative") == 0 &&
                   strcmp(argv[1], "serve") == 0) {
            speculative = 1;
        } else if (strcmp(argv[i], "--resident") == 0 &&
                   strcmp(argv[1], "kernels") == 0) {
            opt.resident = 1;
        } else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc &&
                   strcmp(argv[1], "serve") == 0) {
            opt.model = argv[++i];
            if (strcmp(opt.model, "llama") != 0 &&
                strcmp(opt.model, "gemma3") != 0 &&
                strcmp(opt.model, "smollm2") != 0) {
                fprintf(stderr, "pkv-bench: --model %s: expected llama, "
                                "gemma3 or smollm2\n",
                        opt.model);
                return 2;
            }
        } else if (((strcmp(argv[i], "--prompt") == 0 ||
                     strcmp(argv[i], "--runs") == 0) &&
                    i + 1 < argc && strcmp(argv[1], "store") == 0) ||
                   (strcmp(argv[i], "--threads") == 0 && i + 1 < argc &&
                    strcmp(argv[1], "serve") == 0)) {
            const char *value = argv[i + 1];
            char *end = NULL;
            unsigned long n = strtoul(value, &end, 10);
            if (value[0] < '0' || value[0] > '9' || *end != '\0' ||
                n == 0 || n > 1000000) {
                fprintf(stderr, "pkv-bench: %s %s: expected a positive "
                                "count\n",
                        argv[i], value);
                return 2;
            }
            if (strcmp(argv[i], "--prompt") == 0)
                opt.prompt = (uint32_t)n;
            else if (strcmp(argv[i], "--threads") == 0)
                opt.threads = (uint32_t)n;
            else
                opt.runs = (uint32_t)n;
            i++;
        } else if (strcmp(argv[i], "--redis") == 0 && i + 1 < argc &&
                   strcmp(argv[1], "store") == 0) {
            opt.redis = argv[++i];
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
            /* Only serve takes --speculative: a benchmark of its own
             * (bench_speculative.c) instead of bench_serve. */
            rc |= speculative ? bench_speculative(&opt)
                              : SUBCOMMANDS[i].run(&opt);
            ran = 1;
        }
    }
    if (opt.json != NULL)
        fclose(opt.json);
    if (!ran) {
        fprintf(stderr, "pkv-bench: unknown subcommand %s\n", argv[1]);
        return usage(stderr);
    }
    return rc;
}
