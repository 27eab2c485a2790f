/* SPDX-License-Identifier: MIT */
/* pkv-bench: the llama example's model configurations of serve, serve
 * --speculative and restart, in one place (declared in bench_llama.h). */
#include "bench_llama.h"

llama_config bench_serve_config(void)
{
    llama_config c;
    c.dim = 1024;
    c.hidden_dim = 2816;
    c.num_layers = 4;
    c.num_heads = 16;
    c.num_kv_heads = 4;
    c.vocab_size = 512;
    c.seq_len = 1024;
    c.shared_classifier = 0;
    return c;
}

llama_config bench_restart_config(void)
{
    llama_config c;
    c.dim = 256;
    c.hidden_dim = 704;
    c.num_layers = 2;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.vocab_size = 512;
    c.seq_len = 2048;
    c.shared_classifier = 0;
    return c;
}
