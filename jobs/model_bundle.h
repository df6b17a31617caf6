/* jobs/model_bundle.h: a trained model as the tools that use it need it:
 * its network spec, weights file, class names and the preprocessing its
 * dataset applied, from a job folder (with a snapshot selection) or from a
 * downloaded model tarball. `kiln infer`, `kiln export`, the inference
 * process behind POST /infer, evaluations and the model download all open
 * a model here, so they agree on what "epoch=best" and "the preprocessing"
 * mean.
 *
 * The preprocessing (model_prep, preprocess.json in the tarball) is what the
 * job's dataset import and validation loader did to an image: decode to
 * `c` channels, resize to w x h by `resize` (engine/image.h), take the centre
 * crop_w x crop_h (the network's input; the whole image when the job trained
 * without crops), then x = (pixel - mean[c]) * scale.
 */
#ifndef KILN_JOBS_MODEL_BUNDLE_H
#define KILN_JOBS_MODEL_BUNDLE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/err.h"         /* api_error */
#include "engine/image.h"     /* img_resize */
#include "engine/net.h"       /* net, net_shape */
#include "jobs/jobcfg.h"      /* jobcfg */
#include "jobs/snapshots.h"   /* snap_select */

#define MODEL_PREPROCESS_JSON "preprocess.json"   /* in a tarball, and in a job folder */

typedef struct model_prep {
    int c, h, w;              /* decoded to c channels (1 or 3), resized to w x h */
    img_resize resize;
    int crop_h, crop_w;       /* the network's input: the centre crop (h, w when none) */
    float mean[4];            /* per channel, in pixel units (0..255) */
    float scale;              /* 1/255 */
} model_prep;

/* A job's preprocessing: its dataset's header (shape, mean, resize) and the
 * crop it trained with. Returns 0, or -1 with err set (the dataset's header
 * is unreadable). */
int model_prep_from_job(const jobcfg *c, model_prep *out, char *err, size_t errlen);
/* A job folder's preprocessing: its preprocess.json (the worker writes it
 * when it starts, so it outlives the dataset), else model_prep_from_job. */
int model_prep_of_job_dir(const char *job_dir, const jobcfg *c, model_prep *out, char *err, size_t errlen);
/* preprocess.json: {"channels","height","width","resize","mean":[per channel],
 * "scale","layout":"NCHW","formula", and "center_crop":[h,w] when it crops}.
 * Owned by the caller; NULL when out of memory. */
cJSON *model_prep_to_json(const model_prep *p);
/* Reads that object back, checking every value. 0, or -1 with err set. */
int model_prep_from_json(const cJSON *j, model_prep *out, char *err, size_t errlen);

typedef struct model_bundle {
    cJSON *spec;              /* the network spec (owned) */
    char network_name[64];    /* the spec's name or the built-in's; may be "" */
    net_shape input;          /* the network's input: prep.c x prep.crop_h x prep.crop_w */
    int nclasses;
    char **labels;            /* nclasses names (owned) */
    model_prep prep;
    char weights[PATH_MAX];   /* a safetensors file net_load reads (a checkpoint too) */
    int epoch;                /* the epoch the weights are from (0: not known) */
    bool final;               /* the end of training (model.safetensors) */
    int64_t job_id;           /* 0 when not known */
    char tmpdir[PATH_MAX];    /* "" or the folder a tarball was unpacked into (removed by free) */
} model_bundle;

/* Opens the model of a job folder (job.json, the selected weights through
 * snap_resolve, preprocess.json or else the dataset's header). Errors as
 * snap_resolve's, and 500 internal_error for an unreadable job.json. */
int model_bundle_from_job(const char *job_dir, snap_select sel, model_bundle *out, api_error *e);
/* Opens a model tarball (GET .../model?format=tar): unpacks it into a new
 * folder under tmp_parent (NULL: $TMPDIR or /tmp). 400 bad_model naming the
 * missing or malformed member. */
int model_bundle_from_tar(const char *tar_path, const char *tmp_parent, model_bundle *out, api_error *e);
/* A folder is a job folder (sel applies), a file a tarball (sel must be
 * SNAP_FINAL: a tarball holds one set of weights). */
int model_bundle_open(const char *path, snap_select sel, model_bundle *out, api_error *e);
void model_bundle_free(model_bundle *b);   /* NULL-safe; removes tmpdir */

/* Builds the bundle's network on the CPU for batches of up to max_batch
 * images and loads its weights (FP32, whatever precision it trained in).
 * Returns the net (net_free it) or NULL with err set. */
net *model_bundle_net(const model_bundle *b, int max_batch, char *err, size_t errlen);

#endif
