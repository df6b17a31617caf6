/* jobs/import_options.c: the options a user sets on an import, one table
 * (contract in jobs/import.h: import_option_set, import_schema).
 */
#include "jobs/import.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/num.h"         /* num_parse_i64 */
#include "engine/dataset.h"   /* ds_encoding_name */
#include "engine/image.h"     /* img_resize_name */
#include "jobs/import_internal.h"   /* IMPORT_MAX_TARGET, COUNT_OF */

/* ---- the options a user sets ------------------------------------------------------ */

typedef enum option_kind { OPT_INT, OPT_CHANNELS, OPT_CHOICE, OPT_SEED } option_kind;

static const char *resize_name(int v) { return img_resize_name((img_resize)v); }

#define SEED_MAX 9007199254740991ull          /* 2^53 - 1: exact in a JSON number */

static const struct import_option {
    const char *name;
    option_kind kind;
    int lo, hi;              /* OPT_INT */
    const char *(*choice)(int);   /* OPT_CHOICE: value's name, NULL past the last (values count from 0) */
    int def;
    bool from_images;        /* no default: chosen from the images when left out (0) */
    size_t off;
    const char *doc;
} import_options[] = {
    { "val_percent", OPT_INT, 0, 100, NULL, IMPORT_VAL_PERCENT_DEFAULT, false, offsetof(import_opts, val_percent),
      "share of each class held out for validation (when the source has no val/ split)" },
    { "test_percent", OPT_INT, 0, 100, NULL, 0, false, offsetof(import_opts, test_percent),
      "share of each class held out for test (when the source has no test/ split)" },
    { "width", OPT_INT, 1, IMPORT_MAX_TARGET, NULL, 0, true, offsetof(import_opts, width),
      "with height; default: the most common size among the images" },
    { "height", OPT_INT, 1, IMPORT_MAX_TARGET, NULL, 0, true, offsetof(import_opts, height),
      "with width; default: the most common size among the images" },
    { "channels", OPT_CHANNELS, 1, 3, NULL, 0, true, offsetof(import_opts, channels),
      "1 (grey) or 3 (colour); default: 1 if every image is grey, else 3" },
    { "resize", OPT_CHOICE, 0, 0, resize_name, IMG_SQUASH, false, offsetof(import_opts, resize),
      "how an image of another aspect ratio reaches the size: squash (stretch), crop (cut the centre), "
      "fill (fit inside, noise around), half_crop (half of each)" },
    { "encoding", OPT_CHOICE, 0, 0, ds_encoding_name, DS_ENC_RAW, false, offsetof(import_opts, encoding),
      "how images are stored: raw pixels (fastest to load), or png / jpeg (compressed, decoded by the "
      "loader: a fraction of the disk for large photos)" },
    { "seed", OPT_SEED, 0, 0, NULL, 1, false, offsetof(import_opts, seed),
      "seed of the split into train, val and test" },
};
_Static_assert(COUNT_OF(import_options) == IMPORT_OPTION_COUNT, "IMPORT_OPTION_COUNT is the table's size");

const char *import_option_name(int i) {
    return i >= 0 && i < IMPORT_OPTION_COUNT ? import_options[i].name : NULL;
}

static const struct import_option *option_find(const char *name) {
    for (size_t i = 0; i < COUNT_OF(import_options); i++)
        if (!strcmp(import_options[i].name, name)) return &import_options[i];
    return NULL;
}

/* Whether v is one of an integer option's values. */
static bool option_allows(const struct import_option *opt, long long v) {
    switch (opt->kind) {
    case OPT_INT: return v >= opt->lo && v <= opt->hi;
    case OPT_CHANNELS: return v == 1 || v == 3;
    case OPT_SEED: return v >= 0 && (unsigned long long)v <= SEED_MAX;
    case OPT_CHOICE: break;
    }
    return false;
}

/* A 400 invalid_field saying what opt takes; text is the value given. */
static int option_refused(const struct import_option *opt, const char *text, api_error *e) {
    char what[160];
    size_t o = 0;
    switch (opt->kind) {
    case OPT_INT: snprintf(what, sizeof what, "an integer %d..%d", opt->lo, opt->hi); break;
    case OPT_CHANNELS: snprintf(what, sizeof what, "1 or 3"); break;
    case OPT_SEED: snprintf(what, sizeof what, "an integer 0..%llu", SEED_MAX); break;
    case OPT_CHOICE:
        for (int i = 0; opt->choice(i) && o < sizeof what; i++)
            o += (size_t)snprintf(what + o, sizeof what - o, "%s\"%s\"", i == 0 ? "one of " : ", ", opt->choice(i));
        break;
    }
    return api_fail(e, 400, "invalid_field", "field \"%s\" must be %s, not \"%.32s\"", opt->name, what,
                    text ? text : "");
}

static void option_store(import_opts *o, const struct import_option *opt, long long v) {
    if (opt->kind == OPT_SEED) *(unsigned long long *)(void *)((char *)o + opt->off) = (unsigned long long)v;
    else *(int *)(void *)((char *)o + opt->off) = (int)v;
}

static long long option_value(const import_opts *o, const struct import_option *opt) {
    if (opt->kind == OPT_SEED) return (long long)*(const unsigned long long *)(const void *)((const char *)o + opt->off);
    return *(const int *)(const void *)((const char *)o + opt->off);
}

int import_option_set(import_opts *o, const char *name, const char *text, api_error *e) {
    const struct import_option *opt = option_find(name);
    if (!opt) return api_fail(e, 400, "unknown_field", "unknown field \"%.64s\"", name);
    if (opt->kind == OPT_CHOICE) {
        for (int i = 0; text && opt->choice(i); i++)
            if (!strcmp(text, opt->choice(i))) {
                option_store(o, opt, i);
                return 0;
            }
        return option_refused(opt, text, e);
    }
    int64_t v;
    if (!num_parse_i64(text, INT64_MIN, INT64_MAX, &v) || !option_allows(opt, v)) return option_refused(opt, text, e);
    option_store(o, opt, v);
    return 0;
}

int import_option_set_json(import_opts *o, const char *name, const cJSON *v, api_error *e) {
    const struct import_option *opt = option_find(name);
    if (!opt) return api_fail(e, 400, "unknown_field", "unknown field \"%.64s\"", name);
    if (opt->kind == OPT_CHOICE) {
        if (!cJSON_IsString(v)) return option_refused(opt, cJSON_IsNumber(v) ? "a number" : "not a string", e);
        return import_option_set(o, name, v->valuestring, e);
    }
    char text[32];
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 1e18) {
        if (cJSON_IsNumber(v))
            snprintf(text, sizeof text, "%.6g", v->valuedouble);     /* a fraction, or past any limit */
        else
            snprintf(text, sizeof text, "%s", cJSON_IsString(v) ? v->valuestring : "not a number");
        return option_refused(opt, text, e);
    }
    snprintf(text, sizeof text, "%.0f", v->valuedouble);
    if (!option_allows(opt, (long long)v->valuedouble)) return option_refused(opt, text, e);
    option_store(o, opt, (long long)v->valuedouble);
    return 0;
}

int import_options_check(const import_opts *o, api_error *e) {
    for (size_t i = 0; i < COUNT_OF(import_options); i++) {
        const struct import_option *opt = &import_options[i];
        long long v = option_value(o, opt);
        bool ok = opt->kind == OPT_CHOICE ? v >= 0 && v <= INT_MAX && opt->choice((int)v) != NULL
                                          : (v == 0 && opt->from_images) || option_allows(opt, v);
        if (!ok) {
            char text[24];
            snprintf(text, sizeof text, "%lld", v);
            return option_refused(opt, text, e);
        }
    }
    if ((o->width == 0) != (o->height == 0))
        return api_fail(e, 400, "invalid_field",
                        "give width and height together (or neither: the most common size)");
    if (o->val_percent + o->test_percent > 100)
        return api_fail(e, 400, "invalid_field", "val_percent + test_percent is %d; at most 100",
                        o->val_percent + o->test_percent);
    return 0;
}

cJSON *import_schema(void) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    for (size_t i = 0; ok && i < COUNT_OF(import_options); i++) {
        const struct import_option *opt = &import_options[i];
        cJSON *f = cJSON_AddObjectToObject(o, opt->name);
        ok = f && cJSON_AddStringToObject(f, "type", opt->kind == OPT_CHOICE ? "string" : "integer") &&
             cJSON_AddStringToObject(f, "description", opt->doc);
        if (!ok) break;
        if (opt->kind == OPT_CHOICE) {
            cJSON *names = cJSON_AddArrayToObject(f, "enum");
            ok = names && cJSON_AddStringToObject(f, "default", opt->choice(opt->def));
            for (int k = 0; ok && opt->choice(k); k++)
                ok = cJSON_AddItemToArray(names, cJSON_CreateString(opt->choice(k)));
        }
        else if (opt->kind == OPT_CHANNELS)
            ok = cJSON_AddNullToObject(f, "default") &&
                 cJSON_AddItemToObject(f, "enum", cJSON_CreateIntArray((const int[]){ 1, 3 }, 2));
        else
            ok = (!opt->from_images ? cJSON_AddNumberToObject(f, "default", opt->def) != NULL
                                    : cJSON_AddNullToObject(f, "default") != NULL) &&
                 cJSON_AddNumberToObject(f, "minimum", opt->kind == OPT_SEED ? 0 : opt->lo) &&
                 cJSON_AddNumberToObject(f, "maximum", opt->kind == OPT_SEED ? (double)SEED_MAX : opt->hi);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}


cJSON *import_options_to_json(const import_opts *o) {
    cJSON *j = cJSON_CreateObject();
    bool ok = j != NULL;
    for (size_t i = 0; ok && i < COUNT_OF(import_options); i++) {
        const struct import_option *opt = &import_options[i];
        long long v = option_value(o, opt);
        if (opt->kind == OPT_CHOICE) {
            const char *name = v >= 0 && v <= INT_MAX ? opt->choice((int)v) : NULL;
            ok = name && cJSON_AddStringToObject(j, opt->name, name);
        } else if (v == 0 && opt->from_images) {
            ok = cJSON_AddNullToObject(j, opt->name) != NULL;       /* chosen from the images */
        } else {
            ok = cJSON_AddNumberToObject(j, opt->name, (double)v) != NULL;
        }
    }
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}
