/* SPDX-License-Identifier: MIT */
/*
 * Command-line values the example hosts share: whole numbers, the KV type
 * and the backend, with a message that names the argument on error; and
 * the files the arguments name.
 */
#ifndef PKV_EXAMPLE_HOST_ARGS_H
#define PKV_EXAMPLE_HOST_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* "PROGRAM: ARG needs a value (TAKES)" or "PROGRAM: ARG VALUE: expected
 * TAKES" on stderr (value NULL: missing). Returns -1. */
int host_bad_arg(const char *program, const char *arg, const char *value,
                 const char *takes);

/* The command-line argument a, followed by v (NULL: none), as one of the
 * n options that take a value: 0 when it is one and has its value, else
 * -1 after printing "PROGRAM: unknown option A" or that it needs a
 * value. */
int host_option_with_value(const char *program, const char *a,
                           const char *v, const char *const *options,
                           size_t n);

/* A decimal whole number that fits 32 bits. 0 or -1. */
int host_parse_u32(const char *s, uint32_t *out);

/* f32, f16, u8, u4 or u8k-u4v (U8 keys, U4 values) to a pkv_kv_dtype.
 * 0 or -1. */
int host_parse_kv(const char *s, int32_t *out);

/* The name host_parse_kv reads for a pkv_kv_dtype ("?" for none). */
const char *host_kv_name(int32_t dtype);

/* auto, cpu or opencl to a pkv_backend_kind. 0 or -1. */
int host_parse_backend(const char *s, int32_t *out);

/* The whole file at path, NUL-terminated, its length in *len; NULL when
 * it cannot be read. The caller frees it. */
char *host_read_file(const char *path, size_t *len);

#endif
