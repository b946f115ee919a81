/* print.c - a ranked result as a program shows it, on the FILE* it hands over: the table and
 * the choice (text), the sentence of why no layout fits, the whole result as one JSON object. */
#include <string.h>

#include "plan_impl.h"

static double mib(double b) { return b / 1048576.0; }

void ct_plan_print(FILE *f, const ct_plan_problem *pb, const ct_plan_costs *c, const ct_plan_result *r,
                   int top) {
    const ct_gpt_config *cfg = &pb->cfg;
    fprintf(f,
            "ct_plan: L=%d NH=%d C=%d V=%d T=%d, batch %d rows x %d micro-batches, %d workers (%d "
            "per rank), memory cap ",
            cfg->layers, cfg->heads, cfg->channels, cfg->vocab, pb->T, pb->B, pb->micro, pb->W,
            pb->D);
    if (pb->mem_cap > 0) fprintf(f, "%.1f MiB per worker", mib(pb->mem_cap));
    else fprintf(f, "none");
    if (pb->max_alloc > 0)
        fprintf(f, mib(pb->max_alloc) < 10 ? ", single buffers up to %.2f MiB"
                                            : ", single buffers up to %.1f MiB",
                mib(pb->max_alloc));
    fputc('\n', f);
    if (c)
        fprintf(f, "costs: compute timed on %d worker%s at once (%s attention), %s; overlap %.2f\n",
                c->workers_timed, c->workers_timed > 1 ? "s" : "", ct_attn_path_name(c->attn),
                c->source, c->overlap);
    else
        fprintf(f, "costs: not measured (memory only)\n");
    if (r->mem_note[0]) fprintf(f, "memory: %s\n", r->mem_note);
    fprintf(f, "%d layouts, %d fit%s\n", r->n, r->nfit,
            r->nfit == r->n ? "" : " (the others are listed after them)");
    fprintf(f, "%4s  %-26s %11s %10s %10s %7s %6s %8s %9s %9s %9s%s\n", "rank", "layout",
            "mem/worker", "step ms", "tokens/s", "bubble", "comm", "comp ms", "TP MB", "DP MB",
            "PP MB", pb->cfg.experts > 0 ? "     EP MB" : "");
    int shown = 0;
    for (int i = 0; i < r->n && shown < top; i++, shown++) {
        const ct_plan_entry *e = &r->e[i];
        char name[96], mem[32];
        ct_plan_layout_name(&e->lay, name, sizeof name);
        if (e->mem_known) snprintf(mem, sizeof mem, "%.1f MiB", mib(e->mem.total));
        else snprintf(mem, sizeof mem, "?");
        if (c && !e->timed) {
            fprintf(f, "%4d%s %-26s %11s   not timed: %s\n", i + 1, e->fits ? " " : "!", name, mem,
                    e->why_untimed);
            continue;
        }
        fprintf(f, "%4d%s %-26s %11s %10.2f %10.0f %7.3f %5.0f%% %8.2f %9.3f %9.3f %9.3f", i + 1,
                e->fits ? " " : "!", name, mem, e->est.step_ms, e->est.tokens_per_s, e->est.bubble,
                100 * e->est.comm_share, e->est.compute_ms, e->est.tp_bytes / 1e6,
                e->est.dp_bytes / 1e6, e->est.pp_bytes / 1e6);
        if (pb->cfg.experts > 0) fprintf(f, " %9.3f", e->est.ep_bytes / 1e6);
        fputc('\n', f);
    }
    if (r->nfit > 0 && c && !r->e[0].timed) {
        char name[96];
        ct_plan_layout_name(&r->e[0].lay, name, sizeof name);
        fprintf(f, "chosen: none timed: %d layouts fit, none could be timed here (%s fits with the "
                   "least memory)\n", r->nfit, name);
    } else if (r->nfit > 0) {
        char name[96], flags[256];
        ct_plan_layout_name(&r->e[0].lay, name, sizeof name);
        ct__plan_layout_flags(&r->e[0].lay, flags, sizeof flags);
        fprintf(f, "chosen: %s (%.2f ms per step predicted): train_gpt %s\n", name,
                r->e[0].est.step_ms, flags);
    } else if (r->n > 0) {
        char why[512];
        ct_plan_why_none(pb, r, why, sizeof why);
        fprintf(f, "chosen: none fits: %s\n", why);
    }
}

void ct_plan_why_none(const ct_plan_problem *pb, const ct_plan_result *r, char *buf, size_t len) {
    /* the layout that fits the memory with the smallest largest buffer, if any does */
    const ct_plan_entry *best = NULL;
    for (int i = 0; i < r->n; i++) {
        const ct_plan_entry *e = &r->e[i];
        if (e->mem_known && (pb->mem_cap <= 0 || e->mem.total <= pb->mem_cap) &&
            (!best || e->largest < best->largest))
            best = e;
    }
    char name[96];
    if (best) {
        ct_plan_layout_name(&best->lay, name, sizeof name);
        snprintf(buf, len,
                 "every layout of %d workers that fits the memory needs a single buffer above the "
                 "device's largest allocation (%.1f MiB): the smallest is %.1f MiB (%s of %s)",
                 pb->W, mib(pb->max_alloc), mib(best->largest), best->largest_name, name);
    } else if (r->n > 0) {
        ct_plan_layout_name(&r->e[0].lay, name, sizeof name);
        snprintf(buf, len,
                 "no layout of %d workers fits %.1f MiB per worker: the smallest shortfall is "
                 "%.1f MiB (%s needs %.1f MiB on its fullest worker)",
                 pb->W, mib(pb->mem_cap), mib(r->e[0].mem.total - pb->mem_cap), name,
                 mib(r->e[0].mem.total));
    } else {
        snprintf(buf, len, "no layout of %d workers", pb->W);
    }
}

static void json_mem(FILE *f, const ct_plan_mem *m) {
    fprintf(f, "\"params\":%.0f,\"grads\":%.0f,\"optimizer\":%.0f,\"activations\":%.0f,"
               "\"workspace\":%.0f,\"total\":%.0f,\"host\":%.0f",
            m->params, m->grads, m->optimizer, m->activations, m->workspace, m->total, m->host);
}

void ct_plan_print_json(FILE *f, const ct_plan_problem *pb, const ct_plan_costs *c,
                        const ct_plan_result *r) {
    const ct_gpt_config *cfg = &pb->cfg;
    char src[600];
    ct_json_escape(src, sizeof src, c ? c->source : "not measured");
    fprintf(f, "{\"model\":{\"layers\":%d,\"heads\":%d,\"dim\":%d,\"vocab\":%d,\"seq\":%d},"
               "\"batch\":%d,\"micro_batches\":%d,\"workers\":%d,\"devices_per_rank\":%d,"
               "\"mem_cap\":%.0f,\"max_alloc\":%.0f,\"costs\":{\"source\":%s,\"workers_timed\":%d,\"overlap\":%.4f,"
               "\"attention\":\"%s\"},\"fit\":%d,\"layouts\":[",
            cfg->layers, cfg->heads, cfg->channels, cfg->vocab, pb->T, pb->B, pb->micro, pb->W,
            pb->D, pb->mem_cap, pb->max_alloc, src, c ? c->workers_timed : 0, c ? c->overlap : 0.0,
            ct_attn_path_name(c ? c->attn : pb->attn), r->nfit);
    for (int i = 0; i < r->n; i++) {
        const ct_plan_entry *e = &r->e[i];
        char name[96], flags[256];
        ct_plan_layout_name(&e->lay, name, sizeof name);
        ct__plan_layout_flags(&e->lay, flags, sizeof flags);
        fprintf(f,
                "%s{\"rank\":%d,\"name\":\"%s\",\"flags\":\"%s\",\"dp\":%d,\"tp\":%d,\"pp\":%d,"
                "\"ep\":%d,\"zero\":%d,\"schedule\":\"%s\",\"virtual_stages\":%d,"
                "\"sequence_parallel\":%d,\"fits\":%s,\"mem_known\":%s,\"largest_buffer\":%.0f,"
                "\"largest_name\":\"%s\",\"mem\":{",
                i ? "," : "", i + 1, name, flags, e->lay.dp, e->lay.tp, e->lay.pp, e->lay.ep,
                e->lay.zero, e->lay.pp > 1 ? ct_sched_name(e->lay.sched) : "none", e->lay.virt,
                e->lay.sp, e->fits ? "true" : "false", e->mem_known ? "true" : "false",
                e->largest, e->largest_name);
        json_mem(f, &e->mem);
        fprintf(f, "},\"workers\":[");
        for (int w = 0; e->mem_known && w < pb->W; w++) {
            fprintf(f, "%s{\"worker\":%d,", w ? "," : "", w);
            json_mem(f, &e->worker[w]);
            fprintf(f, "}");
        }
        char why[400];
        ct_json_escape(why, sizeof why, e->why_untimed);
        fprintf(f,
                "],\"timed\":%s,\"why_untimed\":%s,\"step_ms\":%.4f,\"tokens_per_s\":%.2f,"
                "\"compute_ms\":%.4f,\"bubble\":%.5f,\"comm_ms\":%.4f,\"comm_share\":%.5f,"
                "\"opt_ms\":%.4f,\"tp_bytes\":%.0f,\"dp_bytes\":%.0f,\"pp_bytes\":%.0f,"
                "\"ep_bytes\":%.0f}",
                e->timed ? "true" : "false", why, e->est.step_ms, e->est.tokens_per_s,
                e->est.compute_ms, e->est.bubble, e->est.comm_ms, e->est.comm_share, e->est.opt_ms,
                e->est.tp_bytes, e->est.dp_bytes, e->est.pp_bytes, e->est.ep_bytes);
    }
    fprintf(f, "],\"chosen\":");
    if (r->nfit > 0 && (!c || r->e[0].timed)) {
        char name[96];
        ct_plan_layout_name(&r->e[0].lay, name, sizeof name);
        fprintf(f, "\"%s\"", name);
    } else {
        fprintf(f, "null");
    }
    if (r->nfit == 0 && r->n > 0 && pb->mem_cap > 0 && r->e[0].mem.total > pb->mem_cap)
        fprintf(f, ",\"shortfall\":%.0f", r->e[0].mem.total - pb->mem_cap);
    fprintf(f, "}\n");
}
