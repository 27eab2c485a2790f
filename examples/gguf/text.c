/* SPDX-License-Identifier: MIT */
/* What the GGUF host's tokenizers share (text.h). */
#include "text.h"

uint32_t gg_utf8_len(const char *s, size_t n)
{
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    const uint8_t *u = (const uint8_t *)s;
    if (u[0] < 0x80)
        return 1;
    uint32_t len = u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 0;
    if (len == 0 || u[0] > 0xf4 || len > n)
        return 0;
    uint32_t cp = u[0] & (0x7fu >> len);
    for (uint32_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (u[i] & 0x3fu);
    }
    if (cp < least[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return len;
}
