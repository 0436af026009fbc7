// Routing profiles (see profile.h).
#include "place/profile.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "place/pack.h"
#include "util/err.h"

#define PROFILE_FORMAT "strata-profile"
#define PROFILE_VERSION 1

int st_profile_init(st_profile *p, const st_model *m) {
    memset(p, 0, sizeof *p);
    if (m->hp.n_expert == 0) return st_err("%s: a dense model has no experts to profile", m->path);
    p->n_layer = m->hp.n_layer;
    p->n_expert = m->hp.n_expert;
    p->fingerprint = st_model_fingerprint(m);
    p->counts = calloc((uint64_t)p->n_layer * p->n_expert, sizeof *p->counts);
    if (!p->counts) return st_err("out of memory");
    return 0;
}

void st_profile_free(st_profile *p) {
    if (!p) return;
    free(p->counts);
    p->counts = NULL;
}

void st_profile_add(st_profile *p, const uint32_t *counts, uint64_t n_tokens) {
    for (uint64_t i = 0; i < (uint64_t)p->n_layer * p->n_expert; i++) p->counts[i] += counts[i];
    p->n_tokens += n_tokens;
}

int st_profile_write(const st_profile *p, const char *path, const char *model_path, uint32_t n_expert_used) {
    char fp[32];
    snprintf(fp, sizeof fp, "0x%016" PRIx64, p->fingerprint);
    json_t *root = json_object(), *rows = json_array();
    json_object_set_new(root, "format", json_string(PROFILE_FORMAT));
    json_object_set_new(root, "version", json_integer(PROFILE_VERSION));
    json_object_set_new(root, "model", json_string(model_path ? model_path : ""));
    json_object_set_new(root, "fingerprint", json_string(fp));
    json_object_set_new(root, "n_layer", json_integer(p->n_layer));
    json_object_set_new(root, "n_expert", json_integer(p->n_expert));
    json_object_set_new(root, "n_expert_used", json_integer(n_expert_used));
    json_object_set_new(root, "n_tokens", json_integer((json_int_t)p->n_tokens));
    for (uint32_t l = 0; l < p->n_layer; l++) {
        json_t *row = json_array();
        for (uint32_t e = 0; e < p->n_expert; e++)
            json_array_append_new(row, json_integer((json_int_t)p->counts[(uint64_t)l * p->n_expert + e]));
        json_array_append_new(rows, row);
    }
    json_object_set_new(root, "counts", rows);
    // Compact rows (one line per layer would need custom printing; JSON_COMPACT keeps files small).
    int rc = json_dump_file(root, path, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(root);
    if (rc) return st_err("%s: cannot write the profile", path);
    return 0;
}

static int get_uint(json_t *root, const char *key, const char *path, uint64_t max, uint64_t *out) {
    json_t *v = json_object_get(root, key);
    if (!json_is_integer(v)) return st_err("%s: field '%s' is missing or not an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max)
        return st_err("%s: field '%s' = %lld is out of range [0, %" PRIu64 "]", path, key, (long long)x, max);
    *out = (uint64_t)x;
    return 0;
}

int st_profile_read(st_profile *p, const char *path, const st_model *m) {
    memset(p, 0, sizeof *p);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) return st_err("%s: line %d column %d: not a valid JSON profile: %s", path, je.line, je.column, je.text);
    int rc = -1;
    uint64_t nl = 0, ne = 0, nt = 0, ver = 0;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!json_is_object(root) || !fmt || strcmp(fmt, PROFILE_FORMAT)) {
        st_err("%s: field 'format' is not \"%s\" (not a strata profile)", path, PROFILE_FORMAT);
        goto done;
    }
    if (get_uint(root, "version", path, 1000, &ver)) goto done;
    if (ver != PROFILE_VERSION) {
        st_err("%s: field 'version' is %" PRIu64 ", this strata reads %d", path, ver, PROFILE_VERSION);
        goto done;
    }
    if (get_uint(root, "n_layer", path, 65536, &nl) || get_uint(root, "n_expert", path, 65536, &ne) ||
        get_uint(root, "n_tokens", path, UINT64_MAX >> 1, &nt))
        goto done;
    if (nl == 0 || ne == 0) {
        st_err("%s: n_layer %" PRIu64 " / n_expert %" PRIu64 ": both must be positive", path, nl, ne);
        goto done;
    }
    const char *fp = json_string_value(json_object_get(root, "fingerprint"));
    char *end = NULL;
    if (!fp || strncmp(fp, "0x", 2) || (p->fingerprint = strtoull(fp + 2, &end, 16), *end != '\0') || end == fp + 2) {
        st_err("%s: field 'fingerprint' is missing or not a \"0x...\" hex string", path);
        goto done;
    }
    json_t *rows = json_object_get(root, "counts");
    if (!json_is_array(rows) || json_array_size(rows) != nl) {
        st_err("%s: field 'counts' must be an array of n_layer = %" PRIu64 " rows", path, nl);
        goto done;
    }
    p->n_layer = (uint32_t)nl;
    p->n_expert = (uint32_t)ne;
    p->n_tokens = nt;
    p->counts = calloc(nl * ne, sizeof *p->counts);
    if (!p->counts) {
        st_err("out of memory");
        goto done;
    }
    for (uint64_t l = 0; l < nl; l++) {
        json_t *row = json_array_get(rows, l);
        if (!json_is_array(row) || json_array_size(row) != ne) {
            st_err("%s: counts[%" PRIu64 "] must be an array of n_expert = %" PRIu64 " integers", path, l, ne);
            goto done;
        }
        for (uint64_t e = 0; e < ne; e++) {
            json_t *v = json_array_get(row, e);
            if (!json_is_integer(v) || json_integer_value(v) < 0) {
                st_err("%s: counts[%" PRIu64 "][%" PRIu64 "] is not a non-negative integer", path, l, e);
                goto done;
            }
            p->counts[l * ne + e] = (uint64_t)json_integer_value(v);
        }
    }
    if (m) {
        if (m->hp.n_layer != p->n_layer || m->hp.n_expert != p->n_expert) {
            st_err("%s: the profile has %u layers x %u experts, the model %s has %u x %u", path, p->n_layer,
                   p->n_expert, m->path, m->hp.n_layer, m->hp.n_expert);
            goto done;
        }
        uint64_t mf = st_model_fingerprint(m);
        if (mf != p->fingerprint) {
            st_err("%s: field 'fingerprint' 0x%016" PRIx64 ": the profile was recorded on a different model than %s "
                   "(0x%016" PRIx64 "); record it again with strata profile",
                   path, p->fingerprint, m->path, mf);
            goto done;
        }
    }
    rc = 0;
done:
    json_decref(root);
    if (rc) st_profile_free(p);
    return rc;
}
