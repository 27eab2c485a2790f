/* SPDX-License-Identifier: MIT */
/*
 * Copies of the OpenCL backend: copy-on-write of blocks, staging tails
 * (U8 fork, rollback window), swap out and in, and staging tails to and
 * from the host, through pkv_block_copy and one transfer buffer.
 */
#include "internal.h"

#include <string.h>

/* --------------------------------------------------------- copies, swap */

/* Room for n (dst, src) pairs in units_host and units. */
static pkv_status units_reserve(pkv__backend *b, uint32_t n)
{
    size_t bytes = (size_t)n * 2 * sizeof(uint32_t);
    if (bytes <= b->units_cap && b->units != NULL)
        return PKV_OK;
    size_t cap = b->units_cap ? b->units_cap : 256;
    while (cap < bytes)
        cap *= 2;
    uint32_t *host = pkv__calloc(&b->alloc, cap, 1);
    if (host == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "copy list: no memory");
    cl_mem m;
    pkv_status st =
        pkv__ocl_new_zeroed(b, cap, CL_MEM_READ_ONLY, &m, "copy list");
    if (st != PKV_OK) {
        if (m != NULL)
            clReleaseMemObject(m);
        pkv__free(&b->alloc, host, cap, 1);
        return st;
    }
    if (b->units != NULL)
        clReleaseMemObject(b->units);
    pkv__free(&b->alloc, b->units_host, b->units_cap, 1);
    b->units = m;
    b->units_host = host;
    b->units_cap = cap;
    return PKV_OK;
}

/* units_host (filled by the caller) to the device, once for the launches
 * that follow. Whole: a simulator such as oclgrind forgets what it knew
 * of a buffer at a write of part of it. Blocking, since the next list is
 * written into the same host words. */
static pkv_status put_units(pkv__backend *b)
{
    cl_int err = clEnqueueWriteBuffer(b->queue, b->units, CL_TRUE, 0,
                                      b->units_cap, b->units_host, 0, NULL,
                                      NULL);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clEnqueueWriteBuffer(copy list)");
    return PKV_OK;
}

/* For each of the first n pairs of the list put_units sent, copy unit
 * src + src_add of src to unit dst + dst_add of dst: one pkv__ocl_launch. */
static pkv_status copy_units(pkv__backend *b, cl_mem dst, cl_uint dst_add,
                             cl_mem src, cl_uint src_add, uint32_t n,
                             size_t unit_bytes)
{
    cl_uint words4 = (cl_uint)(unit_bytes / 16);
    karg a[] = {KA(dst), KA(dst_add), KA(src), KA(src_add), KA(b->units),
                KA(words4)};
    return pkv__ocl_launch(b, b->k_copy, "pkv_block_copy", a, 6, words4, n,
                           b->local_copy);
}

/* The pairs that copy something into units_host; *n_out of them. 1 if
 * they are independent (no unit written twice, or written and read), so
 * that one pkv__ocl_launch may run them in any order; 0 if one must wait for
 * another (a chain a -> b, b -> c), and the caller runs them one by one. */
static int list_pairs(pkv__backend *b, const pkv__block_copy *pairs,
                      uint32_t n, uint32_t *n_out)
{
    uint32_t k = 0;
    int independent = 1;
    for (uint32_t i = 0; i < n; i++) {
        if (pairs[i].src == pairs[i].dst)
            continue;
        for (uint32_t j = 0; j < k; j++)
            if (b->units_host[2 * j] == pairs[i].dst ||
                b->units_host[2 * j] == pairs[i].src ||
                b->units_host[2 * j + 1] == pairs[i].dst)
                independent = 0;
        b->units_host[2 * k] = pairs[i].dst;
        b->units_host[2 * k + 1] = pairs[i].src;
        k++;
    }
    *n_out = k;
    return independent;
}

/* Copy the pairs within each of `count` buffers (the arenas, or the one
 * of the stages): one pkv__ocl_launch per buffer, or, for dependent pairs,
 * one per pair in order. */
static pkv_status copy_pairs(pkv__backend *b, cl_mem *bufs, uint32_t count,
                             const pkv__block_copy *pairs, uint32_t n,
                             size_t unit_bytes)
{
    pkv_status st = units_reserve(b, n);
    if (st != PKV_OK)
        return st;
    uint32_t k;
    if (list_pairs(b, pairs, n, &k)) {
        if (k > 0)
            st = put_units(b);
        for (uint32_t l = 0; st == PKV_OK && k > 0 && l < count; l++)
            st = copy_units(b, bufs[l], 0, bufs[l], 0, k, unit_bytes);
        return st;
    }
    for (uint32_t i = 0; st == PKV_OK && i < n; i++) {
        if (pairs[i].src == pairs[i].dst)
            continue;
        b->units_host[0] = pairs[i].dst;
        b->units_host[1] = pairs[i].src;
        st = put_units(b);
        for (uint32_t l = 0; st == PKV_OK && l < count; l++)
            st = copy_units(b, bufs[l], 0, bufs[l], 0, 1, unit_bytes);
    }
    return st;
}

pkv_status pkv__ocl_copy_blocks(pkv__backend *b, const pkv__block_copy *pairs,
                                uint32_t n)
{
    pkv_status st = pkv__backend_pairs_check(&b->cfg, pairs, n, 1);
    if (st != PKV_OK)
        return st;
    return copy_pairs(b, b->arenas, b->num_arenas, pairs, n,
                      b->layer_block_bytes);
}

pkv_status pkv__ocl_copy_stages(pkv__backend *b, const pkv__block_copy *pairs,
                                uint32_t n)
{
    pkv_status st = pkv__backend_pairs_check(&b->cfg, pairs, n, 0);
    if (st != PKV_OK)
        return st;
    return copy_pairs(b, &b->stages, 1, pairs, n, (size_t)b->stage_floats * 4);
}

/* The transfer buffer holds at least `bytes`. */
static pkv_status transfer_reserve(pkv__backend *b, size_t bytes)
{
    return pkv__ocl_grow_buffer(b, &b->transfer, &b->transfer_cap, bytes,
                                CL_MEM_READ_WRITE, "transfer");
}

/* Host bytes into the transfer buffer, whole, from its start; the caller
 * then copies them on with pkv_block_copy. */
static pkv_status to_transfer(pkv__backend *b, const void *host, size_t bytes)
{
    pkv_status st = transfer_reserve(b, bytes);
    if (st != PKV_OK)
        return st;
    cl_int err = clEnqueueWriteBuffer(b->queue, b->transfer, CL_FALSE, 0,
                                      bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clEnqueueWriteBuffer(transfer)");
    return PKV_OK;
}

/* The host layout of a swap is block after block, each arena after arena:
 * block i's arena a is transfer unit i * arenas + a. Units of the list:
 * the blocks on one side, i * arenas on the other; each arena's
 * pkv__ocl_launch adds a to the transfer side. */
static void list_swap(pkv__backend *b, const uint32_t *blocks, uint32_t n,
                      int to_arena)
{
    for (uint32_t i = 0; i < n; i++) {
        b->units_host[2 * i + (to_arena ? 0 : 1)] = blocks[i];
        b->units_host[2 * i + (to_arena ? 1 : 0)] = i * b->num_arenas;
    }
}

/* Every block's arenas gathered into the transfer buffer, one
 * pkv__ocl_launch per arena, then one read of it all. */
pkv_status pkv__ocl_swap_out(pkv__backend *b, const uint32_t *blocks,
                             uint32_t n, void *host)
{
    pkv_status st = pkv__backend_ids_check(&b->cfg, blocks, n, 0);
    if (st != PKV_OK || n == 0)
        return st;
    uint32_t arenas = b->num_arenas;
    size_t bytes = (size_t)n * arenas * b->layer_block_bytes;
    st = transfer_reserve(b, bytes);
    if (st == PKV_OK)
        st = units_reserve(b, n);
    if (st != PKV_OK)
        return st;
    list_swap(b, blocks, n, 0);
    st = put_units(b);
    for (uint32_t a = 0; st == PKV_OK && a < arenas; a++)
        st = copy_units(b, b->transfer, a, b->arenas[a], 0, n,
                        b->layer_block_bytes);
    if (st == PKV_OK) {
        cl_int err = clEnqueueReadBuffer(b->queue, b->transfer, CL_TRUE, 0,
                                         bytes, host, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = pkv__ocl_fail(err, "clEnqueueReadBuffer(swap out)");
    }
    pkv_status fin = pkv__ocl_finish(b, "swap out");
    return st != PKV_OK ? st : fin;
}

/* Every block's arenas in one host write, then one pkv__ocl_launch per
 * arena from the transfer buffer into it. */
pkv_status pkv__ocl_swap_in(pkv__backend *b, const void *host,
                            const uint32_t *blocks, uint32_t n)
{
    pkv_status st = pkv__backend_ids_check(&b->cfg, blocks, n, 1);
    if (st != PKV_OK || n == 0)
        return st;
    uint32_t arenas = b->num_arenas;
    st = units_reserve(b, n);
    if (st == PKV_OK)
        st = to_transfer(b, host, (size_t)n * arenas * b->layer_block_bytes);
    if (st == PKV_OK) {
        list_swap(b, blocks, n, 1);
        st = put_units(b);
    }
    for (uint32_t a = 0; st == PKV_OK && a < arenas; a++)
        st = copy_units(b, b->arenas[a], 0, b->transfer, a, n,
                        b->layer_block_bytes);
    pkv_status fin = pkv__ocl_finish(b, "swap in");
    return st != PKV_OK ? st : fin;
}

static pkv_status stage_check(const pkv__backend *b, uint32_t stage)
{
    if (stage >= b->cfg.num_stages)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "staging tail %u of %u",
                         (unsigned)stage, (unsigned)b->cfg.num_stages);
    return PKV_OK;
}

pkv_status pkv__ocl_stage_out(pkv__backend *b, uint32_t stage, void *host)
{
    pkv_status st = stage_check(b, stage);
    if (st != PKV_OK)
        return st;
    size_t bytes = (size_t)b->stage_floats * 4;
    cl_int err = clEnqueueReadBuffer(b->queue, b->stages, CL_TRUE,
                                     stage * bytes, bytes, host, 0, NULL,
                                     NULL);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clEnqueueReadBuffer(stage out)");
    return PKV_OK;
}

pkv_status pkv__ocl_stage_in(pkv__backend *b, const void *host, uint32_t stage)
{
    pkv_status st = stage_check(b, stage);
    size_t bytes = (size_t)b->stage_floats * 4;
    if (st == PKV_OK)
        st = units_reserve(b, 1);
    if (st == PKV_OK)
        st = to_transfer(b, host, bytes);
    if (st == PKV_OK) {
        b->units_host[0] = stage;
        b->units_host[1] = 0;
        st = put_units(b);
    }
    if (st == PKV_OK)
        st = copy_units(b, b->stages, 0, b->transfer, 0, 1, bytes);
    pkv_status fin = pkv__ocl_finish(b, "stage in");
    return st != PKV_OK ? st : fin;
}
