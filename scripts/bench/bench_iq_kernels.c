// llama.cpp's own i-quant decoding kernels (ggml_vec_dot_iq*_q8_K from llama-cpp-python's
// libggml-cpu), timed on the shapes and blocks examples/bench_iq_kernels.rs times hyoka's on:
// one thread, a 4096 × 14336 matrix of random blocks (d = 2^-12 where the block starts with
// it), one activation row rounded to Q8_K, best of 20 passes. Prints "KIND ns/weight".
// Built and run by scripts/bench/bench_iq_kernels.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*vec_dot)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void quantize_row_q8_K(const float *x, void *y, int64_t k);
void ggml_vec_dot_iq2_xxs_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_iq2_xs_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_iq2_s_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_iq3_xxs_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_iq3_s_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_iq1_s_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_iq1_m_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_iq4_xs_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const int rows = 4096, cols = 14336, blocks = cols / 256;
    // Name, kernel, block bytes, whether the block starts with d (IQ1_M's is in its scales).
    const struct { const char *name; vec_dot f; int bytes; int d_first; } kinds[] = {
        {"IQ2_XXS", ggml_vec_dot_iq2_xxs_q8_K, 66, 1}, {"IQ2_XS", ggml_vec_dot_iq2_xs_q8_K, 74, 1},
        {"IQ3_XXS", ggml_vec_dot_iq3_xxs_q8_K, 98, 1}, {"IQ1_S", ggml_vec_dot_iq1_s_q8_K, 50, 1},
        {"IQ3_S", ggml_vec_dot_iq3_s_q8_K, 110, 1},    {"IQ2_S", ggml_vec_dot_iq2_s_q8_K, 82, 1},
        {"IQ4_XS", ggml_vec_dot_iq4_xs_q8_K, 136, 1},  {"IQ1_M", ggml_vec_dot_iq1_m_q8_K, 56, 0},
    };
    float *x = malloc(sizeof(float) * cols);
    for (int i = 0; i < cols; i++) x[i] = ((i * 7919 % 1000) - 500.0f) / 300.0f;
    uint8_t *y = malloc(292 * blocks);  // block_q8_K: d, 256 values, 16 sums
    quantize_row_q8_K(x, y, cols);
    uint64_t state = 3;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t row_bytes = (size_t)kinds[k].bytes * blocks;
        uint8_t *w = malloc(row_bytes * rows);
        for (size_t i = 0; i < row_bytes * rows; i++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            w[i] = state >> 56;
        }
        if (kinds[k].d_first)
            for (size_t b = 0; b < (size_t)blocks * rows; b++) {
                w[b * kinds[k].bytes] = 0x00;
                w[b * kinds[k].bytes + 1] = 0x0c;  // f16 2^-12
            }
        float *out = malloc(sizeof(float) * rows);
        double best = 1e9;
        for (int pass = 0; pass < 20; pass++) {
            double t0 = now();
            for (int r = 0; r < rows; r++) kinds[k].f(cols, out + r, 0, w + row_bytes * r, 0, y, 0, 1);
            double t = now() - t0;
            if (t < best) best = t;
        }
        printf("%s %.4f\n", kinds[k].name, best / ((double)rows * cols) * 1e9);
        free(w);
        free(out);
    }
    return 0;
}
