/* gen_seeds.c - writes the fuzz targets' seed corpus (fuzz/corpus/<target>/) with the library's
 * own writers, so every seed is a valid file of its format. Run by hand when a format changes:
 *
 *     gen_seeds fuzz/corpus                                            (scripts/fuzz --seeds)
 *
 * The seeds are small on purpose (a fuzzer mutates them: 1 to 5 KiB each). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ct_engine_io.h"
#include "fuzz_hf.h"

static void die(const char *what, const ct_err *err) {
    fprintf(stderr, "gen_seeds: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static void put(const char *dir, const char *name, const void *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) die(path, NULL);
}

static unsigned char *slurp(const char *path, size_t *n) {
    unsigned char *b = NULL;
    ct_err err = {0};
    if (ct_file_read_all(path, &b, n, &err)) die(path, &err);
    return b;
}

static void sub(char *out, size_t len, const char *root, const char *name) {
    snprintf(out, len, "%s/%s", root, name);
    mkdir(out, 0755);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds CORPUS_DIR\n");
        return 2;
    }
    const char *root = argv[1];
    char dir[1024], tmp[1100];
    ct_err err = {0};
    mkdir(root, 0755);
    snprintf(tmp, sizeof tmp, "%s/.gen_seeds.tmp", root);
    /* a tiny model: L=1, C=4, NH=2, V=6, Vp=8, maxT=4 (300 parameters) */
    ct_gpt_config cfg = {4, 6, 8, 1, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t sizes[CT_GPT_NUM_TENSORS], np = ct_gpt_param_sizes(&cfg, sizes);
    float *p = malloc(np * 4), *m = malloc(np * 4), *v = malloc(np * 4);
    for (size_t i = 0; i < np; i++) p[i] = (float)i / 64 - 2, m[i] = 1e-3f * i, v[i] = 1e-6f * i;
    sub(dir, sizeof dir, root, "model_file");
    if (ct_model_file_write(tmp, &cfg, p, &err)) die("model", &err);
    size_t n;
    unsigned char *b = slurp(tmp, &n);
    put(dir, "tiny.bin", b, n);
    put(dir, "header_only.bin", b, 1024);
    free(b);
    /* the same model as safetensors, and a mixture of experts (E = 2, K = 1) */
    snprintf(tmp, sizeof tmp, "%s/.gen_seeds.tmp.safetensors", root);
    if (ct_model_file_write(tmp, &cfg, p, &err)) die("model", &err);
    b = slurp(tmp, &n);
    put(dir, "tiny.safetensors", b, n);
    free(b);
    ct_gpt_config moe = cfg;
    moe.experts = 2, moe.top_k = 1;
    size_t nm = ct_gpt_param_sizes(&moe, sizes);
    float *pm = malloc(nm * 4);
    for (size_t i = 0; i < nm; i++) pm[i] = (float)i / 128 - 1;
    if (ct_model_file_write(tmp, &moe, pm, &err)) die("model", &err);
    free(pm);
    b = slurp(tmp, &n);
    put(dir, "tiny_moe.safetensors", b, n);
    free(b);
    remove(tmp);
    snprintf(tmp, sizeof tmp, "%s/.gen_seeds.tmp", root);
    /* checkpoints of the same model */
    sub(dir, sizeof dir, root, "checkpoint");
    ct_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    ck.cfg = cfg;
    ck.step = 7;
    ck.rng[0] = 1, ck.rng[1] = 2, ck.rng[2] = 3, ck.rng[3] = 4;
    ck.loader_B = 2, ck.loader_T = 4, ck.loader_accum = 1, ck.loader_seed = 1337;
    ck.data_tokens = 1000;
    ck.nparams = np;
    ck.params = p, ck.m = m, ck.v = v;
    ck.meta = "lr=0.003\nsteps=10\n";
    if (ct_checkpoint_write(tmp, &ck, &err)) die("checkpoint", &err);
    b = slurp(tmp, &n);
    put(dir, "tiny.ckpt", b, n);
    free(b);
    put(dir, "latest_line", "ckpt_00000007.bin\n", 18);
    /* the same state sharded over two workers: input = [u16 manifest bytes][manifest][u16 shard
     * 0 bytes][shard 0][shard 1] (fuzz_manifest.c); worker 0 owns the first half of every array */
    sub(dir, sizeof dir, root, "manifest");
    {
        char mp[600], spath[700];
        snprintf(mp, sizeof mp, "%s/.gen_seeds.tmp.bin", root);
        const float *arr[3] = {p, m, v};
        ct_shard_desc d[2];
        ct_shard_range r[6];
        size_t nr = 0, half = np / 2;
        float *pay = malloc(np * 3 * sizeof(float));
        unsigned char *sh[2];
        size_t shn[2];
        for (int w = 0; w < 2; w++) {
            size_t lo = w ? half : 0, hi = w ? np : half, k = 0;
            for (uint32_t a = 0; a < 3; a++) {
                r[nr++] = (ct_shard_range){(uint32_t)w, a, lo, hi - lo, k};
                memcpy(pay + k, arr[a] + lo, (hi - lo) * sizeof(float));
                k += hi - lo;
            }
            ct_shard_path(spath, sizeof spath, mp, w);
            if (ct_shard_write(spath, w, ck.step, pay, k, &d[w], &err)) die("shard", &err);
            sh[w] = slurp(spath, &shn[w]);
            remove(spath);
        }
        int32_t lay[5] = {2, 1, 1, 1, 1};
        if (ct_shards_manifest_write(mp, &ck, lay, 2, d, r, nr, &err)) die("manifest", &err);
        ct_shard_desc_release(&d[0]);
        ct_shard_desc_release(&d[1]);
        b = slurp(mp, &n);
        remove(mp);
        unsigned char *in = malloc(4 + n + shn[0] + shn[1]);
        in[0] = (unsigned char)(n & 255), in[1] = (unsigned char)(n >> 8);
        memcpy(in + 2, b, n);
        in[2 + n] = (unsigned char)(shn[0] & 255), in[3 + n] = (unsigned char)(shn[0] >> 8);
        memcpy(in + 4 + n, sh[0], shn[0]);
        memcpy(in + 4 + n + shn[0], sh[1], shn[1]);
        put(dir, "two_shards", in, 4 + n + shn[0] + shn[1]);
        put(dir, "shard_1_missing", in, 4 + n + shn[0]); /* shard 1 empty: refused */
        free(in);
        free(b);
        free(sh[0]);
        free(sh[1]);
        free(pay);
    }
    /* token shards: input = [u16 length of a][shard a][shard b], both magics */
    sub(dir, sizeof dir, root, "shards");
    uint32_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = (uint32_t)(i * 7 % 23);
    unsigned char *sa, *sb;
    size_t na, nb;
    if (ct_data_write_shard(tmp, tok, 24, 0, &err)) die("shard u16", &err);
    sa = slurp(tmp, &na);
    tok[3] = 70000; /* forces the uint32 magic */
    if (ct_data_write_shard(tmp, tok + 3, 16, 1, &err)) die("shard u32", &err);
    sb = slurp(tmp, &nb);
    unsigned char *in = malloc(2 + na + nb); /* [u16 bytes of a][a][b] */
    in[0] = (unsigned char)(na & 255), in[1] = (unsigned char)(na >> 8);
    memcpy(in + 2, sa, na);
    memcpy(in + 2 + na, sb, nb);
    put(dir, "u16_then_u32", in, 2 + na + nb);
    memcpy(in + 2 + na, sa, na);
    put(dir, "u16_twice", in, 2 + 2 * na);
    in[0] = in[1] = 0; /* an empty first file: refused */
    memcpy(in + 2, sa, na);
    put(dir, "empty_then_u16", in, 2 + na);
    free(in);
    free(sa);
    free(sb);
    /* tokenizer, versions 2 (with end-of-text) and 1 */
    sub(dir, sizeof dir, root, "tokenizer");
    const char *pieces[5] = {"a", "bc", " the", "<|endoftext|>", "\xe2\x82\xac"};
    size_t lens[5] = {1, 2, 4, 13, 3};
    if (ct_tokenizer_write(tmp, pieces, lens, 5, 3, &err)) die("tokenizer", &err);
    b = slurp(tmp, &n);
    put(dir, "v2.bin", b, n);
    free(b);
    if (ct_tokenizer_write(tmp, pieces, lens, 3, -1, &err)) die("tokenizer", &err);
    b = slurp(tmp, &n);
    put(dir, "v1.bin", b, n);
    free(b);
    /* Hugging Face: config.json as the engine writes it and as transformers writes GPT-2's
     * (fields the reader ignores included); the tiny model's model.safetensors (F32, BF16); an
     * index over the two shards fuzz_hf_index.c provides */
    sub(dir, sizeof dir, root, "hf_config");
    ct_gpt_config hc = ct_fuzz_hf_config();
    char *text = ct_hf_config_format(&hc, CT_FILE_F32);
    put(dir, "tiny.json", text, strlen(text));
    free(text);
    static const char gpt2[] =
        "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n"
        "  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n  \"embd_pdrop\": 0.1,\n"
        "  \"eos_token_id\": 50256,\n  \"initializer_range\": 0.02,\n"
        "  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n  \"n_ctx\": 1024,\n"
        "  \"n_embd\": 768,\n  \"n_head\": 12,\n  \"n_layer\": 12,\n  \"n_positions\": 1024,\n"
        "  \"resid_pdrop\": 0.1,\n  \"summary_activation\": null,\n"
        "  \"summary_first_dropout\": 0.1,\n  \"summary_proj_to_labels\": true,\n"
        "  \"summary_type\": \"cls_index\",\n  \"summary_use_proj\": true,\n"
        "  \"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}},\n"
        "  \"vocab_size\": 50257\n}\n";
    put(dir, "gpt2.json", gpt2, strlen(gpt2));
    ct_gpt_config lc = ct_fuzz_hf_llama_config();
    text = ct_hf_config_format(&lc, CT_FILE_F32);
    put(dir, "llama.json", text, strlen(text));
    free(text);
    static const char llama[] = /* as transformers writes a Llama's (ignored fields included) */
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"attention_bias\": false,\n"
        "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
        "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n"
        "  \"intermediate_size\": 5632,\n  \"max_position_embeddings\": 2048,\n"
        "  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n"
        "  \"num_hidden_layers\": 22,\n  \"num_key_value_heads\": 4,\n  \"pretraining_tp\": 1,\n"
        "  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": null,\n  \"rope_theta\": 10000.0,\n"
        "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\",\n"
        "  \"transformers_version\": \"4.35.0\",\n  \"use_cache\": true,\n"
        "  \"vocab_size\": 32000\n}\n";
    put(dir, "llama_1b.json", llama, strlen(llama));
    sub(dir, sizeof dir, root, "hf_model");
    size_t nh = 0;
    float *ph = ct_fuzz_hf_params(&nh);
    char hfdir[1100], hfile[1200];
    snprintf(hfdir, sizeof hfdir, "%s/.gen_seeds.hf/", root);
    snprintf(hfile, sizeof hfile, "%smodel.safetensors", hfdir);
    if (ct_model_file_write_as(hfdir, &hc, ph, CT_FILE_F32, &err)) die("hf", &err);
    b = slurp(hfile, &n);
    put(dir, "tiny_f32.safetensors", b, n);
    free(b);
    if (ct_model_file_write_as(hfdir, &hc, ph, CT_FILE_BF16, &err)) die("hf", &err);
    b = slurp(hfile, &n);
    put(dir, "tiny_bf16.safetensors", b, n);
    free(b);
    free(ph);
    sub(dir, sizeof dir, root, "hf_llama_model");
    ph = ct_fuzz_hf_params_of(&lc, &nh);
    if (ct_model_file_write_as(hfdir, &lc, ph, CT_FILE_F32, &err)) die("hf llama", &err);
    b = slurp(hfile, &n);
    put(dir, "tiny_f32.safetensors", b, n);
    free(b);
    if (ct_model_file_write_as(hfdir, &lc, ph, CT_FILE_BF16, &err)) die("hf llama", &err);
    b = slurp(hfile, &n);
    put(dir, "tiny_bf16.safetensors", b, n);
    free(b);
    free(ph);
    sub(dir, sizeof dir, root, "hf_index");
    {
        char idx[4096];
        size_t at = (size_t)snprintf(idx, sizeof idx, "{\"metadata\": {\"total_size\": 1}, "
                                                      "\"weight_map\": {");
        const char *names[] = {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
                               "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias",
                               "h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias", "h.0.ln_2.weight",
                               "h.0.ln_2.bias", "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias",
                               "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias", "ln_f.weight",
                               "ln_f.bias"};
        for (int k = 0; k < 16; k++)
            at += (size_t)snprintf(idx + at, sizeof idx - at, "%s\"transformer.%s\": \"%s\"",
                                   k ? ", " : "", names[k],
                                   k < 8 ? "model.safetensors" : "other.safetensors");
        at += (size_t)snprintf(idx + at, sizeof idx - at, "}}\n");
        put(dir, "two_shards.json", idx, at);
        /* the same with every tensor in model.safetensors */
        for (char *q = strstr(idx, "other"); q; q = strstr(q, "other")) memcpy(q, "model", 5);
        put(dir, "one_shard.json", idx, at);
    }
    snprintf(hfile, sizeof hfile, "%s/.gen_seeds.hf/model.safetensors", root);
    remove(hfile);
    snprintf(hfile, sizeof hfile, "%s/.gen_seeds.hf/config.json", root);
    remove(hfile);
    snprintf(hfile, sizeof hfile, "%s/.gen_seeds.hf", root);
    rmdir(hfile);
    remove(tmp);
    free(p);
    free(m);
    free(v);
    printf("gen_seeds: wrote model_file, checkpoint, manifest, shards, tokenizer, hf_config, "
           "hf_model, hf_llama_model, hf_index seeds under %s\n", root);
    return 0;
}
