/* SPDX-License-Identifier: MIT */
/*
 * The attention backend: an ops table the engine calls, implemented by the
 * CPU reference backend (backend_cpu.c) and the OpenCL backend.
 *
 * A backend owns the KV cache (one arena per layer, or per slot of a group
 * of layers with hybrid memory; laid out as kv_layout.h says) and, for
 * U8, the staging tails. It makes no scheduling decision:
 * the engine owns block ids, slots and the assignment of staging tails.
 *
 * Call order per step:
 *
 *     begin_step(step)                      once: validate, take the step
 *     for each layer: append(layer, k, v); attend(layer, q, out, ...)
 *
 * copy_blocks, copy_stages, swap_* and stage_* may be called between steps
 * (before begin_step, or after the last attend of a step).
 *
 * Staging tails (U8 only). A U8 block is quantized once, when it is full
 * (frozen). Until then the tokens of a sequence's last, partly filled block
 * live in full precision (f32) in a staging tail: one block's worth of K
 * and V for every layer and kv head. The engine gives every running U8
 * sequence its own tail (pkv__step.stages) and keeps it for the sequence's
 * life. So, for U8:
 *   - a block that is not full has no contents in the arena; its tokens are
 *     in the tail, at offset (token index % block_size);
 *   - appending the token at offset block_size - 1 quantizes the tail into
 *     the block named by that row's slot (freeze); the tail then starts over;
 *   - fork: copy the parent's tail to the child's (copy_stages); copying a
 *     partly filled block (copy-on-write) is then unnecessary, since the
 *     child's tokens of that block are in its own tail;
 *   - swap: stage_out/stage_in move a tail with the sequence's blocks;
 *   - truncating a sequence into a frozen block would need requantization,
 *     which pkv never does: recompute from the block boundary instead, or,
 *     with a rollback window (rollback.h), copy the block's f32 rows, which
 *     the freeze also wrote to the row's pkv__step.windows tail, back into
 *     the working tail (copy_stages).
 *
 * Errors: every op that can fail returns a pkv_status, sets this thread's
 * message (pkv__fail, error.h) and changes nothing on failure: all inputs
 * are checked before the first byte is written.
 *
 * Non-finite K/V: append rejects a step whose K or V holds a NaN or an
 * infinity with PKV_ERR_NON_FINITE, and (f16 and u8 caches) one holding a
 * value beyond +-65504, the f16 range, with PKV_ERR_UNSUPPORTED. Nothing is
 * written, so a NaN never reaches any sequence's blocks. Q is not checked:
 * a NaN query row yields NaN in its own output rows only.
 *
 * Tensors are f32 rows in host memory: q and out [num_tokens][num_q_heads]
 * [head_dim], k and v [num_tokens][num_kv_heads][head_dim].
 */
#ifndef PKV_BACKEND_H
#define PKV_BACKEND_H

#include "alloc.h"
#include "quant.h"
#include "kv/table.h"

#include <stddef.h>
#include <stdint.h>

/* Fixed at creation. Geometry limits: head_dim a multiple of 4 up to
 * PKV_LAYOUT_MAX_HEAD_DIM, block_size a power of two up to
 * PKV_LAYOUT_MAX_BLOCK_SIZE, num_q_heads a multiple of num_kv_heads
 * (PKV_ERR_UNSUPPORTED otherwise). */
/* No staging tail. */
#define PKV__NO_STAGE UINT32_MAX

typedef struct pkv__backend_config {
    uint32_t num_layers;
    uint32_t num_q_heads;
    uint32_t num_kv_heads;
    uint32_t head_dim;
    uint32_t block_size;
    uint32_t num_blocks; /* block 0 is the engine's null block: never
                            written by append */
    int32_t kv_dtype;    /* pkv_kv_dtype */
    int32_t key_quant;   /* U8/U4: PKV_QUANT_GROUP_PER_CHANNEL or _PER_TOKEN */
    int32_t value_quant; /* (the engine resolves PKV_QUANT_GROUP_DEFAULT) */
    uint32_t u4_group;   /* U4 parts: channels of a per-token group (a
                            multiple of 8 dividing head_dim, or head_dim) */
    uint32_t num_stages; /* quantized dtypes: staging tails (the most
                            running sequences); f32, f16: 0 */
    /* The largest step the engine can plan: sequences, and tokens of one
     * sequence (max_num_seqs, max_model_len). A backend refuses at create
     * a config whose largest step it could not take (OpenCL: its block
     * tables, PKV_ERR_DEVICE_MEMORY), so that begin_step never refuses a
     * step the engine planned. 0: no bound given (tests that build steps
     * by hand). */
    uint32_t max_step_seqs;
    uint32_t max_seq_tokens;
    /* The host's threads for attention (pkv_engine_params.parallel):
     * NULL, or a function that runs every task on up to `workers`
     * threads (0 counts as 1). Backends that do their work elsewhere
     * ignore them. */
    pkv_parallel_fn parallel;
    void *parallel_user;
    uint32_t workers;
    /* Hybrid memory (docs/design.md, "Hybrid memory"): layers grouped by
     * their window, each group with its own block tables and slots in the
     * step. Layer l keeps its KV in arena layer_arena[l] (< num_arenas)
     * and reads group layer_group[l]'s tables and slots (< num_groups); a
     * block id names that block in every arena, so the groups share one
     * pool. group_windows[g] is the window of group g's layers (0: none):
     * a table of a windowed group may hold PKV__NULL_BLOCK for the blocks
     * that lie wholly behind the window of its sequence's first row in
     * the step, which no row reads. num_groups 0 or 1 with the three
     * arrays NULL and num_arenas 0: one group, one arena per layer. The
     * arrays must outlive the backend. */
    uint32_t num_groups;
    uint32_t num_arenas;
    const uint32_t *layer_arena;    /* [num_layers] */
    const uint32_t *layer_group;    /* [num_layers] */
    const uint32_t *group_windows;  /* [num_groups] */
} pkv__backend_config;

/*
 * One step's ragged batch (DESIGN.md section 3). Sequence i owns query rows
 * [query_start[i], query_start[i+1]); they are the last of its
 * context_lens[i] tokens, in order, so row r of the sequence is token
 * context_lens[i] - rows + r and sees tokens up to and including itself
 * (causal, aligned to the end of the context). The host's RoPE positions are
 * therefore not needed here and may differ from token indices.
 */
typedef struct pkv__step {
    uint32_t num_seqs;
    uint32_t num_tokens;         /* T, rows of q/k/v/out */
    const uint32_t *query_start; /* [num_seqs + 1]: 0, ..., num_tokens */
    const uint32_t *context_lens; /* [num_seqs]: >= the sequence's rows,
                                     and <= max_blocks_per_seq * block_size */
    /* [groups][num_seqs] (groups: the config's num_groups, at least 1):
     * sequence i's block ids in group g at [g * num_seqs + i],
     * ceil(context_len / block_size) of them (no more are read); the
     * sequences' own tables, not a copy, so that a step costs nothing per
     * block it does not add. max_blocks_per_seq is the most any of them
     * holds. */
    const uint32_t *const *block_tables;
    uint32_t max_blocks_per_seq;
    /* [groups][num_seqs] or NULL: a stamp of each table
     * (pkv__table.version). A row whose non-zero stamp equals the one the
     * same row had in an earlier step holds the same ids (the first as
     * many as that step read), so a backend need not check or upload
     * them again; 0, or NULL for every row, says nothing (tests that
     * build steps by hand). */
    const uint64_t *table_versions;
    /* [groups][num_tokens]: block * block_size + offset where row t's K/V
     * go in group g, at [g * num_tokens + t]; block 0 is refused. */
    const uint64_t *slots;
    const uint32_t *stages; /* [num_seqs]: staging tail of each sequence,
                               < num_stages (U8); NULL for f32/f16 */
    const uint32_t *windows; /* U8, [num_tokens] or NULL (none): for a row
                                that freezes its block, a tail (< num_stages,
                                no tail this step writes or freezes from)
                                that also receives the block's f32 rows, or
                                PKV__NO_STAGE; other rows' are not read */
} pkv__step;

typedef struct pkv__backend pkv__backend;

typedef struct pkv__backend_ops {
    const char *name;

    /* Allocate the arenas (and tails). PKV_ERR_UNSUPPORTED for a geometry
     * or dtype the backend cannot run, PKV_ERR_OUT_OF_MEMORY (host) or
     * PKV_ERR_DEVICE_MEMORY (device). Arenas start zeroed; their contents
     * are meaningless until written. *out is NULL on failure. */
    pkv_status (*create)(const pkv__backend_config *config,
                         const pkv__allocator *alloc, pkv__backend **out);
    void (*destroy)(pkv__backend *backend); /* NULL: no-op */

    /* Validate the step (every id, slot, length and tail against the
     * config) and take it for the following append/attend calls. Nothing
     * else: no allocation, no device call, so it fails only for a step
     * that breaks this contract or that the backend cannot represent
     * (PKV_ERR_UNSUPPORTED), and the engine never has to undo a plan
     * because of a device. Buffers and uploads wait for the step's first
     * append or attend, which the engine's host may repeat.
     * Ownership: the arrays are borrowed until the next begin_step; the
     * caller keeps them valid and unchanged until then. */
    pkv_status (*begin_step)(pkv__backend *backend, const pkv__step *step);

    /* Write this step's K and V rows of one layer to their slots (f32,
     * f16), or to the sequences' tails, freezing the tails that fill (u8).
     * Every value is finite, and within +-65504 for f16 and u8 caches:
     * the engine zeroes the rows that are not, and is the only caller. */
    pkv_status (*append)(pkv__backend *backend, uint32_t layer,
                         const float *k, const float *v);

    /* Paged attention of one layer over the step: out = softmax(scale *
     * q k^T, causal) v, per query head h against kv head
     * h / (num_q_heads / num_kv_heads). scale 0 means 1/sqrt(head_dim).
     * sliding_window w > 0: row at token index p sees tokens
     * [p - w + 1, p] only; 0: no window. out may not alias q. */
    pkv_status (*attend)(pkv__backend *backend, uint32_t layer,
                         const float *q, float *out, float scale,
                         uint32_t sliding_window);

    /* For each pair, copy block src to block dst in every arena, in order.
     * Ids < num_blocks; dst != 0. */
    pkv_status (*copy_blocks)(pkv__backend *backend,
                              const pkv__block_copy *pairs, uint32_t n);

    /* For each pair, copy staging tail src to tail dst (U8: fork, and a
     * rollback window restoring a block). */
    pkv_status (*copy_stages)(pkv__backend *backend,
                              const pkv__block_copy *pairs, uint32_t n);

    /* Swap: blocks[i] over every arena to/from host[i * swap_block_bytes],
     * arena after arena (pkv__backend_swap_block_bytes). */
    pkv_status (*swap_out)(pkv__backend *backend, const uint32_t *blocks,
                           uint32_t n, void *host);
    pkv_status (*swap_in)(pkv__backend *backend, const void *host,
                          const uint32_t *blocks, uint32_t n);

    /* A staging tail to/from host (pkv__backend_stage_bytes bytes). */
    pkv_status (*stage_out)(pkv__backend *backend, uint32_t stage,
                            void *host);
    pkv_status (*stage_in)(pkv__backend *backend, const void *host,
                           uint32_t stage);

    /* append, then attend, of one layer in one call: the effects and
     * errors of the two calls in a row (attend is not run when append
     * fails), for a backend that then waits for its device once rather
     * than twice. NULL: the engine calls append and attend. */
    pkv_status (*append_attend)(pkv__backend *backend, uint32_t layer,
                                const float *k, const float *v,
                                const float *q, float *out, float scale,
                                uint32_t sliding_window);

    /* append + attend of one layer with device-memory tensors
     * (PKV_TENSOR_MEMORY_OPENCL, whose shapes and dtypes the engine checked):
     * the backend checks the buffers (context, size, alignment) and only
     * enqueues the work, no wait; K and V are not scanned for non-finite
     * values. NULL: the backend takes host memory only. */
    pkv_status (*attend_device)(pkv__backend *backend, uint32_t layer,
                                const pkv_tensor *q, const pkv_tensor *k,
                                const pkv_tensor *v, const pkv_tensor *out,
                                float scale, uint32_t sliding_window);
} pkv__backend_ops;

extern const pkv__backend_ops pkv__backend_cpu;

/* A backend made for an engine, its ops and its state: what the engine's
 * step calls (attention) and what the KV-cache manager moves KV with, one
 * object for both. */
typedef struct pkv__device {
    const pkv__backend_ops *ops;
    pkv__backend *backend;
} pkv__device;

/* Choosing the backend (backend.c). */

/* Create the backend params ask for (PKV_BACKEND_KIND_AUTO: OpenCL when a
 * device exists and its backend can be made, else the CPU backend, with a
 * log line saying why), for config: *ops and *backend on success, both
 * NULL on failure. */
pkv_status pkv__backend_create_for(const pkv_engine_params *params,
                                   const pkv__backend_config *config,
                                   const pkv__allocator *alloc,
                                   const pkv__backend_ops **ops,
                                   pkv__backend **backend);

/* block_size 0 follows the device: 16 tokens on a GPU, where a block
 * matches the subgroup width; 64 on a CPU device or the CPU backend, where
 * long runs of contiguous memory keep the prefetchers busy (docs/design.md,
 * "Block size", has the measured trade-off). */
uint32_t pkv__backend_default_block_size(const pkv_engine_params *params);

/* Before pkv's first OpenCL call: log which ICD files the loader reads, so
 * that a runtime that aborts the process as the loader loads it is named
 * in the host's log. */
void pkv__backend_log_loader(const pkv_engine_params *params);

/* A config's layout, which the backends and the KV-cache manager share
 * (backend_layout.c). */

/* Bytes of one block in one layer's arena. */
size_t pkv__backend_layer_block_bytes(const pkv__backend_config *config);

/* Whether config's blocks are quantized (U8, U4, U8K_U4V): such caches
 * have staging tails and freeze a block when it fills. */
int pkv__backend_quantized(const pkv__backend_config *config);

/* The dtype of config's K parts (kv 0) or V parts (kv 1), and how a
 * quantized one groups its values. */
int32_t pkv__backend_part_dtype(const pkv__backend_config *config, int kv);
pkv__qformat pkv__backend_qformat(const pkv__backend_config *config, int kv);

/* Bytes of one K (kv 0) or V (kv 1) part of one kv head of one block. */
size_t pkv__backend_part_bytes(const pkv__backend_config *config, int kv);

/* Layers' arenas and groups (the config's maps, or one arena per layer
 * and one group). */
uint32_t pkv__backend_num_arenas(const pkv__backend_config *config);
uint32_t pkv__backend_num_groups(const pkv__backend_config *config);
uint32_t pkv__backend_arena(const pkv__backend_config *config,
                            uint32_t layer);
uint32_t pkv__backend_group(const pkv__backend_config *config,
                            uint32_t layer);

/* Bytes of one block over every arena: the unit of swap. */
size_t pkv__backend_swap_block_bytes(const pkv__backend_config *config);

/* Bytes of one staging tail over every layer: K and V of block_size tokens
 * per kv head, f32. */
size_t pkv__backend_stage_bytes(const pkv__backend_config *config);

/* Host bytes of num_blocks blocks swapped out (or exported), followed by
 * the staging tail with a U8 cache. */
size_t pkv__backend_swap_bytes(const pkv__backend_config *config,
                               uint32_t num_blocks);

/* The checks every backend makes (backend_check.c). */

/* PKV_OK or the status create must return for this config, with the
 * thread's message set. */
pkv_status pkv__backend_config_check(const pkv__backend_config *config);

/* What a backend has already read of step rows' block tables, row by
 * row (pkv__step.table_versions): the table of version `version` had its
 * first `blocks` ids checked (or uploaded). A version names one table
 * state, so an entry stays true until forgotten, whatever steps came
 * between. */
typedef struct pkv__table_row_seen {
    uint64_t version;
    uint32_t blocks;
} pkv__table_row_seen;

typedef struct pkv__tables_seen {
    pkv__table_row_seen *rows; /* [capacity], version 0: nothing */
    uint32_t capacity;
} pkv__tables_seen;

/* Room for `rows` rows (the config's max_step_seqs; 0: none, so nothing
 * is ever known). PKV_ERR_OUT_OF_MEMORY with the thread's message. */
pkv_status pkv__tables_seen_init(pkv__tables_seen *seen,
                                 const pkv__allocator *alloc, uint32_t rows);
void pkv__tables_seen_release(pkv__tables_seen *seen,
                              const pkv__allocator *alloc);
/* Whether row `row` of step s holds nothing past what seen knows: the
 * same version, at most `blocks` ids of it read now. */
int pkv__tables_seen_knows(const pkv__tables_seen *seen, const pkv__step *s,
                           uint32_t row, uint32_t blocks);
/* Row `row` of step s, its first `blocks` ids, has been read. */
void pkv__tables_seen_note(pkv__tables_seen *seen, const pkv__step *s,
                           uint32_t row, uint32_t blocks);
/* Know nothing (the copy it describes is gone). */
void pkv__tables_seen_forget(pkv__tables_seen *seen);

/* The begin_step check. The block ids of a row that `checked` (may be
 * NULL) knows are not checked again, so that a step costs the check
 * nothing per block it does not add; checked learns every row that
 * passes. */
pkv_status pkv__backend_step_check(const pkv__backend_config *config,
                                   const pkv__step *step,
                                   pkv__tables_seen *checked);

/* The append/attend check: a step has begun (step is the one begin_step
 * took, NULL if none), the layer exists, the tensors are set. */
pkv_status pkv__backend_layer_check(const pkv__backend_config *config,
                                    const pkv__step *step, uint32_t layer,
                                    const void *in, const void *out);

/* The copy_blocks (blocks set) or copy_stages check: ids in range, and no
 * block copy into the null block. */
pkv_status pkv__backend_pairs_check(const pkv__backend_config *config,
                                    const pkv__block_copy *pairs, uint32_t n,
                                    int blocks);

/* The swap check: ids in range (writable is set for swap_in: not the null
 * block). */
pkv_status pkv__backend_ids_check(const pkv__backend_config *config,
                                  const uint32_t *blocks, uint32_t n,
                                  int writable);

#endif
