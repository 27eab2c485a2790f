/* SPDX-License-Identifier: MIT */
#include "opencl_features.h"

#include <stdio.h>
#include <string.h>

int pkv__cl_has_extension(const char *extensions, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = extensions; (p = strstr(p, name)) != NULL; p += len) {
        int starts = p == extensions || p[-1] == ' ';
        int ends = p[len] == '\0' || p[len] == ' ';
        if (starts && ends)
            return 1;
    }
    return 0;
}

uint32_t pkv__decode_variant(const char *extensions, uint32_t head_dim,
                             char *buf, size_t size)
{
    buf[0] = '\0';
    int dims_ok = head_dim == 32 || head_dim == 64 || head_dim == 128 ||
                  head_dim == 256;
    if (!dims_ok || !pkv__cl_has_extension(extensions, "cl_intel_subgroups") ||
        !pkv__cl_has_extension(extensions, "cl_intel_subgroups_short"))
        return 1;
    snprintf(buf, size, " -cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS%s",
             pkv__cl_has_extension(extensions, "cl_khr_fp16")
                 ? " -DPKV_INTEL_FP16"
                 : "");
    return 16;
}
