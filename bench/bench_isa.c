/* SPDX-License-Identifier: MIT */
/* pkv-bench isa: what Intel GPUs would run. tests/check_isa.sh compiles
 * the kernels pkv picks on an Intel GPU with Intel's offline compiler and
 * reads the GEN assembly; this subcommand runs it and passes its JSON
 * lines on. */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

int bench_isa(const bench_options *opt)
{
    char json[] = "/tmp/pkv-isa-XXXXXX";
    int fd = mkstemp(json);
    if (fd < 0) {
        perror("pkv-bench isa: mkstemp");
        return 1;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "sh '%s/tests/check_isa.sh' '%s'%s --json '%s' >&2",
             PKV_PROJECT_DIR, PKV_PROJECT_DIR, opt->quick ? " --quick" : "",
             json);
    int rc = system(cmd);
    FILE *in = fdopen(fd, "r");
    if (in != NULL) {
        char line[1024];
        while (opt->json != NULL && fgets(line, sizeof line, in) != NULL)
            fputs(line, opt->json);
        fclose(in);
    }
    remove(json);
    /* check_isa.sh exits 77 without ocloc: nothing to measure. */
    if (rc != 0 && WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
        return 0;
    return rc == 0 ? 0 : 1;
}
