/* SPDX-License-Identifier: MIT */
/*
 * pkv: a paged KV-cache engine for C and C++ inference programs.
 *
 * This is the one stable public header. It depends on <stddef.h> and
 * <stdint.h> only and declares no OpenCL types (see pkv_opencl.h for interop).
 *
 * Conventions that hold for every declaration below unless its comment says
 * otherwise:
 *
 * - Status: every fallible function returns pkv_status: PKV_OK (0) on
 *   success, a negative PKV_ERR_* value on failure. A failed call changes
 *   nothing: every object is as it was before the call, and every pointer
 *   out-parameter is set to NULL (numeric out-parameters to 0).
 * - Threads: a pkv_engine is not thread-safe; one thread at a time may call
 *   functions on it (the host's stepping thread). Functions that take no
 *   engine are thread-safe. Exceptions are written on the function.
 * - Ownership: inputs are borrowed for the duration of the call. Pointers
 *   the engine returns are owned by the engine and stay valid until the next
 *   call that mutates the engine, or its destruction.
 * - Param and stats structs start with `uint32_t struct_size`. Fill them
 *   with the matching *_init() function, then change the fields you need. The
 *   library reads only the fields that fit in struct_size, so a program built
 *   against an older header keeps working with a newer library.
 *
 * Sections, in order: version; status; enums; callbacks (KV events
 * among them); KV store (the connector); engine (create, destroy,
 * errors); sequences (add, abort, fork); state transfer (truncate,
 * propose, export, import); prefix cache (save, load, lookup, reset, a
 * prompt's keys in the KV store); step (the batch,
 * tensors, step_begin, attend, step_end); introspection (stats, block
 * tables). This header says what a host can rely on; how it works inside
 * is in docs/design.md.
 */
#ifndef PKV_PKV_H
#define PKV_PKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- export */

#if defined(PKV_STATIC_DEFINE)
#define PKV_API
#elif defined(_WIN32)
#if defined(PKV_BUILDING_LIBRARY)
#define PKV_API __declspec(dllexport)
#else
#define PKV_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#define PKV_API __attribute__((visibility("default")))
#else
#define PKV_API
#endif

/* --------------------------------------------------------------- version */

/*
 * The header's version. A declaration added after 0.1.0 says in its
 * comment the version it came with ("Since 0.2.0."): a host that needs it
 * tests PKV_VERSION_NUMBER at compile time and pkv_version_number() at run
 * time (CHANGELOG.md lists every addition).
 */
#define PKV_VERSION_MAJOR 0
#define PKV_VERSION_MINOR 3
#define PKV_VERSION_PATCH 0
#define PKV_VERSION_STRING "0.3.0"
/* One integer, comparable: 10000 * major + 100 * minor + patch. */
#define PKV_VERSION_NUMBER \
    (PKV_VERSION_MAJOR * 10000 + PKV_VERSION_MINOR * 100 + PKV_VERSION_PATCH)

/*
 * The version of the library actually linked, as PKV_VERSION_NUMBER.
 * Compare with PKV_VERSION_NUMBER to detect a header/library mismatch.
 * Thread-safety: safe from any thread. Ownership: nothing to free.
 */
PKV_API uint32_t pkv_version_number(void);

/*
 * The version of the library actually linked, as "major.minor.patch".
 * Thread-safety: safe from any thread.
 * Ownership: a static string; never free it.
 */
PKV_API const char *pkv_version_string(void);

/* ---------------------------------------------------------------- status */

/*
 * Every status: X(name, value, message). Values are fixed forever and never
 * reused; a retired status keeps its value as a placeholder.
 * PKV_ERR_STORE: since 0.2.0.
 */
#define PKV_STATUS_LIST(X)                                                    \
    X(PKV_OK, 0, "success")                                                   \
    X(PKV_ERR_INVALID_ARGUMENT, -1, "invalid argument")                       \
    X(PKV_ERR_STRUCT_SIZE, -2,                                                \
      "struct_size is not one this library knows (call the *_init function)") \
    X(PKV_ERR_OUT_OF_MEMORY, -3, "host memory allocation failed")             \
    X(PKV_ERR_NO_BLOCKS, -4, "not enough free KV cache blocks")               \
    X(PKV_ERR_UNSUPPORTED, -5, "configuration not supported")                 \
    X(PKV_ERR_NOT_FOUND, -6, "no such sequence")                              \
    X(PKV_ERR_BAD_STATE, -7, "call not valid in the current state")           \
    X(PKV_ERR_NON_FINITE, -8, "input holds NaN or infinity")                  \
    X(PKV_ERR_DEVICE, -9, "OpenCL device error")                              \
    X(PKV_ERR_BUILD, -10, "OpenCL program build failed")                      \
    X(PKV_ERR_DEVICE_MEMORY, -11, "configuration does not fit the device")    \
    X(PKV_ERR_QUOTA, -12, "block quota exceeded")                             \
    X(PKV_ERR_INTERNAL, -13, "internal invariant violated (a pkv bug)")     \
    X(PKV_ERR_STORE, -14, "the KV store failed or did not answer")

#define PKV_STATUS_ENUM_ITEM_(name, value, message) name = (value),
typedef enum pkv_status { PKV_STATUS_LIST(PKV_STATUS_ENUM_ITEM_) } pkv_status;
#undef PKV_STATUS_ENUM_ITEM_

/*
 * The enumerator's name, e.g. "PKV_ERR_NO_BLOCKS"; "PKV_UNKNOWN_STATUS" for
 * a value that is not a status.
 * Thread-safety: safe from any thread.
 * Ownership: a static string; never free it.
 */
PKV_API const char *pkv_status_name(pkv_status status);

/*
 * A one-line English description of the status; "unknown status" for a value
 * that is not a status.
 * Thread-safety: safe from any thread.
 * Ownership: a static string; never free it.
 */
PKV_API const char *pkv_status_string(pkv_status status);

/*
 * The message of the last failure on this thread that happened before an
 * engine existed (pkv_engine_create), or "" if there was none.
 * Thread-safety: the message is thread-local.
 * Ownership: valid until the next pkv call on this thread; never free it.
 */
PKV_API const char *pkv_last_error(void);

/* ----------------------------------------------------------------- enums */

/*
 * Each enum's constants are named after it, PKV_<TYPE>_<VALUE> (e.g.
 * PKV_SCHED_POLICY_FCFS of pkv_sched_policy), since 0.2.0; the earlier
 * names stay as deprecated aliases with the same values. pkv_status keeps
 * PKV_OK and PKV_ERR_*, the names pkv_status_name returns.
 */

/*
 * Element type of the KV cache. Stored in structs as int32_t.
 * U8, U4 and U8K_U4V are the quantized caches: a block is quantized once,
 * when it is full (the block is then frozen: its codes never change), and
 * the last block of a sequence is kept in f32 until then, so every stored
 * element is within half its group's step of its input and is never
 * quantized twice (mechanism: docs/design.md, "U8 quantization" and "U4").
 * What this header says of U8 caches (frozen blocks, staging tails,
 * u8_rollback_blocks, exports) holds for all three.
 */
typedef enum pkv_kv_dtype {
    PKV_KV_DTYPE_F32 = 0, /* 4 bytes per element */
    /* 2 bytes per element (storage only; math in f32) */
    PKV_KV_DTYPE_F16 = 1,
    /* 1 byte per element plus per-group lo/scale (f16) */
    PKV_KV_DTYPE_U8 = 2,
    /* Since 0.2.0. Half a byte per element plus per-group
     * lo/scale (f16); per-token groups of u4_group channels. */
    PKV_KV_DTYPE_U4 = 3,
    /* Since 0.2.0. Keys as U8, values as U4. */
    PKV_KV_DTYPE_U8K_U4V = 4,
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_KV_F32 = PKV_KV_DTYPE_F32,
    PKV_KV_F16 = PKV_KV_DTYPE_F16,
    PKV_KV_U8 = PKV_KV_DTYPE_U8,
    PKV_KV_U4 = PKV_KV_DTYPE_U4,
    PKV_KV_U8K_U4V = PKV_KV_DTYPE_U8K_U4V
} pkv_kv_dtype;

/* How U8 and U4 quantization group values. Stored in structs as int32_t. */
typedef enum pkv_quant_group {
    /* Default for the tensor: per-channel for keys, per-token for values. */
    PKV_QUANT_GROUP_DEFAULT = 0,
    /* One lo/scale per channel, per kv head, over one block's tokens. */
    PKV_QUANT_GROUP_PER_CHANNEL = 1,
    /* One lo/scale per token, per kv head, over the head's channels (U8)
     * or over each run of u4_group channels (U4). */
    PKV_QUANT_GROUP_PER_TOKEN = 2,
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_QUANT_DEFAULT = PKV_QUANT_GROUP_DEFAULT,
    PKV_QUANT_PER_CHANNEL = PKV_QUANT_GROUP_PER_CHANNEL,
    PKV_QUANT_PER_TOKEN = PKV_QUANT_GROUP_PER_TOKEN
} pkv_quant_group;

/* Which attention backend an engine runs on. Stored in structs as int32_t. */
typedef enum pkv_backend_kind {
    /* OpenCL when a device is found (and pkv was built with it), else the
     * CPU reference backend. Also the CPU backend, since 0.2.0, where the
     * device is the CPU itself (PoCL, Intel's CPU runtime) and the host
     * lends at least 2 threads (parallel): it runs faster on them. The
     * log says which. */
    PKV_BACKEND_KIND_AUTO = 0,
    PKV_BACKEND_KIND_CPU = 1,    /* plain C, the reference */
    PKV_BACKEND_KIND_OPENCL = 2, /* an OpenCL device; fails if none fits */
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_BACKEND_AUTO = PKV_BACKEND_KIND_AUTO,
    PKV_BACKEND_CPU = PKV_BACKEND_KIND_CPU,
    PKV_BACKEND_OPENCL = PKV_BACKEND_KIND_OPENCL
} pkv_backend_kind;

/* Order of waiting sequences and choice of preemption victims. */
typedef enum pkv_sched_policy {
    /* First come, first served: admission in arrival order; the most
     * recently arrived running sequence is preempted first. */
    PKV_SCHED_POLICY_FCFS = 0,
    /* Lowest pkv_seq_params.priority value first, then arrival; the
     * lowest-priority (highest value), most recently arrived running
     * sequence is preempted first. */
    PKV_SCHED_POLICY_PRIORITY = 1,
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_POLICY_FCFS = PKV_SCHED_POLICY_FCFS,
    PKV_POLICY_PRIORITY = PKV_SCHED_POLICY_PRIORITY
} pkv_sched_policy;

/* What preemption does with a sequence's blocks. */
typedef enum pkv_preempt_mode {
    /* Free the blocks; the sequence is computed again from its tokens when
     * it resumes (its cached prefix blocks usually hit). */
    PKV_PREEMPT_MODE_RECOMPUTE = 0,
    /* Copy the blocks to host memory (swap_bytes budget) and bring them
     * back before any new sequence is admitted; recompute when the swap
     * budget is full. */
    PKV_PREEMPT_MODE_SWAP = 1,
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_PREEMPT_RECOMPUTE = PKV_PREEMPT_MODE_RECOMPUTE,
    PKV_PREEMPT_SWAP = PKV_PREEMPT_MODE_SWAP
} pkv_preempt_mode;

/*
 * What the KV cache keeps of a model whose layers' attention windows
 * differ (pkv_engine_params.kv_memory). Stored in structs as int32_t.
 * Since 0.3.0.
 */
typedef enum pkv_kv_memory {
    /* Hybrid memory, the default: the layers are grouped by their window
     * and a windowed layer keeps about its window of KV (mechanism:
     * pkv_engine_params.kv_memory). With one window for every layer there
     * is one group: no effect. */
    PKV_KV_MEMORY_HYBRID = 0,
    /* Every layer keeps every token's KV, windowed or not: one group of
     * every layer, a block holding every layer's KV of its tokens. */
    PKV_KV_MEMORY_EVERY_TOKEN = 1
} pkv_kv_memory;

/* Log levels passed to pkv_log_fn. */
typedef enum pkv_log_level {
    PKV_LOG_LEVEL_ERROR = 0,
    PKV_LOG_LEVEL_WARN = 1,
    PKV_LOG_LEVEL_INFO = 2,
    PKV_LOG_LEVEL_DEBUG = 3,
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_LOG_ERROR = PKV_LOG_LEVEL_ERROR,
    PKV_LOG_WARN = PKV_LOG_LEVEL_WARN,
    PKV_LOG_INFO = PKV_LOG_LEVEL_INFO,
    PKV_LOG_DEBUG = PKV_LOG_LEVEL_DEBUG
} pkv_log_level;

/* ------------------------------------------------------------- callbacks */

/*
 * Host memory allocator of one engine. alloc returns memory aligned for any
 * type (like malloc) or NULL; free releases memory that alloc returned, and
 * is given the size that was asked for. Both NULL: the C library's malloc and
 * free. Either set without the other is rejected. Called only from the
 * thread that is calling into the engine, except that pkv_seq_add-style
 * inbox calls may allocate from other threads (documented there).
 */
typedef struct pkv_allocator {
    void *(*alloc)(void *user, size_t size);
    void (*free)(void *user, void *ptr, size_t size);
    void *user;
} pkv_allocator;

/*
 * Log sink of one engine: level is a pkv_log_level, message a line without a
 * trailing newline, valid only during the call. NULL: silent (the default).
 */
typedef void (*pkv_log_fn)(void *user, int32_t level, const char *message);

/*
 * KV events: what the prefix cache gained and lost, so that a router
 * outside the process can keep an index of which engine holds which
 * blocks (vLLM's KV events; examples/server publishes them in vLLM's
 * wire format). Since 0.3.0.
 */
typedef enum pkv_kv_event_kind {
    /* A full block joined the prefix cache: a later prompt that starts
     * with the same tokens under the same cache_salt may hit it. */
    PKV_KV_EVENT_STORED = 0,
    /* A block announced stored left the prefix cache (evicted for reuse,
     * or overwritten). */
    PKV_KV_EVENT_REMOVED = 1,
    /* Every cached block left (pkv_engine_reset_prefix_cache): forget
     * every block announced before this event. */
    PKV_KV_EVENT_ALL_CLEARED = 2
} pkv_kv_event_kind;

/* Whether a stored block has a parent (pkv_kv_event.flags). Since 0.3.0. */
#define PKV_KV_EVENT_HAS_PARENT 1u

/*
 * One event. A block is named by its hash: the prefix cache's 64-bit
 * chained hash of the parent's hash, cache_salt and the block's tokens,
 * so the hashes of a prompt's blocks name its whole prefix (two engines
 * with the same block_size and layer groups name a prompt's blocks
 * alike). A layer group g > 0 (hybrid memory, kv_memory) names its
 * blocks apart from group 0's: the hash of group 0's block of the same
 * tokens, mixed with g. Since 0.3.0.
 */
typedef struct pkv_kv_event {
    int32_t kind;        /* pkv_kv_event_kind */
    uint32_t flags;      /* STORED: PKV_KV_EVENT_HAS_PARENT unless it is a
                            prompt's first block */
    uint64_t hash;       /* STORED, REMOVED: the block's hash */
    uint64_t parent_hash; /* STORED with HAS_PARENT: the hash of the
                             block before it in its prompt, in the same
                             group (announced, or not cached in a windowed
                             group); else 0 */
    const int32_t *token_ids; /* STORED: block_size token ids, valid
                                 during the call; else NULL */
    uint32_t block_size; /* tokens per block */
    uint32_t group;      /* STORED, REMOVED: the block's layer group, 0
                            without hybrid memory (pkv_engine_stats) */
    uint32_t window;     /* that group's attention window, 0: none */
    uint32_t block;      /* the pool's block id (for tests and logs: ids
                            are reused) */
    uint32_t reserved[4]; /* 0: an array element's size never changes,
                             so later fields go here */
} pkv_kv_event;

/*
 * The KV events callback (pkv_engine_params.kv_events): count events in
 * order, valid only during the call. Since 0.3.0.
 */
typedef void (*pkv_kv_events_fn)(void *user, const pkv_kv_event *events,
                                 uint32_t count);

/* -------------------------------------------------------------- KV store */

/*
 * A KV store shared by engines in other processes or on other machines
 * (Redis: pkv_redis.h; any other through these callbacks). An engine with
 * a store saves the full blocks it computes from prompts under keys that
 * name the model (pkv_store.model), its geometry, the KV format,
 * cache_salt and every token up to the block's end; the blocks a later
 * prompt's prefix cache lacks are asked of the store before the prompt
 * is admitted. Each block
 * that arrives is verified before any row can attend to it: its size,
 * checksum, geometry, key, parent's key and tokens must be those the
 * prompt asks for. A block that fails, is missing, or does not arrive in
 * time is computed, never used; so a store can lose, evict or damage
 * values and the outputs stay those of an engine without one. Values an
 * older pkv saved (another value format) are under other keys: misses.
 * (Keys, values and the verification: docs/design.md, "KV store".) The
 * checks (an XXH3 checksum) hold against accidents, not against whoever
 * can write the store: with pkv_engine_params.seal_key set, values are
 * also sealed (see there).
 * Everything in this section: since 0.2.0.
 *
 * Threads: pkv starts none. Every callback is called on the stepping
 * thread, from pkv_engine_step_begin (poll, load, cancel), step_end
 * (save) and pkv_engine_destroy (cancel). load and save start an
 * operation and return without waiting for it; the connector does the
 * work on its own threads (or in poll) and reports each operation once,
 * through poll, which must not block. A sequence whose blocks are being
 * loaded waits (pkv_engine_stats.num_loading) and is admitted when they
 * land, fail, or timeout_ms passes; sequences behind it are not held up.
 */

/* The longest key a store is given, its NUL included: "pkv1:", 16 hex
 * digits naming the model and geometry, ':', 64 hex digits of the
 * block's SHA-256 (with pkv_engine_params.seal_key: "pkvs:" and HMACs of
 * both, the same length). Since 0.2.0. */
#define PKV_STORE_KEY_MAX 88u

/* Save the blocks sequences fill with generated tokens too, not only
 * those of prompts (pkv_store.flags). Since 0.2.0. */
#define PKV_STORE_SAVE_GENERATED 1u

/* An operation the connector finished (pkv_store.poll). Since 0.2.0. */
typedef struct pkv_store_done {
    uint64_t ticket;   /* as given to load or save */
    int32_t status;    /* PKV_OK, or why it failed (PKV_ERR_STORE) */
    uint32_t reserved0; /* 0 */
} pkv_store_done;

/* The connector of pkv_engine_params.store. Fields are append-only.
 * Since 0.2.0. */
typedef struct pkv_store {
    uint32_t struct_size; /* sizeof(pkv_store), set by pkv_store_init */
    uint32_t flags;       /* PKV_STORE_SAVE_GENERATED, or 0 */
    void *user;           /* passed to every callback */
    /*
     * Start fetching the values of num_keys keys (1 or more: consecutive
     * blocks of one prompt) into values: value i goes to values + i *
     * value_size and its length as stored to sizes[i], 0 when the store
     * does not hold it (only the first value_size bytes of a longer value
     * are written). Returns PKV_OK once started (finished later through
     * poll), or an error: then nothing was started and nothing is
     * touched. values and sizes stay valid until the operation is polled
     * or cancelled.
     */
    pkv_status (*load)(void *user, uint64_t ticket, const char *const *keys,
                       uint32_t num_keys, void *values, size_t value_size,
                       uint64_t *sizes);
    /*
     * Start storing value (value_size bytes) under key, replacing any
     * value there. As load: PKV_OK once started; value stays valid until
     * the operation is polled or cancelled.
     */
    pkv_status (*save)(void *user, uint64_t ticket, const char *key,
                       const void *value, size_t value_size);
    /* Write up to capacity finished operations to done; return how many.
     * Never blocks. */
    uint32_t (*poll)(void *user, pkv_store_done *done, uint32_t capacity);
    /* Forget an operation not yet polled: when cancel returns, the
     * connector no longer touches its buffers and never reports it. */
    void (*cancel)(void *user, uint64_t ticket);
    /* The engine's deadline for a load, in milliseconds: a sequence waits
     * at most this long, then its blocks are computed (a timeout).
     * Default 1000. Saves are cancelled after 10 times as long. */
    uint32_t timeout_ms;
    uint32_t reserved0; /* 0 */
    /* Host memory the engine gives the operations in flight at most,
     * loads and saves apart (default 64 MiB each; each at most SIZE_MAX).
     * A prompt asks for as many of its blocks as fit; a block that does
     * not fit in the saves' budget is not saved
     * (pkv_engine_stats.store_saves_skipped). The engine keeps its
     * largest load's buffer between loads. */
    uint64_t max_load_bytes;
    uint64_t max_save_bytes;
    /* The model's name, part of every key: the KV of a block depends on
     * the weights, which pkv never sees, so engines share blocks only
     * under equal names. Name the weights, not the family (a checksum of
     * the weights file, or a name and revision). NULL: "", which two
     * different models must not both use with one store. Copied at
     * create. */
    const char *model;
    /* Appended in 0.2.0. Optional (NULL: not called), set both or
     * neither. attach is called once pkv_engine_create holds the store
     * (before any other callback); detach once the engine lets go of it,
     * after its last callback: in pkv_engine_destroy, or in a create that
     * fails after attach. A connector counts its engines with them, so
     * that destroying it while an engine still uses it can be caught
     * instead of leaving the engine with freed memory (pkv_redis.h). A
     * host that wraps a connector's callbacks under its own user must
     * wrap these too (bench/bench_store.c does), or clear them. */
    void (*attach)(void *user);
    void (*detach)(void *user);
} pkv_store;

/*
 * Zero *store and set struct_size and the defaults (timeout_ms 1000,
 * max_load_bytes and max_save_bytes 64 MiB). The four callbacks must be
 * set before the store is given to pkv_engine_create.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL store (pkv_last_error).
 * Since 0.2.0.
 * Thread-safety: safe from any thread. Ownership: writes *store only.
 */
PKV_API pkv_status pkv_store_init(pkv_store *store);

/* ---------------------------------------------------------------- engine */

/* The engine: KV cache, block manager, attention backend. Opaque. */
typedef struct pkv_engine pkv_engine;

/*
 * The host's threads, lent to pkv for its CPU work (pkv starts no threads
 * of its own). A pkv_parallel_fn runs task(arg, i, worker) once for every
 * i in [0, count), on any of the host's threads including the caller's,
 * and returns when every one has returned. worker names the thread that
 * runs it, below pkv_engine_params.parallel_workers: two tasks never run
 * at the same time with the same worker. Since 0.2.0.
 */
typedef void (*pkv_task_fn)(void *arg, uint32_t index, uint32_t worker);
typedef void (*pkv_parallel_fn)(void *user, pkv_task_fn task, void *arg,
                                uint32_t count);

/*
 * Parameters of pkv_engine_create. Fields are append-only.
 * Call pkv_engine_params_init first, then set the model geometry.
 */
typedef struct pkv_engine_params {
    uint32_t struct_size; /* sizeof(pkv_engine_params), set by _init */
    uint32_t flags;       /* reserved, must be 0 */

    /* Model geometry (required: no defaults). */
    uint32_t num_layers;
    uint32_t num_q_heads;
    uint32_t num_kv_heads; /* num_q_heads must be a multiple of it (GQA) */
    uint32_t head_dim;     /* a multiple of 4, at most 512 */
    uint32_t max_model_len; /* most tokens (prompt + output) of a sequence,
                               default 4096, at most 1 << 24 */
    uint32_t vocab_size;    /* token ids must be below it; 0: any id >= 0 */
    float scale;            /* attention scale; 0: 1 / sqrt(head_dim) */
    uint32_t sliding_window; /* a row sees its last w tokens; 0: all (per
                                layer: layer_windows, and what the cache
                                keeps of them: kv_memory) */

    /* KV cache. */
    uint32_t block_size;    /* tokens per block, a power of two 1..256;
                               0 (the default): follow the device, 16 on a
                               GPU, 64 on a CPU device or the CPU backend */
    int32_t kv_dtype;       /* pkv_kv_dtype, default PKV_KV_DTYPE_F16 */
    int32_t key_quant;      /* pkv_quant_group for U8/U4 keys */
    int32_t value_quant;    /* pkv_quant_group for U8/U4 values */
    uint32_t num_blocks;    /* blocks of block_size tokens' KV over every
                               layer in the pool, null block included: 2 to
                               0xfffffffe; 0: derive from cache_bytes. With
                               hybrid memory (kv_memory) the pool holds the
                               same bytes as num_blocks * kv_groups blocks
                               of one group's layers each, a count in the
                               same range (pkv_engine_stats) */
    uint64_t cache_bytes;   /* KV budget in bytes, used when num_blocks is
                               0: the pool holds as many blocks as fit
                               (with hybrid memory, blocks of one group's
                               layers), a count in the same range */
    uint64_t swap_bytes;    /* host memory for swapped-out sequences */

    /* Scheduler. */
    uint32_t max_num_seqs;     /* running sequences at most, default 256 */
    uint32_t max_batch_tokens; /* query rows per step at most, default 2048 */
    uint32_t long_prefill_threshold; /* prompt tokens of one sequence per
                                        step at most; 0: no cap. U8: a
                                        chunk that starts inside a block
                                        also stops at its end */
    int32_t policy;            /* pkv_sched_policy, default FCFS */
    int32_t preempt_mode;      /* pkv_preempt_mode, default RECOMPUTE */
    float watermark;           /* fraction of blocks kept free for running
                                  sequences when admitting, default 0.01 */
    uint32_t max_blocks_per_seq;    /* per-sequence block quota; 0: none.
                                       A sequence that would outgrow it
                                       ends PKV_FINISH_REASON_FAILED with
                                       PKV_ERR_QUOTA */
    uint32_t max_blocks_per_tenant; /* per-tenant block quota; 0: none */

    int32_t backend; /* pkv_backend_kind, default AUTO */

    /* Host callbacks. */
    pkv_allocator allocator;
    pkv_log_fn log;
    void *log_user;
    int32_t log_level; /* highest pkv_log_level passed to log */

    /* OpenCL backend (0.1.0; ignored by the CPU backend). Kernel variants
     * are chosen per device and logged at PKV_LOG_LEVEL_INFO; the
     * environment variables PKV_OPENCL_DECODE and PKV_OPENCL_PREFILL force
     * them
     * (values: docs/design.md, "Environment variables"). */
    const char *opencl_device; /* a substring of the platform or device
                                  name, case-insensitive; NULL: the
                                  environment variable PKV_OPENCL_DEVICE,
                                  else the first GPU, else any device */
    const char *program_cache_dir; /* compiled kernels are cached in this
                                      existing directory; NULL: no cache.
                                      One that is not a directory, is
                                      owned by another user than this
                                      one or root, or is writable by its
                                      group or others fails create
                                      (PKV_ERR_INVALID_ARGUMENT) */
    void *opencl_context; /* the host's cl_context and in-order
                             cl_command_queue, both or neither (set them
                             with pkv_engine_params_set_opencl,
                             pkv_opencl.h); NULL: pkv creates its own */
    void *opencl_queue;

    /* Since 0.2.0 (a caller built against 0.1.0 gets 0 in every field
     * from here on).
     * U8 caches: the rollback window, in blocks, 0 (the default: none) to
     * 64. A running sequence keeps the f32 rows of its last
     * u8_rollback_blocks frozen (quantised) blocks, so that a cut inside
     * one of them (pkv_seq_truncate, rejected drafts) keeps the rows before
     * the cut as stored instead of computing the block again
     * (pkv_seq_truncate says which blocks the window holds). Cost,
     * allocated at create: max_num_seqs * block_size * num_layers *
     * num_kv_heads * head_dim * 8 bytes per block of window (host memory
     * on the CPU backend, device memory on OpenCL). Ignored by f32 and f16
     * caches, whose rows are stored as computed (mechanism:
     * docs/design.md, "U8 rollback window"). */
    uint32_t u8_rollback_blocks;

    /* Since 0.2.0. An attention window per layer, for models
     * that mix windowed and full layers: layer l's rows see their last
     * layer_windows[l] tokens (0: all), num_layers entries, copied at
     * create. NULL (the default): every layer has sliding_window, which
     * must then be 0 when layer_windows is set. A windowed layer keeps
     * about its window of KV (hybrid memory), unless kv_memory asks for
     * every token. */
    const uint32_t *layer_windows;

    /* Since 0.2.0. U4 parts grouped per token (values by default, keys
     * with PKV_QUANT_GROUP_PER_TOKEN): the channels of one group, a
     * multiple of 8 that divides head_dim, or head_dim itself. 0 (the
     * default): 32 when it divides head_dim, else head_dim. Smaller
     * groups follow the values more closely and cost 4 bytes of lo/scale
     * per group and token (at 32, one bit per element). Ignored by other
     * dtypes. */
    uint32_t u4_group;

    /* Since 0.2.0. A KV store shared with other engines (see
     * "KV store" above); NULL (the default): none. Copied at create; its
     * callbacks and user must outlive the engine. */
    const pkv_store *store;

    /* Since 0.2.0. Threads for the CPU backend's attention (the
     * OpenCL backend ignores them): pkv_engine_attend cuts a layer into
     * tasks (query rows of one sequence and one kv head; for decode of a
     * few long sequences, a part of one sequence's context each, then a
     * task per sequence and kv head merging the parts) and hands them to
     * parallel(parallel_user, ...), at most twice a layer, from the
     * stepping thread, within pkv_engine_attend only. A task reads the
     * cache and q and writes its own rows of out or its own part; the
     * results are the same bytes whatever the threads or their order.
     * parallel_workers: 1 to 256 when parallel is set (pkv keeps a
     * scratch per worker), else ignored. NULL (the default): the stepping
     * thread runs them. */
    pkv_parallel_fn parallel;
    void *parallel_user;
    uint32_t parallel_workers;

    /* Since 0.2.0; deprecated since 0.3.0, which says what the cache
     * keeps in kv_memory and counts num_blocks over every layer. 1:
     * hybrid memory (PKV_KV_MEMORY_HYBRID) with num_blocks counting blocks
     * of one group's layers, as 0.2.0 did: Gemma 3's 6 groups of 3 layers
     * give 6 times the blocks of the same num_blocks over every layer.
     * 0 (the default): kv_memory decides; a caller built against 0.2.0,
     * whose params end before kv_memory, gets 0.2.0's default, every
     * layer keeping every token. 1 with kv_memory
     * PKV_KV_MEMORY_EVERY_TOKEN: PKV_ERR_INVALID_ARGUMENT. */
    uint32_t hybrid_memory;

    /* Since 0.2.0. The deployment key: 32 secret random bytes, the same
     * for every engine that shares a store, prefix-cache files or
     * exports, copied at create (the engine keeps only keys derived from
     * it). NULL (the default): nothing is sealed, and the bytes pkv
     * writes are checksummed, as before. One key for the engine rather
     * than one in pkv_store, because one seal covers what every path
     * writes for other processes:
     * - store values are encrypted and authenticated (AES-256-GCM) and
     *   bound to their key, their place in the prompt and their parent
     *   block; store keys are HMAC-SHA-256 names ("pkvs:..."), which
     *   reveal nothing of the prompt. A value that does not open under
     *   this key, for this name and parent, is a miss
     *   (pkv_engine_stats.store_damaged), never attended to;
     * - pkv_engine_save_prefix_cache and pkv_seq_export write sealed
     *   bytes; the loads refuse bytes that do not open under this key
     *   (tampered, sealed under another key, or not sealed):
     *   PKV_ERR_INVALID_ARGUMENT. An engine without a key refuses sealed
     *   bytes: PKV_ERR_UNSUPPORTED.
     * Trust, per mode. Without a key: whoever can write the store or the
     * files decides the KV every reader attends to (a checksum is no
     * MAC), and whoever can read them reads every prompt's tokens (a
     * key names a digest of the tokens, which a guess can confirm).
     * With a key, whoever lacks it, reading, writing or on the path: can
     * delete, withhold, evict or damage values and files (misses and
     * refusals, never wrong rows), replay an older sealed file, or a
     * store value under its own name (same block, same prompt: KV for
     * those very tokens), and see sizes, counts, timing and which names
     * are asked together; cannot read tokens or KV, forge, change, move
     * a value to another name or prompt, or learn a prompt from a name.
     * Whoever holds the key is trusted as the engine is. Mechanism:
     * docs/design.md, "Sealing with a deployment key" (OpenSSL's
     * libcrypto, which every build of pkv links). */
    const uint8_t *seal_key;

    /* Since 0.2.0. The length of seal_key in bytes: 32, the one length
     * taken; any other (a 16-byte AES-128 key) is refused with
     * PKV_ERR_INVALID_ARGUMENT before a byte of the key is read. 0 (the
     * default) means 32, the meaning seal_key had before this field: a
     * host that sets seal_key alone must pass 32 bytes, and pkv reads 32.
     * A size with seal_key NULL is refused, and so is an all-zero key (a
     * key anyone can guess, as a buffer never filled is). */
    uint32_t seal_key_size;

    /* Since 0.3.0. What the cache keeps (pkv_kv_memory), by default
     * PKV_KV_MEMORY_HYBRID: when the layers' windows differ (layer_windows;
     * a window at or past max_model_len counts as none), hybrid memory
     * groups the layers by their window, each group with its own block
     * tables over the one pool, and a windowed group gives a sequence's
     * blocks back as soon as no later row can see them (the block lies
     * wholly behind the window of the sequence's next row), so a windowed
     * layer holds about its window of KV, not the whole context. Outputs
     * are the same as with every token kept, bit for bit. Groups have
     * equal numbers of layers (the greatest common divisor of each
     * window's layer count; windows that would need more than 64 groups
     * keep every token, as PKV_KV_MEMORY_EVERY_TOKEN does) and a block
     * of the pool holds one group's layers: Gemma 3's 3 full and 15
     * windowed layers make 6 groups of 3 layers, num_blocks blocks
     * over every layer are 6 * num_blocks blocks of the pool, and
     * pkv_engine_stats counts those (kv_groups, group_layers,
     * block_bytes). A prefix hit needs, in a windowed group, only the
     * blocks its first computed row sees. A saved prefix cache loads only
     * into an engine with the same groups (PKV_ERR_UNSUPPORTED otherwise);
     * an export's KV moves into an engine with the same groups, windows
     * and block size, any other computes it again (pkv_seq_import). A KV
     * store keeps a value per group and block, each group's under its own
     * names: engines grouped otherwise miss each other's.
     * pkv_engine_get_block_table gives the first group's table (the full
     * layers', if any), pkv_engine_get_group_block_table each group's.
     * PKV_KV_MEMORY_EVERY_TOKEN: every layer keeps every token, one
     * group (for a host that reads every layer's KV of a block itself).
     * Mechanism: docs/design.md, "Hybrid memory". */
    int32_t kv_memory;

    /* Since 0.3.0. KV events (pkv_kv_event): called at the end of
     * pkv_engine_step_end, and of pkv_engine_reset_prefix_cache, on the
     * stepping thread, with every change of the prefix cache since the
     * last call (also those of pkv_engine_load_prefix_cache and of blocks
     * a KV store gave), one or more times (at most 256 events each), in
     * this order: ALL_CLEARED if the cache was reset, then the blocks
     * that left it, then those that joined it. Each block that joins is
     * announced STORED exactly once, and REMOVED exactly once when it
     * leaves, unless both happened since the last call: then neither is
     * announced. So a consumer that applies every call in order holds
     * exactly the blocks the prefix cache holds (two blocks may hold one
     * hash at once, each announced: a block whose parent was evicted
     * and computed again under a new parent block; a consumer keyed by
     * hash counts them). Inside the callback the
     * host may call pkv_engine_lookup_prefix, pkv_seq_add and
     * pkv_seq_abort, and no other function of this engine. NULL (the
     * default): no events, and nothing is kept for them. */
    pkv_kv_events_fn kv_events;
    void *kv_events_user;
} pkv_engine_params;

/*
 * Fill *params with defaults: struct_size set, block_size 0 (follow the
 * device; pkv_engine_get_stats reports the size chosen), KV in f16,
 * default quantization groups and u4_group, cache_bytes 256 MiB,
 * max_model_len 4096, max_num_seqs 256, max_batch_tokens 2048, FCFS,
 * recompute, watermark 0.01, no quotas, no swap, backend AUTO,
 * malloc/free, no log, no OpenCL device preference, no program cache,
 * pkv's own OpenCL context.
 * Model geometry is left 0 and must be set by the caller.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL params (pkv_last_error).
 * Thread-safety: safe from any thread. Ownership: writes *params only.
 */
PKV_API pkv_status pkv_engine_params_init(pkv_engine_params *params);

/*
 * Create an engine. On success *out holds the engine; on failure *out is
 * NULL and pkv_last_error() says why.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL argument, a field out of
 * its documented range or, on the OpenCL backend, a value of
 * PKV_OPENCL_DECODE or PKV_OPENCL_PREFILL it does not know
 * (PKV_BACKEND_KIND_AUTO then takes the CPU backend, with a warning);
 * PKV_ERR_STRUCT_SIZE; PKV_ERR_UNSUPPORTED for a geometry pkv cannot run
 * (head_dim not a multiple of 4 or above 512, num_q_heads not a multiple
 * of num_kv_heads, a backend that is not built in); PKV_ERR_OUT_OF_MEMORY;
 * PKV_ERR_DEVICE_MEMORY (on OpenCL also for block tables of max_num_seqs
 * sequences of max_model_len tokens beyond the device's largest buffer)
 * or another device error from the backend. The KV storage is allocated
 * first, so a cache too large for the machine fails before any other
 * memory is taken.
 * Thread-safety: safe from any thread (creates a new object).
 * Ownership: *params is read during the call only; the caller owns the
 * engine and releases it with pkv_engine_destroy.
 */
PKV_API pkv_status pkv_engine_create(const pkv_engine_params *params,
                                     pkv_engine **out);

/*
 * Destroy an engine and release everything it holds. NULL is a no-op.
 * Thread-safety: no other call on the engine may be running or follow.
 * Ownership: every pointer the engine handed out becomes invalid.
 */
PKV_API void pkv_engine_destroy(pkv_engine *engine);

/*
 * The message of the last failed call on this engine ("" if none),
 * including pkv_seq_add and pkv_seq_abort failures on other threads. It
 * names the failing argument or OpenCL call where there is one.
 * Thread-safety: safe from any thread (the message is copied under the
 * engine's lock).
 * Ownership: a copy in thread-local storage, valid until this thread's
 * next pkv_engine_last_error call; never free it. A NULL engine gives
 * pkv_last_error().
 */
PKV_API const char *pkv_engine_last_error(const pkv_engine *engine);

/*
 * The backend the engine runs on: "cpu", or "opencl (<platform> / <device>
 * (driver <version>))". A NULL engine gives "".
 * Thread-safety: as any engine call.
 * Ownership: owned by the engine, valid until its destruction.
 */
PKV_API const char *pkv_engine_backend_name(const pkv_engine *engine);

/* ------------------------------------------------------------- sequences */

/* Sequence ids are assigned by pkv_seq_add, from 1 upwards; 0 is never an
 * id. An id is never reused by the same engine. */
typedef uint64_t pkv_seq_id;

/* Parameters of pkv_seq_add. Fields are append-only. */
typedef struct pkv_seq_params {
    uint32_t struct_size; /* sizeof(pkv_seq_params), set by _init */
    uint32_t flags;       /* reserved, must be 0 */
    const int32_t *prompt; /* prompt_len token ids, copied by pkv_seq_add */
    uint32_t prompt_len;   /* 1 .. max_model_len - 1 */
    uint32_t max_new_tokens; /* finish after this many sampled tokens;
                                0: only stop flags or max_model_len */
    int32_t priority;      /* PKV_SCHED_POLICY_PRIORITY: lower runs first */
    uint32_t tenant;       /* the block quota this sequence counts against */
    uint64_t cache_salt;   /* prefixes are shared only between sequences
                              with equal salts (isolate tenants) */
    /* Since 0.2.0 (a caller built against 0.1.0 gets NULL). */
    void *user_data; /* the host's pointer for this sequence, never read by
                        pkv: echoed in every batch that lists the sequence
                        (pkv_batch.seq_user_data, finished_user_data) */
} pkv_seq_params;

/*
 * Fill *params with defaults: struct_size set, no prompt, max_new_tokens 0,
 * priority 0, tenant 0, cache_salt 0, user_data NULL.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL params (pkv_last_error).
 * Thread-safety: safe from any thread. Ownership: writes *params only.
 */
PKV_API pkv_status pkv_seq_params_init(pkv_seq_params *params);

/*
 * Queue a new sequence. It is admitted by a later pkv_engine_step_begin.
 * On success *out_id holds its id.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL argument, flags not 0 or a
 * bad prompt (NULL, empty, too long for max_model_len, a token id < 0 or
 * >= vocab_size); PKV_ERR_STRUCT_SIZE; PKV_ERR_OUT_OF_MEMORY.
 * Thread-safety: safe from any thread, concurrently with the thread that
 * steps the engine (the inbox is locked); the engine must outlive the call.
 * Failures set both messages, this thread's (pkv_last_error) and the
 * engine's, and write no log line (the log callback runs on the stepping
 * thread only).
 * Ownership: the prompt is copied; params is read during the call only.
 */
PKV_API pkv_status pkv_seq_add(pkv_engine *engine,
                               const pkv_seq_params *params,
                               pkv_seq_id *out_id);

/*
 * Ask for a sequence to end, in whatever state it is (waiting, mid-prefill,
 * running, swapped). It ends at the next pkv_engine_step_begin, which
 * reports it with PKV_FINISH_REASON_ABORTED unless it finished before.
 * Aborting an id that already ended does nothing and returns PKV_OK.
 * Errors: PKV_ERR_NOT_FOUND for an id this engine never issued;
 * PKV_ERR_INVALID_ARGUMENT for a NULL engine; PKV_ERR_OUT_OF_MEMORY.
 * Thread-safety: safe from any thread, like pkv_seq_add; failures set both
 * messages, as pkv_seq_add's do.
 * Ownership: nothing is retained.
 */
PKV_API pkv_status pkv_seq_abort(pkv_engine *engine, pkv_seq_id id);

/*
 * Fork a running sequence that has sampled at least one token (parallel
 * sampling, beam search). The child shares every block of the parent
 * (copy-on-write) and has the same tokens, except that its last, sampled
 * token, whose KV is not computed yet, is last_token (or the parent's when
 * last_token < 0). It inherits max_new_tokens, priority, tenant, salt and
 * user_data, and counts the parent's sampled tokens as its own. A parent
 * whose next step computes more than its last token (a U8 cut that fell
 * back to a frozen block's start, pkv_seq_truncate) forks as well: the
 * child computes the same tokens again.
 * Errors: PKV_ERR_BAD_STATE between step_begin and step_end, or when the
 * parent has not sampled yet, has an abort pending (pkv_seq_abort) or
 * max_num_seqs sequences are running;
 * PKV_ERR_NOT_FOUND, PKV_ERR_INVALID_ARGUMENT (token out of range),
 * PKV_ERR_QUOTA (the tenant's block quota), PKV_ERR_OUT_OF_MEMORY.
 * Thread-safety: the stepping thread only.
 * Ownership: nothing is retained.
 */
PKV_API pkv_status pkv_seq_fork(pkv_engine *engine, pkv_seq_id parent,
                                int32_t last_token, pkv_seq_id *out_child);

/* -------------------------------------------------------- state transfer */

/*
 * Keep the first num_tokens tokens of a sequence and drop the rest (a chat
 * edit, a tree search going back, a host rejecting a tail). The sequence
 * then goes on as if those were all its tokens: its next step computes
 * what the cut left without KV and samples after token num_tokens - 1.
 * Tokens cut from the prompt shorten the prompt; sampled tokens cut are no
 * longer counted (num_generated, max_new_tokens).
 * KV kept, as stored, never re-quantised: the rows of the kept tokens
 * whose KV was computed, except the last kept token's (it becomes the next
 * step's input row). f32 and f16: all of them. U8: all of them when the
 * cut falls in the sequence's last, unfrozen block or in a frozen block
 * its rollback window holds: one of the last u8_rollback_blocks blocks
 * (pkv_engine_params) it froze since it last started running (admission,
 * swap-in, an import, a fork for the child), never a block from a prefix
 * hit. A cut in any other frozen block keeps the rows up to the start of
 * that block, whose kept tokens the next step computes again.
 * Blocks shared with a fork or the prefix cache are never changed in
 * place: a cut inside one keeps the sequence's rows as above, and the fork
 * and the cache keep the block whole. A swapped-out sequence loses its
 * swapped KV and is recomputed.
 * (mechanism: docs/design.md, "Truncation", "U8 rollback window")
 * Errors: PKV_ERR_INVALID_ARGUMENT for num_tokens 0 or beyond the
 * sequence's tokens; PKV_ERR_BAD_STATE between step_begin and step_end or
 * for a sequence no step has seen yet; PKV_ERR_NOT_FOUND. num_tokens equal
 * to the sequence's tokens changes nothing.
 * Since 0.2.0.
 * Thread-safety: the stepping thread only.
 * Ownership: nothing is retained.
 */
PKV_API pkv_status pkv_seq_truncate(pkv_engine *engine, pkv_seq_id id,
                                    uint32_t num_tokens);

/* The most drafts pkv_seq_propose takes for one step. Since 0.2.0. */
#define PKV_MAX_DRAFTS 64u

/*
 * Speculative decoding: draft tokens (a draft model's guess of what the
 * sequence samples next) for the sequence's next step. In that step it
 * runs 1 + k rows, its last sampled token and k drafts, each with a sample
 * row: as many drafts as the step's max_batch_tokens, the prefill cap
 * (long_prefill_threshold), its blocks and quotas allow, and with a U8
 * cache only those in the block its sampled token falls in (at block_size
 * 1 no U8 draft runs). The rest are dropped; nobody is preempted for
 * them. Drafts count in the budget like any row.
 * Every row sees what plain decoding's row at its position sees, so the
 * outputs of the rows whose samples are kept are plain decoding's (the
 * same bits on the CPU backend). step_end keeps the drafts the samples
 * confirm and cuts the KV of the others as pkv_seq_truncate cuts (a
 * shared block is never changed in place, nothing is re-quantised): the
 * sequence then holds exactly what plain decoding would have given it.
 * U8: if the step froze a block and the cut falls inside it, the
 * accepted rows of that block are kept when u8_rollback_blocks is at
 * least 1, else the next step computes them again (mechanism:
 * docs/design.md, "Speculative decoding", "U8 rollback window").
 * Drafts are for the next step only: a sequence that does not decode in
 * it (preempted, or beyond the budget) loses them; num_drafts 0 withdraws
 * them. pkv_engine_stats counts drafts run and accepted.
 * A sequence decodes when it is running and the KV of every token but
 * its last is stored: its last is a sampled token, or the last that
 * pkv_seq_truncate kept (its row runs next, as a sampled token's does).
 * It does not while a step has still to compute earlier rows: its
 * prompt, or the rows of a U8 block that a rollback or a truncate
 * dropped; then its next step computes them and it decodes again.
 * pkv_engine_get_block_table tells: the sequence decodes when num_tokens
 * there is one less than its token count.
 * Errors: PKV_ERR_BAD_STATE between step_begin and step_end, for a
 * sequence no step has seen yet or that does not decode (the message says
 * which rows it must compute first); PKV_ERR_NOT_FOUND;
 * PKV_ERR_INVALID_ARGUMENT for drafts NULL with num_drafts > 0, more than
 * PKV_MAX_DRAFTS, drafts that would reach max_model_len, or a token out of
 * range; PKV_ERR_OUT_OF_MEMORY.
 * Since 0.2.0.
 * Thread-safety: the stepping thread only.
 * Ownership: drafts are copied.
 */
PKV_API pkv_status pkv_seq_propose(pkv_engine *engine, pkv_seq_id id,
                                   const int32_t *drafts,
                                   uint32_t num_drafts);

/*
 * Export a sequence: its tokens and the KV cached for them, every layer,
 * as stored, with the geometry and a checksum, so that pkv_seq_import can
 * resume it in another engine, on either backend, without recomputing:
 * prefill on one engine and decode on another, an idle conversation
 * parked on disk, a sequence moved off a full engine. The sequence itself
 * is not changed: abort it if it moved.
 * The export is `*size` bytes. buffer NULL with capacity 0 only sets
 * *size; otherwise buffer must hold capacity >= *size bytes, which receive
 * the export. The bytes are portable (little-endian, versioned; the
 * format is in docs/design.md, "Export and import") and are a copy: the
 * host may write them to a file or a socket. They hold what the sequence
 * holds and nothing else: bytes it does not use are zeros, so no export
 * carries KV of tokens the sequence no longer has (rejected drafts,
 * truncated tokens), and two sequences with the same tokens and the same
 * stored KV export the same bytes. With pkv_engine_params.seal_key the
 * export is sealed (64 bytes more, and no two alike).
 * Errors: PKV_ERR_INVALID_ARGUMENT for size NULL or a buffer too small
 * (*size still says what is needed); PKV_ERR_BAD_STATE between step_begin
 * and step_end or for a sequence no step has seen yet; PKV_ERR_NOT_FOUND;
 * PKV_ERR_OUT_OF_MEMORY; a device error from reading the KV.
 * Since 0.2.0.
 * Thread-safety: the stepping thread only.
 * Ownership: nothing is retained.
 */
PKV_API pkv_status pkv_seq_export(pkv_engine *engine, pkv_seq_id id,
                                  void *buffer, size_t capacity,
                                  size_t *size);

/*
 * Add a sequence from an export (pkv_seq_export of this or another
 * engine). It has the exported tokens, prompt length and sampled count,
 * and the exported KV: it joins the swapped-out sequences, and the
 * scheduler brings it in as it brings back a swapped-out one (its KV
 * written to blocks of this engine, not recomputed), then it goes on
 * with its next row. Until then its KV is host memory the engine holds,
 * not counted in swap_bytes. An export without KV (a sequence no step had
 * computed) joins the waiting sequences.
 * The engine must have the exporter's num_layers, num_kv_heads, head_dim
 * and kv_dtype; f32 and f16 take any block_size. A U8 block's groups
 * depend on its size and pkv never re-quantises, so a U8 export whose
 * block_size or quantization groups (U4: or u4_group) differ from this
 * engine's is imported
 * without its KV: the sequence joins the waiting sequences and computes
 * the KV of all its tokens again (logged at PKV_LOG_LEVEL_INFO), to the same
 * bound as any U8 block. So does an export between engines of which one
 * has hybrid memory's groups (pkv_engine_params.kv_memory) and the
 * other has none, or other groups, windows or block_size. params (NULL:
 * defaults) gives tenant,
 * priority, cache_salt and user_data as for pkv_seq_add, and
 * max_new_tokens when non-zero (0 keeps the exported one); its prompt
 * must be NULL and prompt_len and flags 0.
 * Errors (nothing changes): PKV_ERR_INVALID_ARGUMENT for NULL data or
 * out_id, bytes that are not an export, truncated or extended, a checksum
 * that does not match (a changed byte), inconsistent counts, a block size
 * or groups that no pkv layout has, or a token out of range, and with a
 * seal_key for bytes that do not open under it (unsealed, sealed under
 * another key, or changed); PKV_ERR_UNSUPPORTED for another format
 * version (an older pkv's export is refused, the message saying so) or
 * geometry, or sealed bytes given to an engine without a key;
 * PKV_ERR_NO_BLOCKS when its KV needs more blocks than the pool has;
 * PKV_ERR_BAD_STATE between step_begin and step_end; PKV_ERR_STRUCT_SIZE;
 * PKV_ERR_OUT_OF_MEMORY (with a key, also for the copy the bytes are
 * opened into: as many bytes as given).
 * Since 0.2.0.
 * Thread-safety: the stepping thread only.
 * Ownership: data is read during the call only.
 */
PKV_API pkv_status pkv_seq_import(pkv_engine *engine,
                                  const pkv_seq_params *params,
                                  const void *data, size_t size,
                                  pkv_seq_id *out_id);

/* ---------------------------------------------------------- prefix cache */

/*
 * Save the prefix cache: every cached full block a prompt's lookup can
 * still reach, with its token ids, salt (cache_salt: tenants stay apart
 * after a load), its place in its prompt's chain and its KV as stored,
 * as portable checksummed bytes that pkv_engine_load_prefix_cache reads
 * into a new engine with the same geometry, so that a restarted server
 * answers its first shared-prompt request with a hit. Blocks in use by
 * sequences are saved too; nothing changes.
 * `*size` bytes; buffer NULL with capacity 0 only sets *size, otherwise
 * buffer must hold capacity >= *size bytes (format: docs/design.md, "A
 * prefix cache that survives restarts").
 * With pkv_engine_params.seal_key the bytes are sealed (64 more).
 * Errors: PKV_ERR_INVALID_ARGUMENT for size NULL or a buffer too small
 * (*size still says what is needed); PKV_ERR_BAD_STATE between step_begin
 * and step_end; PKV_ERR_OUT_OF_MEMORY; a device error from reading the KV.
 * Since 0.2.0.
 * Thread-safety: the stepping thread only.
 * Ownership: nothing is retained.
 */
PKV_API pkv_status pkv_engine_save_prefix_cache(pkv_engine *engine,
                                                void *buffer,
                                                size_t capacity,
                                                size_t *size);

/*
 * Load a saved prefix cache (pkv_engine_save_prefix_cache of an engine
 * with the same num_layers, num_kv_heads, head_dim, kv_dtype, U8/U4 groups
 * and block_size). The blocks go into free blocks only, parents first, so
 * nothing the engine caches or holds is evicted: blocks it already caches
 * are skipped, and when free blocks run out the rest (and blocks whose
 * parent did not load) are left out. Loaded blocks are cached and
 * unreferenced, evicted like any other. *num_loaded (may be NULL)
 * receives how many blocks were loaded.
 * Errors (nothing changes): PKV_ERR_INVALID_ARGUMENT for NULL data, bytes
 * that are not a saved prefix cache, truncated or extended, a checksum
 * that does not match, an entry out of order or a token out of range, and
 * with a seal_key for bytes that do not open under it (unsealed, sealed
 * under another key, or changed); PKV_ERR_UNSUPPORTED for another format
 * version (a file an older pkv saved is refused, the message saying so)
 * or geometry, or sealed bytes given to an engine without a key;
 * PKV_ERR_BAD_STATE between step_begin and step_end;
 * PKV_ERR_OUT_OF_MEMORY (with a key, also for the copy the bytes are
 * opened into: as many bytes as given); a device error from writing the
 * KV.
 * Since 0.2.0.
 * Thread-safety: the stepping thread only.
 * Ownership: data is read during the call only.
 */
PKV_API pkv_status pkv_engine_load_prefix_cache(pkv_engine *engine,
                                                const void *data, size_t size,
                                                uint32_t *num_loaded);

/*
 * How much of a prompt the prefix cache holds now: into *num_cached, the
 * tokens a pkv_seq_add of tokens[0 .. num_tokens) with cache_salt would
 * take from the cache if it were admitted now, a multiple of block_size
 * (at most num_tokens - 1: the last token is always computed). With
 * hybrid memory, as admission does, a windowed group needs only the
 * blocks the first computed row sees. Nothing changes: no block is
 * taken, the LRU order stays, no KV store is asked, and no event is
 * announced. A router asks each engine this to send a prompt where its
 * prefix is (the answer may be stale by the time the prompt arrives).
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL engine or num_cached, or a
 * prompt pkv_seq_add would refuse (NULL tokens, num_tokens 0 or at least
 * max_model_len, a token id out of range); PKV_ERR_OUT_OF_MEMORY
 * (scratch for the prompt's hashes). Failures set both messages, as
 * pkv_seq_add's do.
 * Since 0.3.0.
 * Thread-safety: safe from any thread, concurrently with the stepping
 * thread, as pkv_seq_add (the engine must outlive the call): the prefix
 * cache is read under the engine's prefix lock, which the stepping
 * thread holds inside the calls that change the cache
 * (pkv_engine_step_begin, pkv_engine_step_end, pkv_seq_fork,
 * pkv_seq_truncate, pkv_engine_load_prefix_cache,
 * pkv_engine_reset_prefix_cache), so a lookup may wait for one of those
 * and they for a lookup's walk over the index (its hashes are computed
 * before), never for pkv_engine_attend. The allocator may be called from this
 * thread, as pkv_seq_add calls it.
 * Ownership: tokens are read during the call only.
 */
PKV_API pkv_status pkv_engine_lookup_prefix(pkv_engine *engine,
                                            const int32_t *tokens,
                                            uint32_t num_tokens,
                                            uint64_t cache_salt,
                                            uint32_t *num_cached);

/*
 * Empty the prefix cache: every cached block becomes free, so no later
 * prompt hits what was computed before (a new model revision behind the
 * same engine, a benchmark's cold start). With kv_events set, the next
 * delivery (at the end of this call) starts with ALL_CLEARED and nothing
 * cached before is announced REMOVED. Sequences waiting or swapped out
 * keep their tokens and compute what they no longer find.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL engine; PKV_ERR_BAD_STATE
 * between step_begin and step_end, or while a sequence holds blocks (a
 * running one: abort it or let it finish; nothing changes), as vLLM's
 * reset refuses while blocks are in use.
 * Since 0.3.0.
 * Thread-safety: the stepping thread only.
 */
PKV_API pkv_status pkv_engine_reset_prefix_cache(pkv_engine *engine);

/*
 * The store keys of a prompt's blocks, as this engine's loads and saves
 * name them: for the first min(capacity, (num_tokens - 1) / block_size)
 * full blocks of tokens under cache_salt (a load asks at most those: the
 * last token is always computed), each key NUL-terminated in
 * PKV_STORE_KEY_MAX bytes of keys, block after block; *num_keys says how
 * many. With seal_key, the sealed names ("pkvs:..."). With hybrid memory,
 * the first group's names (the full layers', if any); a load also asks
 * each windowed group for the blocks its row sees, under other names.
 * A router passes them to the store (pkv_redis_count_prefix) to learn
 * how much of a prompt any engine sharing the store could load.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL engine or num_keys, NULL
 * keys with capacity > 0, or a prompt pkv_seq_add would refuse;
 * PKV_ERR_BAD_STATE for an engine without a store; PKV_ERR_OUT_OF_MEMORY
 * (libcrypto). Failures set both messages, as pkv_seq_add's do.
 * Since 0.3.0.
 * Thread-safety: safe from any thread, as pkv_seq_add (the engine must
 * outlive the call).
 * Ownership: writes keys and *num_keys only.
 */
PKV_API pkv_status pkv_engine_store_keys(pkv_engine *engine,
                                         const int32_t *tokens,
                                         uint32_t num_tokens,
                                         uint64_t cache_salt, char *keys,
                                         uint32_t capacity,
                                         uint32_t *num_keys);

/* ------------------------------------------------------------------ step */

/* Why a sequence ended. */
typedef enum pkv_finish_reason {
    PKV_FINISH_REASON_STOP = 1,   /* the host's stop flag (EOS, stop word) */
    PKV_FINISH_REASON_LENGTH = 2, /* max_new_tokens sampled */
    /* the sequence reached max_model_len */
    PKV_FINISH_REASON_MAX_MODEL_LEN = 3,
    PKV_FINISH_REASON_ABORTED = 4, /* pkv_seq_abort */
    PKV_FINISH_REASON_FAILED = 5,  /* pkv could not run it: see status */
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_FINISH_STOP = PKV_FINISH_REASON_STOP,
    PKV_FINISH_LENGTH = PKV_FINISH_REASON_LENGTH,
    PKV_FINISH_MAX_MODEL_LEN = PKV_FINISH_REASON_MAX_MODEL_LEN,
    PKV_FINISH_ABORTED = PKV_FINISH_REASON_ABORTED,
    PKV_FINISH_FAILED = PKV_FINISH_REASON_FAILED
} pkv_finish_reason;

/* One ended sequence. */
typedef struct pkv_finished {
    pkv_seq_id id;
    int32_t reason;          /* pkv_finish_reason */
    int32_t status;          /* pkv_status: PKV_OK unless reason is FAILED
                                (e.g. PKV_ERR_NO_BLOCKS: the sequence needs
                                more blocks than the whole pool) */
    uint32_t num_generated;  /* tokens sampled for it and kept: a step
                                that fails the sequence (non-finite K/V)
                                does not keep the token sampled in it */
    uint32_t reserved0;      /* always 0 */
} pkv_finished;

/*
 * One step's work, in the ragged layout of vLLM's varlen kernels and
 * OpenVINO's PagedAttention. Rows are query tokens: sequence i owns rows
 * [query_start[i], query_start[i + 1]). Row r holds token_ids[r] at
 * positions[r] (its index in the sequence, for RoPE). A sequence's rows
 * are the last of its context_lens[i] tokens.
 */
typedef struct pkv_batch {
    uint32_t num_seqs;
    uint32_t num_tokens;
    const pkv_seq_id *seq_ids;    /* [num_seqs] */
    const uint32_t *query_start;  /* [num_seqs + 1], query_start[0] == 0 */
    const uint32_t *context_lens; /* [num_seqs] tokens in the cache once
                                     this step's rows are written */
    const int32_t *token_ids;     /* [num_tokens] */
    const uint32_t *positions;    /* [num_tokens] */
    /* The rows whose logits the host samples: the last row of every
     * sequence that finishes its prompt or decodes this step (none for a
     * mid-prompt chunk), ascending. A sequence that runs drafts
     * (pkv_seq_propose) has a sample row for its last token and one for
     * each draft: its last 1 + k rows. */
    uint32_t num_samples;
    const uint32_t *sample_rows;      /* [num_samples] */
    const pkv_seq_id *sample_seq_ids; /* [num_samples] */
    /* Sequences that ended since the previous batch (at step_end, by abort,
     * or failed), so the host can drop its own state. A sequence that ends
     * at step_end is reported by the next batch: when it was the last,
     * that batch has no rows, and a batch with no rows needs no attend
     * call (step_begin, then step_end at once). */
    uint32_t num_finished;
    const pkv_finished *finished;
    /* Sequences preempted by this step: they will be scheduled again
     * later (their generated tokens are kept). */
    uint32_t num_preempted;
    const pkv_seq_id *preempted;
    /* Since 0.2.0: each sequence's pkv_seq_params.user_data,
     * parallel to seq_ids and to finished. */
    void *const *seq_user_data;      /* [num_seqs] */
    void *const *finished_user_data; /* [num_finished] */
} pkv_batch;

/* Element type of an attend tensor. */
typedef enum pkv_tensor_dtype {
    PKV_TENSOR_DTYPE_F32 = 0,
    PKV_TENSOR_DTYPE_F16 = 1,
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_TENSOR_F32 = PKV_TENSOR_DTYPE_F32,
    PKV_TENSOR_F16 = PKV_TENSOR_DTYPE_F16
} pkv_tensor_dtype;

/* Where an attend tensor lives. */
typedef enum pkv_tensor_memory {
    PKV_TENSOR_MEMORY_HOST = 0,   /* data is a host pointer */
    PKV_TENSOR_MEMORY_OPENCL = 1, /* data is a cl_mem (see pkv_opencl.h) */
    /* Deprecated since 0.2.0: the names before it, same values. */
    PKV_MEMORY_HOST = PKV_TENSOR_MEMORY_HOST,
    PKV_MEMORY_OPENCL = PKV_TENSOR_MEMORY_OPENCL
} pkv_tensor_memory;

/* A packed [rows][heads][head_dim] tensor. */
typedef struct pkv_tensor {
    uint32_t struct_size; /* sizeof(pkv_tensor) */
    int32_t dtype;        /* pkv_tensor_dtype */
    int32_t memory;       /* pkv_tensor_memory */
    uint32_t rows;
    uint32_t heads;
    uint32_t head_dim;
    void *data;
    uint64_t offset; /* bytes from data to the first element; host memory:
                        data + offset aligned to the element size */
} pkv_tensor;

/* A pkv_tensor over host memory (no call into pkv; pkv_tensor_opencl in
 * pkv_opencl.h is its cl_mem twin). dtype is a pkv_tensor_dtype. data may
 * point to const: attend only reads q, k and v (out's memory must be
 * writable; attend writes it through the same field). Since 0.2.0. */
static inline pkv_tensor pkv_tensor_host(const void *data, uint64_t offset,
                                         int32_t dtype, uint32_t rows,
                                         uint32_t heads, uint32_t head_dim)
{
    pkv_tensor t;
    t.struct_size = (uint32_t)sizeof t;
    t.dtype = dtype;
    t.memory = PKV_TENSOR_MEMORY_HOST;
    t.rows = rows;
    t.heads = heads;
    t.head_dim = head_dim;
    t.data = (void *)(uintptr_t)data; /* not written through for q, k, v */
    t.offset = offset;
    return t;
}

/*
 * Schedule the next step: admit waiting sequences, cut prompt chunks,
 * preempt when blocks run out, allocate slots. *out is the batch to run,
 * which may hold no rows (everything waiting on an abort, nothing left
 * but finished reports, or every waiting sequence waiting for a KV store's
 * load or the engine for its saves: pkv_engine_stats.num_loading; a host
 * may then sleep briefly, say 0.1 ms, before the next step instead of
 * spinning). Call pkv_engine_attend for every layer, then
 * pkv_engine_step_end; a batch with no rows may skip the attend calls (or
 * make them with NULL data, as before).
 * Errors: PKV_ERR_BAD_STATE if a step is already begun;
 * PKV_ERR_OUT_OF_MEMORY with nothing changed (the step is planned, and
 * everything applying the plan allocates is allocated, before anything
 * changes; calling again makes the same plan). Once it has scheduled
 * anything it cannot fail: the backend takes any step the engine's
 * parameters allow (pkv_engine_create refuses parameters whose largest
 * step a backend could not take, PKV_ERR_UNSUPPORTED), and device errors
 * do not fail this call: the step's arrays reach the device with its
 * first pkv_engine_attend, whose device errors may be repeated. A device
 * copy that fails for one sequence (swap-out, swap-in, copy-on-write) does
 * not fail the call either: that sequence sits the step out, recomputed
 * later or still swapped out, with a PKV_LOG_LEVEL_WARN line.
 * Thread-safety: the stepping thread only.
 * Ownership: the batch and its arrays are owned by the engine, valid until
 * the next pkv_engine_step_begin.
 */
PKV_API pkv_status pkv_engine_step_begin(pkv_engine *engine,
                                         const pkv_batch **out);

/*
 * One layer of the step: write this step's K and V rows into the cache,
 * then attend every query row over its sequence's cache (causal within the
 * step, grouped-query heads). q and out are [num_tokens][num_q_heads]
 * [head_dim]; k and v are [num_tokens][num_kv_heads][head_dim]. Call it for
 * layers 0 .. num_layers - 1, each once, in any order. out may be q itself
 * or overlap it (in-place attention): every backend reads all of q before
 * out is written.
 * Non-finite input: a sequence whose k or v rows hold a NaN, an infinity
 * or (f16 and u8 caches) a value beyond the f16 range fails alone: its
 * rows are stored as zeros in its own slots, the call still succeeds for
 * every other sequence, and at step_end the sequence ends with
 * PKV_FINISH_REASON_FAILED and status PKV_ERR_NON_FINITE, without adding any
 * block to the prefix cache. Host-memory tensors only: cl_mem tensors are
 * not scanned. q is not scanned (a NaN query poisons its own rows only).
 * Errors: PKV_ERR_BAD_STATE outside a step or for a layer already done,
 * PKV_ERR_INVALID_ARGUMENT for a tensor of the wrong shape or dtype, a
 * host tensor whose data + offset is not aligned to its element size (4
 * bytes f32, 2 bytes f16) or a layer out of range, PKV_ERR_STRUCT_SIZE for
 * a tensor's struct_size, PKV_ERR_UNSUPPORTED for a memory kind the
 * backend does not take, device errors (PKV_ERR_DEVICE,
 * PKV_ERR_DEVICE_MEMORY; the first attend of a step also uploads the
 * step's arrays). A failed call writes nothing another sequence can see
 * and may be repeated: a repeat writes the same rows again.
 * Thread-safety: the stepping thread only.
 * Ownership: tensors are borrowed for the call. On the OpenCL backend,
 * host tensors are copied to and from buffers the engine keeps between
 * calls (no buffer is created per call); a host that wants no copy wraps
 * its memory once (CL_MEM_USE_HOST_PTR) and passes cl_mem tensors
 * (pkv_opencl.h).
 */
PKV_API pkv_status pkv_engine_attend(pkv_engine *engine, uint32_t layer,
                                     const pkv_tensor *q, const pkv_tensor *k,
                                     const pkv_tensor *v,
                                     const pkv_tensor *out);

/*
 * End the step: sampled[i] is the token sampled from the logits of batch
 * row sample_rows[i], stop[i] nonzero if the host ends that sequence there
 * (the token is still counted). For a sequence that ran drafts, sampled[]
 * at its rows is what the host verified: the engine keeps the drafts that
 * equal the token sampled at the row before them, in order, then the
 * first sampled token that does not (or, all accepted, the last row's:
 * the bonus token). Greedy verification is the argmax at every row; any
 * other (speculative sampling) writes its decision the same way. Both
 * have num_samples entries (NULL when it is 0; stop may be NULL for no
 * stops). Sequences that reach max_new_tokens or max_model_len end too.
 * Every layer must have been attended, unless the batch has no rows.
 * Errors: PKV_ERR_BAD_STATE outside a step or with layers left;
 * PKV_ERR_INVALID_ARGUMENT for a wrong count or a token out of range
 * (nothing changes: call again with good input).
 * Thread-safety: the stepping thread only.
 * Ownership: inputs are borrowed for the call.
 */
PKV_API pkv_status pkv_engine_step_end(pkv_engine *engine,
                                       const int32_t *sampled,
                                       const uint8_t *stop,
                                       uint32_t num_samples);

/*
 * Nonzero while the engine holds any sequence (queued, waiting, running,
 * swapped) or an end not yet reported in a batch, or a KV store save is in
 * flight (steps poll it: a host that steps until this is 0 before
 * pkv_engine_destroy loses no save; destroy cancels those in flight).
 * Thread-safety: safe from any thread.
 */
PKV_API int pkv_engine_has_work(const pkv_engine *engine);

/* --------------------------------------------------------- introspection */

/* Counters of one engine. Fields are append-only. */
typedef struct pkv_engine_stats {
    uint32_t struct_size; /* sizeof(pkv_engine_stats), set by _init */
    uint32_t block_size;
    /* Blocks of the pool: total == free + cached_free + used. used counts
       the reserved null block (block 0), so an idle engine has used == 1.
       A block holds block_size tokens' KV over every layer, or with
       hybrid memory over one group's layers (group_layers): blocks_total
       * block_bytes is the cache's bytes either way. */
    uint64_t blocks_total;
    uint64_t blocks_free;        /* free, holding no cached prefix */
    uint64_t blocks_cached_free; /* free, holding a cached prefix: evictable */
    uint64_t blocks_used;        /* ref count > 0, plus the null block */
    /* Tokens held by used blocks against the slots those blocks have
       (block_size per used block, the null block excluded). */
    uint64_t tokens_stored;
    uint64_t slots_allocated;
    /* Bytes of KV per block of the pool, quantization parameters included:
       over every layer, or with hybrid memory over one group's layers. */
    uint64_t block_bytes;
    /* Sequences by state, now. */
    uint32_t num_waiting;
    uint32_t num_running;
    uint32_t num_swapped;
    uint32_t reserved0; /* always 0: keeps the 64-bit fields aligned */
    /* Totals since creation. */
    uint64_t steps;
    uint64_t prefix_query_tokens; /* prompt tokens looked up on admission */
    uint64_t prefix_hit_tokens;   /* of those, found in the prefix cache */
    uint64_t preemptions;         /* by recompute and by swap */
    uint64_t swap_outs;           /* sequences copied to host memory */
    uint64_t swap_ins;            /* sequences brought back (and imported
                                     ones brought in: pkv_seq_import) */
    uint64_t seqs_finished;       /* every end (stop, length, abort,
                                     failure), counted when it happens,
                                     before the batch that reports it */
    /* Since 0.2.0. Speculative decoding (pkv_seq_propose): draft tokens
     * that ran in a step, and of those, the ones step_end accepted. */
    uint64_t draft_tokens;
    uint64_t draft_tokens_accepted;
    /* Since 0.2.0: the KV store (pkv_engine_params.store). */
    uint32_t num_loading; /* waiting sequences whose blocks are loading
                             (counted in num_waiting too) */
    uint32_t reserved1;   /* always 0 */
    uint64_t store_lookups;      /* prompts asked of the store */
    uint64_t store_query_blocks; /* blocks asked for */
    uint64_t store_hit_blocks;   /* blocks loaded and verified */
    uint64_t store_hit_tokens;   /* their tokens */
    uint64_t store_load_bytes;   /* bytes of the values that arrived */
    uint64_t store_wait_us;      /* time sequences waited for loads */
    uint64_t store_saves;        /* blocks the store accepted */
    uint64_t store_save_bytes;   /* their bytes */
    uint64_t store_saves_skipped; /* not saved: the budget or host memory */
    /* Failures by kind. A load or save the connector refused or reported
     * failed (connection, server error, its own timeout): */
    uint64_t store_load_failures;
    uint64_t store_save_failures;
    /* Loads the engine gave up on after timeout_ms (cancelled): */
    uint64_t store_timeouts;
    /* Values that arrived and were rejected, the block computed instead:
     * damaged (another size, a checksum that does not match) or for
     * another block (geometry, key, parent's key or tokens differ). */
    uint64_t store_damaged;
    uint64_t store_mismatched;
    /* Since 0.2.0. Hybrid memory (pkv_engine_params.kv_memory): the
     * groups of layers, 1 without it, and the layers of each (a block
     * holds one group's KV; pkv_engine_get_group_stats has each group's
     * blocks). */
    uint32_t kv_groups;
    uint32_t group_layers;
} pkv_engine_stats;

/*
 * Zero *stats and set its struct_size, ready for pkv_engine_get_stats.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL stats (pkv_last_error).
 * Since 0.2.0.
 * Thread-safety: safe from any thread. Ownership: writes *stats only.
 */
PKV_API pkv_status pkv_engine_stats_init(pkv_engine_stats *stats);

/*
 * Read the engine's counters into *stats. stats->struct_size must be set
 * (pkv_engine_stats_init); only the fields that fit are written.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL engine (pkv_last_error) or
 * stats; PKV_ERR_STRUCT_SIZE for a struct_size below 0.1.0's or above
 * this library's (*stats is then unchanged).
 * Thread-safety: as any engine call. Ownership: writes *stats only.
 */
PKV_API pkv_status pkv_engine_get_stats(const pkv_engine *engine,
                                        pkv_engine_stats *stats);

/*
 * One group of layers of hybrid memory (pkv_engine_params.kv_memory),
 * group < pkv_engine_stats.kv_groups: its layers' window (0: the group
 * keeps every token, as the one group without hybrid memory does),
 * the blocks its tables hold (used: blocks_used counts them too) and the
 * tokens those blocks hold. Without hybrid memory there is one group, of
 * every layer, whose figures are pkv_engine_stats' blocks_used (less the
 * null block) and tokens_stored. Groups of full layers come first, then
 * the windows in increasing order.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL engine (pkv_last_error) or
 * out-parameter, or a group out of range. Since 0.2.0.
 * Thread-safety: as any engine call. Ownership: writes the outputs only.
 */
PKV_API pkv_status pkv_engine_get_group_stats(const pkv_engine *engine,
                                              uint32_t group,
                                              uint32_t *window,
                                              uint64_t *blocks_used,
                                              uint64_t *tokens_stored);

/*
 * The block table of a live sequence, for introspection: *blocks points to
 * *num_blocks block ids (logical block i holds tokens [i * block_size,
 * (i + 1) * block_size)); *num_tokens tokens have slots (between steps:
 * the tokens whose KV is stored, all but the last of a sequence that
 * decodes, see pkv_seq_propose). A sequence that is waiting, swapped, or
 * added and not yet seen by a step has no blocks. With hybrid memory
 * (pkv_engine_params.kv_memory) this is the first group's table (the
 * full layers', if any): pkv_engine_get_group_block_table gives each
 * group's.
 * Errors: PKV_ERR_NOT_FOUND for an id that is not live;
 * PKV_ERR_INVALID_ARGUMENT for a NULL argument.
 * Thread-safety: as any engine call.
 * Ownership: *blocks is owned by the engine, valid until its next mutating
 * call (any call but the get_* ones and pkv_engine_has_work).
 */
PKV_API pkv_status pkv_engine_get_block_table(const pkv_engine *engine,
                                              pkv_seq_id seq_id,
                                              const uint32_t **blocks,
                                              uint32_t *num_blocks,
                                              uint32_t *num_tokens);

/*
 * Group `group`'s block table of a live sequence (group <
 * pkv_engine_stats.kv_groups; pkv_engine_get_group_stats says its window),
 * as pkv_engine_get_block_table gives the first group's: every group's
 * table covers the same *num_tokens tokens in *num_blocks blocks. A
 * windowed group's table holds block 0 (the reserved null block, which
 * holds no KV) in place of each block that lay wholly behind the window
 * of the sequence's next row and was given back: no later row reads it.
 * A block id names a block of the pool, which holds the group's layers
 * (pkv_engine_stats.group_layers of them).
 * Errors: PKV_ERR_NOT_FOUND for an id that is not live;
 * PKV_ERR_INVALID_ARGUMENT for a NULL argument or a group out of range.
 * Since 0.3.0.
 * Thread-safety: as any engine call.
 * Ownership: as pkv_engine_get_block_table's.
 */
PKV_API pkv_status pkv_engine_get_group_block_table(
    const pkv_engine *engine, pkv_seq_id seq_id, uint32_t group,
    const uint32_t **blocks, uint32_t *num_blocks, uint32_t *num_tokens);

#ifdef __cplusplus
}
#endif

#endif /* PKV_PKV_H */
