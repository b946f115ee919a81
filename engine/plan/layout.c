/* layout.c - a layout as train_gpt spells it: its short name for tables, the flags that run it,
 * and the train_gpt parameters those flags set (ct_plan_apply, ct__plan_params: the one place a
 * layout and a problem become parameters, for the checks, the memory model and the programs
 * that run the choice). */
#include <string.h>

#include "plan_impl.h"

char *ct_plan_layout_name(const ct_plan_layout *l, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "dp%d tp%d pp%d", l->dp, l->tp, l->pp);
    if (l->ep > 1 && o < len) o += (size_t)snprintf(buf + o, len - o, " ep%d", l->ep);
    if (l->pp > 1 && o < len) {
        if (l->sched == CT_SCHED_INTERLEAVED)
            o += (size_t)snprintf(buf + o, len - o, " int%d", l->virt);
        else
            o += (size_t)snprintf(buf + o, len - o, " %s", ct_sched_name(l->sched));
    }
    if (l->zero > 0 && o < len) o += (size_t)snprintf(buf + o, len - o, " z%d", l->zero);
    if (l->sp && o < len) snprintf(buf + o, len - o, " sp");
    return buf;
}

char *ct__plan_layout_flags(const ct_plan_layout *l, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "--dp %d --tp %d --pp %d", l->dp, l->tp, l->pp);
    if (l->ep > 1 && o < len) o += (size_t)snprintf(buf + o, len - o, " --ep %d", l->ep);
    if (l->pp > 1 && o < len)
        o += (size_t)snprintf(buf + o, len - o, " --schedule %s", ct_sched_name(l->sched));
    if (l->virt > 1 && o < len)
        o += (size_t)snprintf(buf + o, len - o, " --virtual-stages %d", l->virt);
    if (l->zero > 0 && o < len) o += (size_t)snprintf(buf + o, len - o, " --zero %d", l->zero);
    if (l->sp && o < len) snprintf(buf + o, len - o, " --sequence-parallel 1");
    return buf;
}

void ct_plan_apply(const ct_plan_layout *l, ct_train_params *p) {
    p->dp = l->dp, p->tp = l->tp, p->pp = l->pp, p->zero = l->zero, p->ep = l->ep > 1 ? l->ep : 1;
    p->schedule = l->pp > 1 ? ct_sched_name(l->sched) : "1f1b";
    p->virtual_stages = l->sched == CT_SCHED_INTERLEAVED ? l->virt : 1;
    p->sequence_parallel = l->sp;
}

void ct__plan_params(const ct_plan_problem *pb, const ct_plan_layout *l,
                     const ct_train_params *from, ct_train_params *q) {
    *q = *from;
    q->seq = pb->T;
    q->batch = pb->B;
    q->total_batch = pb->micro > 1 ? pb->micro * pb->B * pb->T : 0;
    q->bucket_mb = pb->bucket_mb > 0 ? pb->bucket_mb : q->bucket_mb;
    ct_plan_apply(l, q);
}
