/* reduce.c - element-wise reduction kernels (float32 and int32; sum, max; avg = sum then divide)
 * and the small conversions to MPI types, ops and error messages. Loops are plain so the
 * compiler vectorises them; every worker runs the same code, so results do not depend on where
 * an element was reduced. */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "parallel_impl.h"

const char *ct_dtype_str(ct_dtype t) { return t == CT_F32 ? "float" : t == CT_I32 ? "int32" : "?"; }
size_t ct_dtype_size(ct_dtype t) { return t == CT_F32 || t == CT_I32 ? 4 : 0; }
const char *ct_op_str(ct_op op) {
    return op == CT_OP_SUM ? "sum" : op == CT_OP_AVG ? "avg" : op == CT_OP_MAX ? "max" : "?";
}

static const char *coll_names[CT_COLL__COUNT] = {"allreduce", "reducescatter", "allgather",
                                                 "alltoall", "alltoallv", "bcast", "barrier",
                                                 "reducescatterv", "allgatherv"};
const char *ct_coll_str(ct_coll c) { return (unsigned)c < CT_COLL__COUNT ? coll_names[c] : "?"; }
ct_status ct_coll_parse(const char *s, ct_coll *out) {
    for (int i = 0; s && i < CT_COLL__COUNT; i++)
        if (!strcmp(s, coll_names[i])) {
            *out = (ct_coll)i;
            return CT_OK;
        }
    return CT_ERR_NOT_FOUND;
}

void ct__reduce(ct_dtype dt, ct_op op, void *out, const void *a, const void *b, size_t n) {
    if (dt == CT_F32) {
        float *o = out;
        const float *x = a, *y = b;
        if (op == CT_OP_MAX)
            for (size_t i = 0; i < n; i++) o[i] = x[i] > y[i] ? x[i] : (y[i] > x[i] ? y[i] : x[i]);
        else
            for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
    } else {
        int32_t *o = out;
        const int32_t *x = a, *y = b;
        if (op == CT_OP_MAX)
            for (size_t i = 0; i < n; i++) o[i] = x[i] > y[i] ? x[i] : y[i];
        else /* wrap-around sum without signed-overflow UB */
            for (size_t i = 0; i < n; i++) o[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
    }
}

void ct__finish_avg(ct_dtype dt, void *buf, size_t n, int size) {
    if (dt == CT_F32) {
        float *p = buf, s = (float)size;
        for (size_t i = 0; i < n; i++) p[i] /= s;
    } else {
        int32_t *p = buf;
        for (size_t i = 0; i < n; i++) p[i] /= size;
    }
}

MPI_Datatype ct__mpi_type(ct_dtype dt) { return dt == CT_F32 ? MPI_FLOAT : MPI_INT32_T; }
MPI_Op ct__mpi_op(ct_op op) { return op == CT_OP_MAX ? MPI_MAX : MPI_SUM; }

ct_status ct__mpi_err(ct_comm *c, int code, const char *what) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0, cls = 0;
    MPI_Error_class(code, &cls);
    MPI_Error_string(code, s, &len);
    return CT_ERR(&c->err, CT_ERR_MPI, "%s failed: MPI error class %d: %s", what, cls, s);
}

ct_status ct__mpi_err_peer(ct_comm *c, int code, const char *what, int peer) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0, cls = 0;
    const ct__member *m = &c->g->m[peer];
    MPI_Error_class(code, &cls);
    MPI_Error_string(code, s, &len);
    return CT_ERR(&c->err, CT_ERR_MPI,
                  "%s: %s with group rank %d (world worker %d, MPI rank %d on host %s) failed: MPI "
                  "error class %d: %s (that rank, or its host, may be gone)",
                  c->op[0] ? c->op : "a call", what, peer, m->wid, m->rank,
                  ct_topo_rank_host(c->topo, m->rank), cls, s);
}

ct_status ct__need_mpi_comm(ct_comm *c, const char *algo) {
    if (c->g->mpi == MPI_COMM_NULL)
        return CT_ERR(&c->err, CT_ERR_UNSUPPORTED,
                      "algorithm \"%s\" runs MPI's own collective, which needs one worker per rank "
                      "in the group; this group of %d workers spans %d ranks", algo, c->size,
                      c->g->nprocs);
    return CT_OK;
}

void ct__copy_stream(void *dst, const void *src, size_t bytes) {
#if defined(__SSE2__)
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > bytes) head = bytes;
    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    size_t body = bytes & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) { /* non-temporal: no read-for-ownership of dst */
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    memcpy(d + body, s + body, bytes - body);
#else
    memcpy(dst, src, bytes);
#endif
}

void ct__stream_fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}
