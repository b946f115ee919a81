/* buffer.c - device buffers counted by memory category, and every copy in or out of them.
 *
 * Promises: an allocation is checked against the device's max allocation size and the per-device
 * cap before OpenCL is asked; a failure leaves nothing allocated and names the tensor, the bytes
 * asked and what is in use by category. New buffers are zero-filled, which also makes drivers
 * that allocate lazily commit the memory now rather than fail later inside a step. Every copy,
 * map and fill checks its range first and names the buffer; the non-blocking forms hand back a
 * ct_event (event.c) when asked for one. The element-wise launch piece (ct_launch_piece_max, its
 * test hook CT_TEST_MAX_LAUNCH) is kept here, read once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl_impl.h"

static size_t g_piece_max = (size_t)1 << 30;
static pthread_once_t g_piece_once = PTHREAD_ONCE_INIT;
static void piece_max_read(void) {
    const char *e = getenv("CT_TEST_MAX_LAUNCH");
    char *end = NULL;
    unsigned long long v = e ? strtoull(e, &end, 10) : 0;
    if (e && *e && end && !*end && v > 0 && v < g_piece_max) g_piece_max = (size_t)v;
}
size_t ct_launch_piece_max(void) {
    pthread_once(&g_piece_once, piece_max_read);
    return g_piece_max;
}

static const char *const cat_names[CT_MEM__COUNT] = {"params",      "grads",     "optimizer",
                                                     "activations", "workspace", "comm"};

const char *ct_mem_category_str(ct_mem_category c) {
    return (c >= 0 && c < CT_MEM__COUNT) ? cat_names[c] : "?";
}

void ct_device_mem_stats(const ct_device *dc, ct_mem_stats *out) {
    ct_device *d = (ct_device *)dc;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&d->mem_lock);
    for (int c = 0; c < CT_MEM__COUNT; c++) {
        out->current[c] = d->mem_current[c];
        out->peak[c] = d->mem_peak[c];
        out->total_current += d->mem_current[c];
    }
    out->total_peak = d->mem_total_peak;
    out->cap = d->mem_cap;
    out->live_buffers = d->live_buffers;
    pthread_mutex_unlock(&d->mem_lock);
}

void ct_device_mem_reset_peak(ct_device *d) {
    pthread_mutex_lock(&d->mem_lock);
    uint64_t total = 0;
    for (int c = 0; c < CT_MEM__COUNT; c++) {
        d->mem_peak[c] = d->mem_current[c];
        total += d->mem_current[c];
    }
    d->mem_total_peak = total;
    pthread_mutex_unlock(&d->mem_lock);
}

static void usage_line(ct_device *d, char *buf, size_t len) {
    size_t used = 0;
    uint64_t total = 0;
    buf[0] = '\0';
    for (int c = 0; c < CT_MEM__COUNT; c++) {
        total += d->mem_current[c];
        if (!d->mem_current[c]) continue;
        int w = snprintf(buf + used, len - used, "%s %s %.1f MiB", used ? "," : "", cat_names[c],
                         d->mem_current[c] / 1048576.0);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
    snprintf(buf + used, len - used, "%s total %.1f MiB of cap %.1f MiB", used ? ";" : "",
             total / 1048576.0, d->mem_cap / 1048576.0);
}

ct_status ct_buffer_alloc(ct_device *d, ct_mem_category cat, const char *name, size_t bytes,
                          ct_buffer **out) {
    *out = NULL;
    const char *nm = name ? name : "(unnamed)";
    if (cat < 0 || cat >= CT_MEM__COUNT)
        return CT_ERR(&d->err, CT_ERR_ARG, "buffer '%s': bad memory category %d", nm, (int)cat);
    if (bytes == 0) bytes = 4; /* OpenCL refuses empty buffers; a 0-element tensor gets a token */
    char use[512];
    pthread_mutex_lock(&d->mem_lock);
    uint64_t total = 0;
    for (int c = 0; c < CT_MEM__COUNT; c++) total += d->mem_current[c];
    int over_cap = total + bytes > d->mem_cap;
    if (over_cap || bytes > d->max_alloc) usage_line(d, use, sizeof use);
    if (!over_cap) { /* reserve now so two threads cannot both pass the check */
        d->mem_current[cat] += bytes;
        d->live_buffers++;
    }
    pthread_mutex_unlock(&d->mem_lock);
    if (over_cap)
        return CT_ERR(&d->err, CT_ERR_DEVICE_MEM,
                      "cannot allocate '%s' (%s): %zu bytes (%.1f MiB) would exceed the memory cap "
                      "of device %d (%s); in use:%s",
                      nm, cat_names[cat], bytes, bytes / 1048576.0, d->info.index, d->info.name, use);
    ct_status st = CT_OK;
    ct_buffer *b = NULL;
    if (bytes > d->max_alloc) {
        st = CT_ERR(&d->err, CT_ERR_DEVICE_MEM,
                    "cannot allocate '%s' (%s): %zu bytes (%.1f MiB) exceed the largest single "
                    "allocation of device %d (%s), %llu bytes (%s); in use:%s",
                    nm, cat_names[cat], bytes, bytes / 1048576.0, d->info.index, d->info.name,
                    (unsigned long long)d->max_alloc,
                    d->max_alloc < d->info.max_alloc_bytes ? "lowered by the device options"
                                                           : "CL_DEVICE_MAX_MEM_ALLOC_SIZE",
                    use);
        goto cleanup;
    }
    if (ct__alloc_fails(CT_ALLOC_DEVICE, bytes)) {
        st = CT_ERR(&d->err, CT_ERR_DEVICE_MEM,
                    "cannot allocate '%s' (%s): %zu bytes on device %d (%s): refused by the "
                    "allocation hook (fault injection)",
                    nm, cat_names[cat], bytes, d->info.index, d->info.name);
        goto cleanup;
    }
    b = ct_calloc(1, sizeof *b);
    if (!b) {
        st = CT_ERR(&d->err, CT_ERR_NOMEM, "out of host memory for buffer '%s'", nm);
        goto cleanup;
    }
    b->dev = d;
    b->bytes = bytes;
    b->cat = cat;
    snprintf(b->name, sizeof b->name, "%s", nm);
    cl_int rc = CL_SUCCESS;
    b->mem = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, bytes, NULL, &rc);
    if (rc == CL_SUCCESS) {
        const float zero = 0.0f;
        size_t fill = bytes & ~(size_t)3;
        if (fill) rc = clEnqueueFillBuffer(d->queue, b->mem, &zero, sizeof zero, 0, fill, 0, NULL, NULL);
        if (rc == CL_SUCCESS && fill != bytes) {
            static const unsigned char zb[4] = {0};
            rc = clEnqueueWriteBuffer(d->queue, b->mem, CL_TRUE, fill, bytes - fill, zb, 0, NULL,
                                      NULL);
        }
        if (rc == CL_SUCCESS) rc = clFinish(d->queue);
    }
    if (rc != CL_SUCCESS) {
        pthread_mutex_lock(&d->mem_lock);
        usage_line(d, use, sizeof use);
        pthread_mutex_unlock(&d->mem_lock);
        st = CT_CL_FAIL(&d->err, rc, "cannot allocate '%s' (%s): %zu bytes (%.1f MiB) on device %d "
                                     "(%s); in use:%s",
                        nm, cat_names[cat], bytes, bytes / 1048576.0, d->info.index, d->info.name, use);
        if (st == CT_ERR_OPENCL) st = CT_ERR_DEVICE_MEM;
        goto cleanup;
    }
    pthread_mutex_lock(&d->mem_lock);
    uint64_t now = 0;
    for (int c = 0; c < CT_MEM__COUNT; c++) now += d->mem_current[c];
    if (d->mem_current[cat] > d->mem_peak[cat]) d->mem_peak[cat] = d->mem_current[cat];
    if (now > d->mem_total_peak) d->mem_total_peak = now;
    pthread_mutex_unlock(&d->mem_lock);
    *out = b;
    return CT_OK;
cleanup:
    if (b && b->mem) clReleaseMemObject(b->mem);
    free(b);
    pthread_mutex_lock(&d->mem_lock);
    d->mem_current[cat] -= bytes;
    d->live_buffers--;
    pthread_mutex_unlock(&d->mem_lock);
    return st;
}

void ct_buffer_free(ct_buffer *b) {
    if (!b) return;
    ct_device *d = b->dev;
    clReleaseMemObject(b->mem);
    pthread_mutex_lock(&d->mem_lock);
    d->mem_current[b->cat] -= b->bytes;
    d->live_buffers--;
    pthread_mutex_unlock(&d->mem_lock);
    free(b);
}

uint64_t ct_device_max_alloc(const ct_device *d) { return d->max_alloc; }

/* ---------------------------------------------------------------- arenas */

struct ct_arena {
    size_t bytes;
    int n;
    ct_device *dev;
    char name[64];
    size_t *base;       /* [n]: each piece's first byte in the arena */
    ct_buffer **pieces; /* [n] */
};

void ct_arena_free(ct_arena *a) {
    if (!a) return;
    for (int i = 0; i < a->n; i++) ct_buffer_free(a->pieces[i]);
    free(a->pieces);
    free(a->base);
    free(a);
}

/* The first part after the piece starting at part i: whole parts while the piece stays within
 * lim (part i alone is checked by the caller). */
static size_t piece_next(const size_t *parts, size_t nparts, size_t bytes, uint64_t lim,
                         size_t i) {
    size_t j = i + 1;
    while (j < nparts && (j + 1 < nparts ? parts[j + 1] : bytes) - parts[i] <= lim) j++;
    return j;
}

ct_status ct_arena_alloc(ct_device *d, ct_mem_category cat, const char *name, size_t bytes,
                         const size_t *parts, const char *const *names, size_t nparts,
                         ct_arena **out) {
    *out = NULL;
    const char *nm = name ? name : "(unnamed)";
    if (!parts || nparts == 0 || parts[0] != 0)
        return CT_ERR(&d->err, CT_ERR_ARG, "arena '%s': its parts must start at byte 0", nm);
    for (size_t i = 1; i < nparts; i++)
        if (parts[i] <= parts[i - 1] || parts[i] >= bytes)
            return CT_ERR(&d->err, CT_ERR_ARG,
                          "arena '%s': part %zu starts at %zu, not after part %zu (%zu) and "
                          "before the end (%zu)",
                          nm, i, parts[i], i - 1, parts[i - 1], bytes);
    uint64_t lim = d->max_alloc;
    /* pieces: from a part's start, whole parts while they fit the limit */
    size_t npieces = 0;
    for (size_t i = 0; i < nparts;) {
        size_t j = i + 1;
        size_t end = j < nparts ? parts[j] : bytes;
        if (end - parts[i] > lim) {
            char where[160];
            if (names && names[i]) snprintf(where, sizeof where, "'%s'", names[i]);
            else snprintf(where, sizeof where, "at byte %zu", parts[i]);
            return CT_ERR(&d->err, CT_ERR_DEVICE_MEM,
                          "cannot allocate '%s' (%s, %.1f MiB in all): its part %s is %zu bytes "
                          "(%.1f MiB), above the largest single allocation of device %d (%s), "
                          "%llu bytes (%s)",
                          nm, cat_names[cat], bytes / 1048576.0, where, end - parts[i],
                          (end - parts[i]) / 1048576.0, d->info.index, d->info.name,
                          (unsigned long long)lim,
                          lim < d->info.max_alloc_bytes ? "lowered by the device options"
                                                        : "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
        }
        npieces++;
        i = piece_next(parts, nparts, bytes, lim, i);
    }
    ct_arena *a = ct_calloc(1, sizeof *a);
    if (a) {
        a->base = ct_calloc(npieces, sizeof *a->base);
        a->pieces = ct_calloc(npieces, sizeof *a->pieces);
    }
    if (!a || !a->base || !a->pieces) {
        ct_arena_free(a);
        return CT_ERR(&d->err, CT_ERR_NOMEM, "out of host memory for arena '%s'", nm);
    }
    a->bytes = bytes;
    a->dev = d;
    snprintf(a->name, sizeof a->name, "%s", nm);
    for (size_t i = 0; i < nparts;) {
        size_t j = piece_next(parts, nparts, bytes, lim, i);
        size_t end = j < nparts ? parts[j] : bytes;
        char pn[64];
        if (npieces > 1) snprintf(pn, sizeof pn, "%.40s %d/%d", nm, a->n + 1, (int)npieces);
        else snprintf(pn, sizeof pn, "%s", nm);
        a->base[a->n] = parts[i];
        ct_status st = ct_buffer_alloc(d, cat, pn, end - parts[i], &a->pieces[a->n]);
        if (st != CT_OK) {
            ct_arena_free(a);
            return st;
        }
        a->n++;
        i = j;
    }
    *out = a;
    return CT_OK;
}

size_t ct_arena_bytes(const ct_arena *a) { return a->bytes; }
int ct_arena_npieces(const ct_arena *a) { return a->n; }
size_t ct_arena_largest_piece(const ct_arena *a) {
    size_t m = 0;
    for (int i = 0; i < a->n; i++)
        if (a->pieces[i]->bytes > m) m = a->pieces[i]->bytes;
    return m;
}

ct_buffer *ct_arena_at(const ct_arena *a, size_t off, size_t *in_piece) {
    if (off > a->bytes) return NULL;
    int lo = 0, hi = a->n - 1; /* the last piece starting at or before off */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (a->base[mid] <= off) lo = mid;
        else hi = mid - 1;
    }
    if (in_piece) *in_piece = off - a->base[lo];
    return a->pieces[lo];
}

size_t ct_arena_span(const ct_arena *a, size_t off) {
    size_t in;
    ct_buffer *b = ct_arena_at(a, off, &in);
    return b ? b->bytes - in : 0;
}

typedef enum { AR_READ, AR_WRITE, AR_ZERO, AR_READ_ASYNC, AR_WRITE_ASYNC } arena_op;

/* One copy (or zeroing) of [off, off + bytes) of the arena, one command per piece it crosses;
 * the event, if asked, is the last command's. */
static ct_status arena_range(const ct_arena *a, arena_op op, size_t off, size_t bytes, void *host,
                             ct_event **ev) {
    static const char *what[] = {"read", "write", "zero", "read", "write"};
    if (ev) *ev = NULL;
    if (off > a->bytes || bytes > a->bytes - off)
        return CT_ERR(&a->dev->err, CT_ERR_ARG,
                      "%s of arena '%s': range [%zu, %zu) is outside its %zu bytes", what[op],
                      a->name, off, off + bytes, a->bytes);
    ct_status st = CT_OK;
    char *h = (char *)host;
    int queued = 0; /* async commands enqueued without an event */
    do {
        size_t in;
        ct_buffer *b = ct_arena_at(a, off, &in);
        size_t n = b->bytes - in < bytes ? b->bytes - in : bytes;
        ct_event **e = n == bytes ? ev : NULL; /* the last command */
        switch (op) {
        case AR_READ: st = ct_buffer_read(b, in, h, n); break;
        case AR_WRITE: st = ct_buffer_write(b, in, h, n); break;
        case AR_ZERO: st = ct_buffer_zero(b, in, n); break;
        case AR_READ_ASYNC: st = ct_buffer_read_async(b, in, n, h, e); break;
        case AR_WRITE_ASYNC: st = ct_buffer_write_async(b, in, n, h, e); break;
        }
        off += n, bytes -= n;
        if (h) h += n;
        queued += st == CT_OK && (op == AR_READ_ASYNC || op == AR_WRITE_ASYNC);
    } while (st == CT_OK && bytes);
    /* a failure after some pieces' copies were queued: the caller's host memory must not be
     * in use once it sees the failure, and it has no event to wait on */
    if (st != CT_OK && queued) ct_device_finish(a->dev);
    return st;
}

ct_status ct_arena_read(const ct_arena *a, size_t off, void *dst, size_t bytes) {
    return arena_range(a, AR_READ, off, bytes, dst, NULL);
}
ct_status ct_arena_write(ct_arena *a, size_t off, const void *src, size_t bytes) {
    return arena_range(a, AR_WRITE, off, bytes, (void *)src, NULL);
}
ct_status ct_arena_zero(ct_arena *a, size_t off, size_t bytes) {
    return arena_range(a, AR_ZERO, off, bytes, NULL, NULL);
}
ct_status ct_arena_read_async(const ct_arena *a, size_t off, size_t bytes, void *dst,
                              ct_event **ev) {
    return arena_range(a, AR_READ_ASYNC, off, bytes, dst, ev);
}
ct_status ct_arena_write_async(ct_arena *a, size_t off, size_t bytes, const void *src,
                               ct_event **ev) {
    return arena_range(a, AR_WRITE_ASYNC, off, bytes, (void *)src, ev);
}

ct_buffer *ct_arena_piece_of(const ct_arena *a, cl_mem mem) {
    for (int i = 0; mem && i < a->n; i++)
        if (a->pieces[i]->mem == mem) return a->pieces[i];
    return NULL;
}

cl_mem ct_buffer_mem(const ct_buffer *b) { return b->mem; }
size_t ct_buffer_bytes(const ct_buffer *b) { return b->bytes; }
const char *ct_buffer_name(const ct_buffer *b) { return b->name; }
ct_device *ct_buffer_device(const ct_buffer *b) { return b->dev; }

static ct_status range_check(const ct_buffer *b, size_t off, size_t bytes, const char *what) {
    if (off > b->bytes || bytes > b->bytes - off)
        return CT_ERR(&b->dev->err, CT_ERR_ARG,
                      "%s of buffer '%s': range [%zu, %zu) is outside its %zu bytes", what, b->name,
                      off, off + bytes, b->bytes);
    return CT_OK;
}

ct_status ct_buffer_write(ct_buffer *b, size_t off, const void *src, size_t bytes) {
    ct_status st = range_check(b, off, bytes, "write");
    if (st != CT_OK || bytes == 0) return st;
    cl_int rc = clEnqueueWriteBuffer(b->dev->queue, b->mem, CL_TRUE, off, bytes, src, 0, NULL, NULL);
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&b->dev->err, rc, "writing buffer '%s'", b->name);
    return CT_OK;
}

ct_status ct_buffer_read(const ct_buffer *b, size_t off, void *dst, size_t bytes) {
    ct_status st = range_check(b, off, bytes, "read");
    if (st != CT_OK || bytes == 0) return st;
    cl_int rc = clEnqueueReadBuffer(b->dev->queue, b->mem, CL_TRUE, off, bytes, dst, 0, NULL, NULL);
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&b->dev->err, rc, "reading buffer '%s'", b->name);
    return CT_OK;
}

ct_status ct_buffer_zero(ct_buffer *b, size_t off, size_t bytes) {
    ct_status st = range_check(b, off, bytes, "zero");
    if (st != CT_OK || bytes == 0) return st;
    /* the widest pattern the range allows (with a 1-byte pattern an H100 took 1.2 ms to zero
     * 500 MB of gradients, about a seventh of its memory bandwidth; a word-sized pattern lets a
     * driver write words) */
    static const unsigned char z[16] = {0};
    size_t pat = 16;
    while (pat > 1 && (off % pat || bytes % pat)) pat /= 2;
    cl_int rc = clEnqueueFillBuffer(b->dev->queue, b->mem, z, pat, off, bytes, 0, NULL, NULL);
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&b->dev->err, rc, "zeroing buffer '%s'", b->name);
    return CT_OK;
}

ct_status ct_buffer_map(ct_buffer *b, size_t off, size_t bytes, cl_map_flags flags, void **ptr) {
    *ptr = NULL;
    ct_status st = range_check(b, off, bytes, "map");
    if (st != CT_OK) return st;
    if (bytes == 0) return CT_OK; /* nothing to map; unmapping NULL is a no-op */
    cl_int rc = CL_SUCCESS;
    *ptr = clEnqueueMapBuffer(b->dev->queue, b->mem, CL_TRUE, flags, off, bytes, 0, NULL, NULL, &rc);
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&b->dev->err, rc, "mapping buffer '%s'", b->name);
    return CT_OK;
}

ct_status ct_buffer_unmap(ct_buffer *b, void *ptr) {
    if (!ptr) return CT_OK;
    cl_event ev = NULL;
    cl_int rc = clEnqueueUnmapMemObject(b->dev->queue, b->mem, ptr, 0, NULL, &ev);
    if (rc == CL_SUCCESS) {
        rc = clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
    }
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&b->dev->err, rc, "unmapping buffer '%s'", b->name);
    return CT_OK;
}

ct_status ct_buffer_map_async(ct_buffer *b, size_t off, size_t bytes, cl_map_flags flags,
                              void **ptr, ct_event **ev) {
    *ptr = NULL;
    if (ev) *ev = NULL;
    ct_status st = range_check(b, off, bytes, "map");
    if (st != CT_OK || bytes == 0) return st;
    ct_event *e = NULL;
    if ((st = ct__event_new(b->dev, ev, &e, "map of buffer '%s' [%zu, %zu)", b->name, off,
                            off + bytes)))
        return st;
    cl_int rc = CL_SUCCESS;
    *ptr = clEnqueueMapBuffer(b->dev->queue, b->mem, CL_FALSE, flags, off, bytes, 0, NULL,
                              e ? &e->ev : NULL, &rc);
    if (rc != CL_SUCCESS) {
        *ptr = NULL;
        ct_event_release(e);
        return CT_CL_FAIL(&b->dev->err, rc, "mapping buffer '%s'", b->name);
    }
    if (ev) *ev = e;
    /* Some drivers only start work on a flush; make sure the map is on its way. */
    clFlush(b->dev->queue);
    return CT_OK;
}

ct_status ct_buffer_unmap_async(ct_buffer *b, void *ptr, ct_event **ev) {
    if (ev) *ev = NULL;
    if (!ptr) return CT_OK;
    ct_event *e = NULL;
    ct_status st = ct__event_new(b->dev, ev, &e, "unmap of buffer '%s'", b->name);
    if (st != CT_OK) return st;
    cl_int rc = clEnqueueUnmapMemObject(b->dev->queue, b->mem, ptr, 0, NULL, e ? &e->ev : NULL);
    if (rc != CL_SUCCESS) {
        ct_event_release(e);
        return CT_CL_FAIL(&b->dev->err, rc, "unmapping buffer '%s'", b->name);
    }
    if (ev) *ev = e;
    clFlush(b->dev->queue);
    return CT_OK;
}

/* ---------------------------------------------------------------- non-blocking copies */

ct_status ct_buffer_read_async(const ct_buffer *b, size_t off, size_t bytes, void *dst,
                               ct_event **ev) {
    if (ev) *ev = NULL;
    ct_status st = range_check(b, off, bytes, "read");
    if (st != CT_OK) return st;
    if (bytes && !dst)
        return CT_ERR(&b->dev->err, CT_ERR_ARG, "read of buffer '%s': host pointer is NULL", b->name);
    ct_event *e = NULL;
    if ((st = ct__event_new(b->dev, ev, &e, "read of buffer '%s' [%zu, %zu)", b->name, off,
                            off + bytes)))
        return st;
    /* An empty range still gets an event (a marker), so callers need no special case. */
    cl_int rc = bytes ? clEnqueueReadBuffer(b->dev->queue, b->mem, CL_FALSE, off, bytes, dst, 0,
                                            NULL, e ? &e->ev : NULL)
                      : (e ? clEnqueueMarkerWithWaitList(b->dev->queue, 0, NULL, &e->ev) : CL_SUCCESS);
    if (rc != CL_SUCCESS) {
        ct_event_release(e);
        return CT_CL_FAIL(&b->dev->err, rc, "reading buffer '%s' [%zu, %zu) (non-blocking)", b->name,
                          off, off + bytes);
    }
    if (ev) *ev = e;
    return CT_OK;
}

ct_status ct_buffer_write_async(ct_buffer *b, size_t off, size_t bytes, const void *src,
                                ct_event **ev) {
    if (ev) *ev = NULL;
    ct_status st = range_check(b, off, bytes, "write");
    if (st != CT_OK) return st;
    if (bytes && !src)
        return CT_ERR(&b->dev->err, CT_ERR_ARG, "write of buffer '%s': host pointer is NULL", b->name);
    ct_event *e = NULL;
    if ((st = ct__event_new(b->dev, ev, &e, "write of buffer '%s' [%zu, %zu)", b->name, off,
                            off + bytes)))
        return st;
    cl_int rc = bytes ? clEnqueueWriteBuffer(b->dev->queue, b->mem, CL_FALSE, off, bytes, src, 0,
                                             NULL, e ? &e->ev : NULL)
                      : (e ? clEnqueueMarkerWithWaitList(b->dev->queue, 0, NULL, &e->ev) : CL_SUCCESS);
    if (rc != CL_SUCCESS) {
        ct_event_release(e);
        return CT_CL_FAIL(&b->dev->err, rc, "writing buffer '%s' [%zu, %zu) (non-blocking)", b->name,
                          off, off + bytes);
    }
    if (ev) *ev = e;
    return CT_OK;
}

/* Both ranges inside their objects, and apart when they share one. `sname`/`dname` name them. */
static ct_status copy_check(ct_device *d, const char *sname, size_t ssize, size_t soff,
                            const char *dname, size_t dsize, size_t doff, size_t bytes, int same) {
    if (soff > ssize || bytes > ssize - soff)
        return CT_ERR(&d->err, CT_ERR_ARG,
                      "copy from %s: range [%zu, %zu) is outside its %zu bytes", sname, soff,
                      soff + bytes, ssize);
    if (doff > dsize || bytes > dsize - doff)
        return CT_ERR(&d->err, CT_ERR_ARG, "copy to %s: range [%zu, %zu) is outside its %zu bytes",
                      dname, doff, doff + bytes, dsize);
    if (same && bytes && soff < doff + bytes && doff < soff + bytes)
        return CT_ERR(&d->err, CT_ERR_ARG,
                      "copy within %s: ranges [%zu, %zu) and [%zu, %zu) overlap", sname, soff,
                      soff + bytes, doff, doff + bytes);
    return CT_OK;
}

ct_status ct_buffer_copy(ct_buffer *src, size_t soff, ct_buffer *dst, size_t doff, size_t bytes) {
    ct_device *d = src->dev;
    char sn[80], dn[80];
    snprintf(sn, sizeof sn, "buffer '%s'", src->name);
    snprintf(dn, sizeof dn, "buffer '%s'", dst->name);
    if (dst->dev != d)
        return CT_ERR(&d->err, CT_ERR_ARG,
                      "copy from %s (device %d) to %s (device %d): buffers of two devices; copy "
                      "through the host",
                      sn, d->info.index, dn, dst->dev->info.index);
    ct_status st = copy_check(d, sn, src->bytes, soff, dn, dst->bytes, doff, bytes, src == dst);
    if (st != CT_OK || bytes == 0) return st;
    cl_int rc = clEnqueueCopyBuffer(d->queue, src->mem, dst->mem, soff, doff, bytes, 0, NULL, NULL);
    if (rc != CL_SUCCESS)
        return CT_CL_FAIL(&d->err, rc, "copying %zu bytes from %s at %zu to %s at %zu", bytes, sn,
                          soff, dn, doff);
    return CT_OK;
}

ct_status ct_mem_copy(ct_device *d, cl_mem src, size_t soff, cl_mem dst, size_t doff,
                      size_t bytes) {
    if (!src || !dst)
        return CT_ERR(&d->err, CT_ERR_ARG, "memory copy on device %d: %s memory object is NULL",
                      d->info.index, src ? "destination" : "source");
    size_t ssize = 0, dsize = 0;
    cl_int rc = clGetMemObjectInfo(src, CL_MEM_SIZE, sizeof ssize, &ssize, NULL);
    if (rc == CL_SUCCESS) rc = clGetMemObjectInfo(dst, CL_MEM_SIZE, sizeof dsize, &dsize, NULL);
    if (rc != CL_SUCCESS)
        return CT_CL_FAIL(&d->err, rc, "memory copy on device %d: not a memory object",
                          d->info.index);
    ct_status st = copy_check(d, "the source memory object", ssize, soff,
                              "the destination memory object", dsize, doff, bytes, src == dst);
    if (st != CT_OK || bytes == 0) return st;
    rc = clEnqueueCopyBuffer(d->queue, src, dst, soff, doff, bytes, 0, NULL, NULL);
    if (rc != CL_SUCCESS)
        return CT_CL_FAIL(&d->err, rc, "copying %zu bytes on device %d (source at %zu, destination "
                                       "at %zu)",
                          bytes, d->info.index, soff, doff);
    return CT_OK;
}
