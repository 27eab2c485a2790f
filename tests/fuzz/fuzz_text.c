/* SPDX-License-Identifier: MIT */
/* The tokenizer fuzz targets' shared oracle parts (fuzz_text.h). */
#include "fuzz_text.h"
#include "fuzz_check.h"

#include <stdlib.h>
#include <string.h>

size_t fuzz_valid_char(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c <= 0x7f)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (len > n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

void fuzz_put(fuzz_buf *b, const void *s, size_t n)
{
    if (n == 0) /* memcpy must not see the empty buffer's NULL */
        return;
    if (b->len + n > b->cap) {
        size_t cap = 2 * b->cap + n + 64;
        char *grown = realloc(b->data, cap);
        CHECK(grown != NULL);
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

int32_t *fuzz_tokenize_checked(fuzz_tokenize_fn fn, const void *t,
                               const char *s, size_t len, unsigned flags,
                               uint32_t bound, uint32_t vocab, int32_t bos,
                               int *count)
{
    *count = fn(t, s, len, flags, NULL, 0);
    if (*count < 0)
        return NULL;
    CHECK((uint32_t)*count <= bound);
    int32_t *ids = malloc(((size_t)bound + 1) * sizeof *ids);
    CHECK(ids != NULL);
    CHECK(fn(t, s, len, flags, ids, bound) == *count);
    for (int i = 0; i < *count; i++)
        CHECK(ids[i] >= 0 && (uint32_t)ids[i] < vocab);
    CHECK(!(flags & 1) || (*count >= 1 && ids[0] == bos));
    uint32_t half = (uint32_t)*count / 2;
    int32_t *part = malloc(((size_t)half + 1) * sizeof *part);
    CHECK(part != NULL);
    CHECK(fn(t, s, len, flags, part, half) == *count);
    CHECK(half == 0 || memcmp(part, ids, half * sizeof *ids) == 0);
    free(part);
    return ids;
}

void fuzz_check_decodes(fuzz_detokenize_fn fn, const void *t,
                        const int32_t *ids, int n, fuzz_buf *want)
{
    fuzz_buf got = {0};
    for (int i = 0; i < n; i++) {
        char piece[64];
        size_t k = fn(t, ids[i], piece, sizeof piece);
        CHECK(k <= sizeof piece);
        fuzz_put(&got, piece, k);
    }
    CHECK(got.len == want->len);
    CHECK(got.len == 0 || memcmp(got.data, want->data, got.len) == 0);
    free(want->data);
    free(got.data);
}

void fuzz_run_input(const uint8_t *data, size_t size, int variants,
                    const char *const *fragments, size_t num_fragments,
                    fuzz_check_fn check)
{
    if (size == 0)
        return;
    unsigned flags = data[0] & 3u;
    int variant = (data[0] >> 2) % variants;
    if (!(data[0] & 0x20)) {
        check(variant, flags, data + 1, size - 1);
        return;
    }
    fuzz_buf text = {0};
    for (size_t i = 1; i < size; i++) {
        const char *f = fragments[data[i] % num_fragments];
        fuzz_put(&text, f, strlen(f));
    }
    check(variant, flags, (const uint8_t *)text.data, text.len);
    free(text.data);
}
