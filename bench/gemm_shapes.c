/* gemm_shapes.c - see gemm_shapes.h. */
#include <stdio.h>

#include "gemm_shapes.h"

static int add(ct_gemm_shape *out, int *i, int room, int C, int BT, const char *what, size_t m,
               size_t n, size_t k, size_t batch, int ta, int tb) {
    if (*i >= room) return 0;
    ct_gemm_shape *s = &out[(*i)++];
    snprintf(s->name, sizeof s->name, "C%d_BT%d_%s", C, BT, what);
    s->m = m, s->n = n, s->k = k, s->batch = batch, s->ta = ta, s->tb = tb;
    return 1;
}

int ct_gemm_shapes_gpt(int C, int BT, ct_gemm_shape *out, int room) {
    int i = 0;
    struct { const char *name; size_t out_f, in_f; } lin[] = {
        {"qkv", 3 * (size_t)C, (size_t)C}, {"attproj", (size_t)C, (size_t)C},
        {"fc", 4 * (size_t)C, (size_t)C},  {"fcproj", (size_t)C, 4 * (size_t)C}};
    for (int l = 0; l < 4; l++) {
        char w[40];
        /* y = x W^T: (BT x in)(in x out) with W stored (out x in) */
        snprintf(w, sizeof w, "%s_fwd", lin[l].name);
        add(out, &i, room, C, BT, w, BT, lin[l].out_f, lin[l].in_f, 1, 0, 1);
        /* dX = dY W: (BT x out)(out x in) */
        snprintf(w, sizeof w, "%s_dX", lin[l].name);
        add(out, &i, room, C, BT, w, BT, lin[l].in_f, lin[l].out_f, 1, 0, 0);
        /* dW = dY^T X: (out x BT)(BT x in) */
        snprintf(w, sizeof w, "%s_dW", lin[l].name);
        add(out, &i, room, C, BT, w, lin[l].out_f, lin[l].in_f, BT, 1, 1, 0);
    }
    size_t hs = 64, NH = (size_t)C / hs, T = BT < 1024 ? (size_t)BT : 1024, B = (size_t)BT / T;
    add(out, &i, room, C, BT, "att_QKt", T, T, hs, B * NH, 0, 1);  /* S = Q K^T */
    add(out, &i, room, C, BT, "att_PV", T, hs, T, B * NH, 0, 0);   /* O = P V */
    add(out, &i, room, C, BT, "att_PtdO", T, hs, T, B * NH, 1, 0); /* dV = P^T dO */
    return i;
}
