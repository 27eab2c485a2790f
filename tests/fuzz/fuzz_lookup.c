/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for pkv-router's reader of a backend's prefix-lookup
 * answer (examples/router/lookup_answer.c: rt_lookup_answer), the bytes
 * a backend sends back to POST /pkv/lookup/...: hostile like any from
 * the network.
 *
 * The first input byte picks the mode. Bit 0 clear: the rest is the
 * answer's body as it came off the wire, read under one of eight limits
 * (bits 1-3). Bit 0 set: the rest drives a builder that writes an answer
 * whose value it knows: cached_tokens and store_tokens absent, null,
 * whole numbers small and up to INT64_MAX, past it, negative, -0,
 * floats, exponents, strings, booleans, arrays and objects; a name given
 * twice; other members before, between and after them, one of them
 * invalid UTF-8 or holding a raw control byte now and then; white space
 * or none; the object in an array, followed by more, or cut short.
 * Random bytes rarely spell a lookup's answer.
 *
 * Checked: no read outside the answer's bytes (ASan: every call reads an
 * exact-size copy), no leak (LeakSanitizer); the result is -1 or within
 * [0, limit], and is the unlimited result clamped to limit (-1 with
 * it); a built answer's result is the value the builder expected.
 */
#include "fuzz_lookup.h"
#include "fuzz_check.h"
#include "fuzz_input.h"

#include "lookup.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t pkv_fuzz_ops;

/* The prompt lengths rt_lookup_ask could pass, edges included. */
static const uint32_t limits[8] = {
    0, 1, 7, 16, 1000, 65536, UINT32_MAX - 1, UINT32_MAX};

/* The answer being built, and what reading it must give. */
typedef struct built {
    char text[1024];
    size_t len;
    int valid; /* a lookup's answer */
} built;

static void put(built *a, const char *s)
{
    size_t n = strlen(s);
    CHECK(n < sizeof a->text - a->len);
    memcpy(a->text + a->len, s, n);
    a->len += n;
}

/* White space between tokens, as the input says: none mostly. */
static void space(built *a, bytes *b)
{
    static const char *const spaces[] = {"", "", "", " ", "\n\t ", "\r\n"};
    put(a, spaces[take(b) % (sizeof spaces / sizeof *spaces)]);
}

/* A count's value: its text, and whether (*ok) and as what (*v) the
 * reader takes it. */
static void count_text(bytes *b, char *out, size_t max, int *ok, uint64_t *v)
{
    static const char *const refused[] = {
        "9223372036854775808", /* INT64_MAX + 1 */
        "18446744073709551616",
        "-1",
        "-9223372036854775808",
        "5.0",
        "1e2",
        "0.5",
        "\"5\"",
        "true",
        "false",
        "[5]",
        "{\"n\":5}",
    };
    unsigned c = take(b);
    *ok = 1;
    *v = 0;
    switch (c % 16) {
    case 0:
        snprintf(out, max, "null");
        return;
    case 1:
        for (int i = 0; i < 8; i++)
            *v = *v << 8 | take(b);
        *v &= INT64_MAX;
        snprintf(out, max, "%" PRIu64, *v);
        return;
    case 2:
        *v = INT64_MAX;
        snprintf(out, max, "9223372036854775807");
        return;
    case 3:
        snprintf(out, max, "-0");
        return;
    case 4:
        *ok = 0;
        snprintf(out, max, "%s",
                 refused[take(b) % (sizeof refused / sizeof *refused)]);
        return;
    case 5:
        *ok = 0;
        snprintf(out, max, "-%u", 1 + take(b));
        return;
    default:
        /* Small: around the limits the builder picks. */
        *v = c / 16;
        snprintf(out, max, "%" PRIu64, *v);
        return;
    }
}

/* A member the reader does not read; 0 when it makes the text invalid
 * JSON (invalid UTF-8, a raw control byte). */
static int other_member(built *a, bytes *b)
{
    static const char *const others[] = {
        "\"prompt_tokens\":12",
        "\"x\":\"text\"",
        "\"y\":[1,{\"z\":null},2.5]",
        "\"\\u00e9\":\"\\ud83d\\ude00\"",
        "\"store\":-3",
    };
    unsigned c = take(b);
    if (c % 16 == 0) {
        put(a, "\"bad\":\"\xff\xfe\"");
        return 0;
    }
    if (c % 16 == 1) {
        put(a, "\"ctl\":\"\x01\"");
        return 0;
    }
    put(a, others[c % (sizeof others / sizeof *others)]);
    return 1;
}

/* The member name: a count from the input, in *ok and *v as
 * count_text's. */
static void count_member(built *a, bytes *b, const char *name, int *ok,
                         uint64_t *v)
{
    /* Now and then given twice: the first, of any type, does not count. */
    static const char *const firsts[] = {"\"no\"", "1", "null", "-5", "2.5"};
    unsigned c = take(b);
    if (c % 8 == 0) {
        put(a, "\"");
        put(a, name);
        put(a, "\":");
        put(a, firsts[c / 8 % (sizeof firsts / sizeof *firsts)]);
        put(a, ",");
    }
    char value[32];
    count_text(b, value, sizeof value, ok, v);
    put(a, "\"");
    put(a, name);
    put(a, "\":");
    space(a, b);
    put(a, value);
}

/* Build an answer from the input; its expected result under limit. */
static int64_t build(built *a, bytes *b, uint32_t limit)
{
    a->len = 0;
    a->valid = 1;
    /* Members: up to two others, cached_tokens (left out one time in
     * eight), store_tokens (one in four), in an order the input picks. */
    enum { OTHER1, OTHER2, CACHED, STORED, MEMBERS };
    unsigned has = take(b);
    int present[MEMBERS] = {(has & 1) != 0, (has >> 1 & 1) != 0,
                            (has >> 2 & 7) != 0, (has >> 5 & 3) != 0};
    unsigned first = take(b) % MEMBERS;
    int cached_ok = 0, stored_ok = 1; /* absent: refused, taken as 0 */
    uint64_t cached = 0, stored = 0;
    int comma = 0;
    space(a, b);
    put(a, "{");
    for (unsigned i = 0; i < MEMBERS; i++) {
        unsigned m = (first + i) % MEMBERS;
        if (!present[m])
            continue;
        if (comma)
            put(a, ",");
        space(a, b);
        comma = 1;
        if (m == CACHED)
            count_member(a, b, "cached_tokens", &cached_ok, &cached);
        else if (m == STORED)
            count_member(a, b, "store_tokens", &stored_ok, &stored);
        else
            a->valid &= other_member(a, b);
        space(a, b);
    }
    put(a, "}");
    a->valid &= cached_ok && stored_ok;
    /* Mostly the object alone; else in an array, followed by more, or
     * cut short (a proper prefix of an object is never JSON). */
    switch (take(b) % 16) {
    case 0:
        CHECK(a->len < sizeof a->text);
        memmove(a->text + 1, a->text, a->len);
        a->text[0] = '[';
        a->len++;
        put(a, "]");
        a->valid = 0;
        break;
    case 1:
        put(a, take(b) % 2 ? "{}" : "x");
        a->valid = 0;
        break;
    case 2: {
        size_t cut = take(b);
        cut = cut << 8 | take(b);
        a->len = cut % a->len;
        a->valid = 0;
        break;
    }
    case 3:
        put(a, " \n");
        break;
    default:
        break;
    }
    if (!a->valid)
        return -1;
    uint64_t most = cached > stored ? cached : stored;
    return most < limit ? (int64_t)most : (int64_t)limit;
}

/* rt_lookup_answer on an exact-size copy of data[0, len) (so that ASan
 * sees a read past len) under limit, checked against its result
 * without a limit. */
static int64_t answer(const char *data, size_t len, uint32_t limit)
{
    char *copy = malloc(len > 0 ? len : 1);
    CHECK(copy != NULL);
    if (len > 0)
        memcpy(copy, data, len);
    int64_t got = rt_lookup_answer(copy, len, limit);
    int64_t whole = rt_lookup_answer(copy, len, UINT32_MAX);
    free(copy);
    CHECK(got == -1 || (got >= 0 && got <= (int64_t)limit));
    CHECK(whole == -1 ? got == -1
                      : got == (whole < limit ? whole : (int64_t)limit));
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pkv_fuzz_ops++;
    if (size == 0)
        return 0;
    uint32_t limit = limits[data[0] >> 1 & 7];
    bytes in = {data + 1, size - 1};
    if ((data[0] & 1) == 0) {
        answer((const char *)in.p, in.n, limit);
        return 0;
    }
    /* A small limit from the input as often as one of the eight. */
    if (data[0] & 16)
        limit = take(&in) % 32;
    built a;
    int64_t expected = build(&a, &in, limit);
    int64_t got = answer(a.text, a.len, limit);
    if (got != expected) {
        fprintf(stderr,
                "answer \"%.*s\" under %" PRIu32 ": %" PRId64
                ", expected %" PRId64 "\n",
                (int)a.len, a.text, limit, got, expected);
        CHECK(got == expected);
    }
    return 0;
}
