/* gemm_shapes.h - the GEMM shapes of GPT training, shared by bench_gemm and ct_tune.
 * Row-major C(m x n) = op(A) * op(B), op(A) m x k, op(B) k x n; linear weights are (out, in). */
#ifndef CT_GEMM_SHAPES_H
#define CT_GEMM_SHAPES_H

#include <stddef.h>

typedef struct ct_gemm_shape {
    char name[48]; /* e.g. "C768_BT1024_qkv_fwd" */
    size_t m, n, k, batch;
    int ta, tb;
} ct_gemm_shape;

/* Append the shapes of one (C, B*T) configuration: forward, dX and dW of the four linear layers
 * (qkv, attproj, fc, fcproj) and the batched attention products (QK^T, PV, P^T dO), with head
 * size 64 and T = min(BT, 1024). Returns the number written (at most `room`). */
int ct_gemm_shapes_gpt(int C, int BT, ct_gemm_shape *out, int room);

#endif
