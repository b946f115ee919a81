/* rec_common.c - the pieces the recursive algorithms share: folding a non-power-of-two group onto
 * its largest power-of-two core (MPICH's scheme: of the first 2r ranks, even ones hand their data
 * to the odd neighbour and sit out), recursive halving (reduce-scatter) and recursive doubling
 * (all-gather) over core regions whose boundaries the caller chooses.
 *   halving:  lg p2 steps, step k exchanges half of the remaining range:
 *             alpha lg p + beta (p-1)/p N + gamma (p-1)/p N
 *   doubling: lg p2 steps, step k exchanges the 2^k regions held so far: alpha lg p + beta (p-1)/p N
 */
#include "parallel_impl.h"

void ct__fold_init(ct__fold *f, int n, int rank) {
    int p2 = 1;
    while (p2 * 2 <= n) p2 *= 2;
    f->n = n;
    f->p2 = p2;
    f->r = n - p2;
    if (rank < 2 * f->r) {
        f->buddy = rank ^ 1;
        f->core = rank % 2 ? rank / 2 : -1;
    } else {
        f->buddy = -1;
        f->core = rank - f->r;
    }
}

int ct__fold_old(const ct__fold *f, int core) { return core < f->r ? 2 * core + 1 : core + f->r; }

int ct__fold_block(const ct__fold *f, int core) {
    if (core >= f->p2) return f->n;
    return core < f->r ? 2 * core : core + f->r;
}

ct_status ct__rec_halving(ct_comm *c, const ct__fold *f, void *buf, const size_t *off,
                          ct_dtype dt, ct_op op) {
    ct_status st = CT_OK;
    size_t es = ct_dtype_size(dt);
    int lo = 0, hi = f->p2, me = f->core;
    char *b = buf;
    for (int mask = f->p2 / 2; mask >= 1; mask /= 2) {
        int partner = me ^ mask, mid = lo + (hi - lo) / 2;
        int klo, khi, slo, shi; /* keep / send region ranges */
        if (me < partner) { klo = lo; khi = mid; slo = mid; shi = hi; }
        else { klo = mid; khi = hi; slo = lo; shi = mid; }
        st = ct__p2p_sendrecv_reduce(c, ct__fold_old(f, partner), b + off[slo] * es,
                                     (off[shi] - off[slo]) * es, ct__fold_old(f, partner),
                                     b + off[klo] * es, off[khi] - off[klo], dt, op);
        if (st) return st;
        lo = klo;
        hi = khi;
    }
    return st;
}

ct_status ct__rec_doubling_gather(ct_comm *c, const ct__fold *f, void *buf, const size_t *off,
                                  size_t es) {
    ct_status st = CT_OK;
    int me = f->core;
    char *b = buf;
    for (int mask = 1; mask < f->p2; mask *= 2) {
        int partner = me ^ mask;
        int mlo = me & ~(mask - 1), plo = partner & ~(mask - 1);
        st = ct__p2p_sendrecv(c, ct__fold_old(f, partner), b + off[mlo] * es,
                              (off[mlo + mask] - off[mlo]) * es, ct__fold_old(f, partner),
                              b + off[plo] * es, (off[plo + mask] - off[plo]) * es);
        if (st) return st;
    }
    return st;
}
