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

#define PKV_VERSION_MAJOR 0
#define PKV_VERSION_MINOR 1
#define PKV_VERSION_PATCH 0
#define PKV_VERSION_STRING "0.1.0"
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
    X(PKV_ERR_INTERNAL, -13, "internal invariant violated (a pkv bug)")

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

/* Element type of the KV cache. Stored in structs as int32_t. */
typedef enum pkv_kv_dtype {
    PKV_KV_F32 = 0, /* 4 bytes per element */
    PKV_KV_F16 = 1, /* 2 bytes per element (storage only; math in f32) */
    PKV_KV_U8 = 2   /* 1 byte per element plus per-group lo/scale (f16) */
} pkv_kv_dtype;

/* How U8 quantization groups values. Stored in structs as int32_t. */
typedef enum pkv_quant_group {
    /* Default for the tensor: per-channel for keys, per-token for values. */
    PKV_QUANT_DEFAULT = 0,
    /* One lo/scale per channel, per kv head, over one block's tokens. */
    PKV_QUANT_PER_CHANNEL = 1,
    /* One lo/scale per token, per kv head, over the head's channels. */
    PKV_QUANT_PER_TOKEN = 2
} pkv_quant_group;

/* Log levels passed to pkv_log_fn. */
typedef enum pkv_log_level {
    PKV_LOG_ERROR = 0,
    PKV_LOG_WARN = 1,
    PKV_LOG_INFO = 2,
    PKV_LOG_DEBUG = 3
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

/* ---------------------------------------------------------------- engine */

/* The engine: KV cache, block manager, attention backend. Opaque. */
typedef struct pkv_engine pkv_engine;

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

    /* KV cache. */
    uint32_t block_size;    /* tokens per block, a power of two 1..256 */
    int32_t kv_dtype;       /* pkv_kv_dtype, default PKV_KV_F16 */
    int32_t key_quant;      /* pkv_quant_group for U8 keys */
    int32_t value_quant;    /* pkv_quant_group for U8 values */
    uint32_t num_blocks;    /* blocks in the pool, null block included;
                               0: derive from cache_bytes */
    uint64_t cache_bytes;   /* KV budget in bytes over all layers, used when
                               num_blocks is 0 */

    /* Host callbacks. */
    pkv_allocator allocator;
    pkv_log_fn log;
    void *log_user;
    int32_t log_level; /* highest pkv_log_level passed to log */
} pkv_engine_params;

/*
 * Fill *params with defaults: struct_size set, block_size 16, KV in f16,
 * default quantization groups, cache_bytes 256 MiB, malloc/free, no log.
 * Model geometry is left 0 and must be set by the caller.
 * Returns PKV_ERR_INVALID_ARGUMENT if params is NULL.
 * Thread-safety: safe from any thread. Ownership: writes *params only.
 */
PKV_API pkv_status pkv_engine_params_init(pkv_engine_params *params);

/*
 * Create an engine. On success *out holds the engine; on failure *out is
 * NULL and pkv_last_error() says why.
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
 * The message of the last failed call on this engine ("" if none). It names
 * the failing argument or OpenCL call where there is one.
 * Thread-safety: as any engine call.
 * Ownership: owned by the engine, valid until its next failing call or its
 * destruction; never free it. A NULL engine gives pkv_last_error().
 */
PKV_API const char *pkv_engine_last_error(const pkv_engine *engine);

/* Counters of one engine. Fields are append-only. */
typedef struct pkv_engine_stats {
    uint32_t struct_size; /* set by the caller to sizeof(pkv_engine_stats) */
    uint32_t block_size;
    /* Blocks: total == free + cached_free + used. used counts the reserved
       null block (block 0), so an idle engine has used == 1. */
    uint64_t blocks_total;
    uint64_t blocks_free;        /* free, holding no cached prefix */
    uint64_t blocks_cached_free; /* free, holding a cached prefix: evictable */
    uint64_t blocks_used;        /* ref count > 0, plus the null block */
    /* Tokens held by used blocks against the slots those blocks have
       (block_size per used block, the null block excluded). */
    uint64_t tokens_stored;
    uint64_t slots_allocated;
    /* Bytes of KV per block over all layers, parameters included. */
    uint64_t block_bytes;
} pkv_engine_stats;

/*
 * Read the engine's counters into *stats. stats->struct_size must be set;
 * only the fields that fit are written.
 * Thread-safety: as any engine call. Ownership: writes *stats only.
 */
PKV_API pkv_status pkv_engine_get_stats(const pkv_engine *engine,
                                        pkv_engine_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* PKV_PKV_H */
