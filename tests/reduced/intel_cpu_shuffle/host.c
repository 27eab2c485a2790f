/* SPDX-License-Identifier: MIT */
/*
 * The host of the reduced case shuffle_runs.cl (README.md beside this
 * file): builds the kernel on the first device of the first OpenCL
 * platform (OCL_ICD_VENDORS picks the runtime), runs one run of 16 tokens
 * through its f32 path and compares with a double-precision reference.
 *
 * Usage: reduced_intel_shuffle KERNEL_FILE [BUILD_OPTIONS]
 *   (BUILD_OPTIONS default: -cl-std=CL2.0, as pkv builds decode_intel.cl)
 * Exit 0: right; 1: wrong; 2: no device, or an OpenCL call failed.
 */
#include <CL/cl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { D = 32, G = 2, N = 16 };

static int fail(const char *what, cl_int err)
{
    fprintf(stderr, "reduced_intel_shuffle: %s: OpenCL error %d\n", what,
            (int)err);
    return 2;
}

/* The whole file, NUL-terminated, or NULL. */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *s = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0)
        s = malloc((size_t)n + 1);
    if (s != NULL && fread(s, 1, (size_t)n, f) == (size_t)n) {
        s[n] = '\0';
    } else {
        free(s);
        s = NULL;
    }
    fclose(f);
    return s;
}

/* Values in [-1, 1) from a fixed sequence, the same on every run. */
static float next_value(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s KERNEL_FILE [BUILD_OPTIONS]\n", argv[0]);
        return 2;
    }
    const char *options = argc > 2 ? argv[2] : "-cl-std=CL2.0";
    char *source = read_file(argv[1]);
    if (source == NULL) {
        fprintf(stderr, "reduced_intel_shuffle: cannot read %s\n", argv[1]);
        return 2;
    }
    cl_platform_id platform;
    cl_device_id device;
    cl_int err = clGetPlatformIDs(1, &platform, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL);
    if (err != CL_SUCCESS)
        return fail("no OpenCL device", err);
    char name[256] = "", driver[256] = "";
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(device, CL_DRIVER_VERSION, sizeof driver, driver, NULL);
    printf("device: %s (driver %s), options: %s\n", name, driver, options);

    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        return fail("clCreateContext", err);
    cl_command_queue queue = clCreateCommandQueue(ctx, device, 0, &err);
    if (err != CL_SUCCESS)
        return fail("clCreateCommandQueue", err);
    const char *src = source;
    cl_program program = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    if (err != CL_SUCCESS)
        return fail("clCreateProgramWithSource", err);
    err = clBuildProgram(program, 1, &device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        static char log[1 << 16];
        clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG,
                              sizeof log - 1, log, NULL);
        fprintf(stderr, "%s\n", log);
        return fail("clBuildProgram", err);
    }
    cl_kernel kernel = clCreateKernel(program, "shuffle_runs", &err);
    if (err != CL_SUCCESS)
        return fail("clCreateKernel", err);

    /* v: [N][D], w: [N][G]; out[g][c] = sum_t w[t][g] v[t][c]. */
    static float v[N * D], w[N * G], out[G * D];
    static unsigned char codes[N * D / 2];
    uint32_t state = 1;
    for (int i = 0; i < N * D; i++)
        v[i] = next_value(&state);
    for (int i = 0; i < N * G; i++)
        w[i] = 0.5f * (next_value(&state) + 1.0f);
    cl_mem bv = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                               sizeof v, v, &err);
    cl_mem bc = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                               sizeof codes, codes, &err);
    cl_mem bw = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                               sizeof w, w, &err);
    cl_mem bo = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof out, NULL, &err);
    cl_mem bi = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof(cl_uint), NULL,
                               &err);
    if (bv == NULL || bc == NULL || bw == NULL || bo == NULL || bi == NULL)
        return fail("clCreateBuffer", err);
    cl_uint n = N, sel = 0, sub_group = 0;
    err = clSetKernelArg(kernel, 0, sizeof bv, &bv);
    err |= clSetKernelArg(kernel, 1, sizeof bc, &bc);
    err |= clSetKernelArg(kernel, 2, sizeof bw, &bw);
    err |= clSetKernelArg(kernel, 3, sizeof n, &n);
    err |= clSetKernelArg(kernel, 4, sizeof sel, &sel);
    err |= clSetKernelArg(kernel, 5, sizeof bo, &bo);
    err |= clSetKernelArg(kernel, 6, sizeof bi, &bi);
    if (err != CL_SUCCESS)
        return fail("clSetKernelArg", err);
    size_t lanes = 16;
    err = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &lanes, &lanes, 0,
                                 NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, bo, CL_TRUE, 0, sizeof out, out, 0,
                                  NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, bi, CL_TRUE, 0, sizeof sub_group,
                                  &sub_group, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return fail("running shuffle_runs", err);

    /* The largest error, and the largest distance from what a shuffle
     * that returns the calling lane's own value would give: lane l (channels
     * 2 l, 2 l + 1) weighting every token with token l's weights. */
    double worst = 0.0, own = 0.0;
    for (int g = 0; g < G; g++)
        for (int c = 0; c < D; c++) {
            double ref = 0.0, sum = 0.0;
            for (int t = 0; t < N; t++) {
                ref += (double)w[t * G + g] * v[t * D + c];
                sum += v[t * D + c];
            }
            double got = out[g * D + c];
            worst = fmax(worst, fabs(got - ref));
            own = fmax(own, fabs(got - (double)w[c / 2 * G + g] * sum));
        }
    int right = worst <= 1e-5;
    printf("sub-group size %u; max |out - reference| %.3g: %s\n",
           (unsigned)sub_group, worst, right ? "right" : "WRONG");
    if (!right && own <= 1e-5)
        printf("every lane weighted every token with its own token's "
               "weights: intel_sub_group_shuffle(x, j) returned the "
               "calling lane's x, not lane j's\n");
    clReleaseMemObject(bv);
    clReleaseMemObject(bc);
    clReleaseMemObject(bw);
    clReleaseMemObject(bo);
    clReleaseMemObject(bi);
    clReleaseKernel(kernel);
    clReleaseProgram(program);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    free(source);
    return right ? 0 : 1;
}
