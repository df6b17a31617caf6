#!/usr/bin/python3
"""PIL + NumPy side of bench/import_compare and bench/loader_compare, and the
images both use.

  generate DIR [--count N] [--width W] [--height H] [--classes K] [--quality Q]
           [--png]
      Writes N photo-like images (smooth gradients, soft blobs, a few hard
      shapes, sensor-like noise), W x H, JPEG of quality Q (4:2:0, Pillow's
      default) or, with --png, PNG, into K class folders DIR/class_K/, in a
      pool of one process a core. Image i is a function of i only, so a cache
      made once is the same every time; DIR/.complete marks a finished set.

  import DIR [--size S] [--procs P]
      PIL at its best (issue 13): each file opened, im.draft("RGB", (S, S))
      (libjpeg decodes at 1/2, 1/4 or 1/8 of the size, the largest that stays
      at least S x S), .convert("RGB").resize((S, S), Image.BILINEAR), in a
      pool of P processes (default: the cores), each writing its image as CHW
      into its slot of one shared uint8 array (what a packed dataset holds).
      BILINEAR is PIL's antialiased triangle filter (its support grows with
      the scale), the filter kiln's resize uses; Pillow's default for RGB,
      BICUBIC, costs twice the taps. Prints one JSON object.

  loader KDS [--crop C] [--procs P] [--epochs E] [--limit N] [--warmup W]
      The loader's work on an encoded (format version 2) .kds split of JPEG
      records: each record decoded with PIL from its bytes, a random C x C
      crop, a random horizontal flip, to a uint8 CHW array, in P processes,
      each taking every P-th image (in a shuffled order each epoch) of the
      first N records (all: 0), E epochs, after W untimed images. Each
      process times its own loop; the figure is all images over the slowest
      one's time (and per_cpu_second: over the CPU time of the loops). Prints
      one JSON object.
"""
import argparse
import io
import json
import math
import mmap
import multiprocessing as mp
import os
import random
import struct
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


# ---- generate -------------------------------------------------------------------

def photo(i, w, h):
    """Image i: an RGB PIL image that compresses like a photo (about 0.5 to
    1.5 bits a pixel at quality 90), a function of i only."""
    rng = np.random.default_rng(1000003 * i + 17)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.empty((h, w, 3), np.float32)
    # a sky-to-ground gradient at a random angle, in two random colours
    a = rng.uniform(0, 2 * math.pi)
    t = (np.cos(a) * x / w + np.sin(a) * y / h)
    t = (t - t.min()) / (t.max() - t.min() + 1e-6)
    c0, c1 = rng.uniform(20, 235, 3), rng.uniform(20, 235, 3)
    for ch in range(3):
        img[..., ch] = c0[ch] * (1 - t) + c1[ch] * t
    # soft blobs: lighting, out-of-focus objects
    for _ in range(rng.integers(3, 7)):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.05, 0.3) * w
        g = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
        img += g[..., None] * rng.uniform(-70, 70, 3)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    # hard-edged shapes, slightly softened like a lens would
    d = ImageDraw.Draw(im)
    for _ in range(rng.integers(4, 10)):
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        x0, y0 = rng.uniform(-0.1, 0.9) * w, rng.uniform(-0.1, 0.9) * h
        sw, sh = rng.uniform(0.05, 0.4) * w, rng.uniform(0.05, 0.4) * h
        kind = rng.integers(0, 3)
        if kind == 0:
            d.ellipse([x0, y0, x0 + sw, y0 + sh], fill=col)
        elif kind == 1:
            d.rectangle([x0, y0, x0 + sw, y0 + sh], fill=col)
        else:
            pts = [(x0 + rng.uniform(0, sw), y0 + rng.uniform(0, sh)) for _ in range(rng.integers(3, 7))]
            d.polygon(pts, fill=col)
    im = im.filter(ImageFilter.GaussianBlur(0.8))
    # texture and sensor noise
    arr = np.asarray(im).astype(np.float32)
    arr += rng.normal(0, 4.0, (h, w, 1)) + rng.normal(0, 2.0, (h, w, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def _gen_one(args):
    i, d, w, h, classes, quality, png = args
    folder = os.path.join(d, f"class_{i % classes}")
    path = os.path.join(folder, f"img_{i:06d}.{'png' if png else 'jpg'}")
    if os.path.exists(path):
        return
    im = photo(i, w, h)
    tmp = path + ".part"
    if png:
        im.save(tmp, "PNG")
    else:
        im.save(tmp, "JPEG", quality=quality)
    os.replace(tmp, path)


def generate(a):
    if os.path.exists(os.path.join(a.dir, ".complete")):
        return
    for c in range(a.classes):
        os.makedirs(os.path.join(a.dir, f"class_{c}"), exist_ok=True)
    jobs = [(i, a.dir, a.width, a.height, a.classes, a.quality, a.png) for i in range(a.count)]
    t = time.time()
    every = max(1000, a.count // 10)
    with mp.Pool(os.cpu_count()) as pool:
        for k, _ in enumerate(pool.imap_unordered(_gen_one, jobs, chunksize=16)):
            if (k + 1) % every == 0:
                print(f"  generated {k + 1} of {a.count} ({time.time() - t:.0f} s)", file=sys.stderr)
    open(os.path.join(a.dir, ".complete"), "w").close()


# ---- import ---------------------------------------------------------------------

def list_images(d):
    """(path, class index) for every image under DIR's class folders, sorted."""
    classes = sorted(e for e in os.listdir(d) if os.path.isdir(os.path.join(d, e)))
    out = []
    for k, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(d, c))):
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                out.append((os.path.join(d, c, f), k))
    return out


_shared = {}


def _import_chunk(args):
    lo, hi = args
    files, size, buf = _shared["files"], _shared["size"], _shared["buf"]
    out = np.frombuffer(buf, np.uint8).reshape(len(files), 3, size, size)
    for i in range(lo, hi):
        im = Image.open(files[i][0])
        im.draft("RGB", (size, size))
        im = im.convert("RGB").resize((size, size), Image.BILINEAR)
        out[i] = np.asarray(im).transpose(2, 0, 1)
    return hi - lo


def pil_import(a):
    t0 = time.perf_counter()
    files = list_images(a.dir)
    n, size = len(files), a.size
    # one uint8 array for the whole set, shared with the workers (fork)
    buf = mmap.mmap(-1, n * 3 * size * size)
    _shared.update(files=files, size=size, buf=buf)
    chunks = [(lo, min(lo + 8, n)) for lo in range(0, n, 8)]
    with mp.get_context("fork").Pool(a.procs) as pool:
        done = sum(pool.imap_unordered(_import_chunk, chunks))
    t = time.perf_counter() - t0
    out = np.frombuffer(buf, np.uint8)
    checksum = int(out[:: 4099].sum())
    print(json.dumps({"images": done, "seconds": t, "images_per_sec": done / t, "procs": a.procs,
                      "checksum": checksum}))


# ---- loader ---------------------------------------------------------------------

def read_kds(path):
    """(labels, records as memoryviews, c, h, w) of an encoded .kds split
    (engine/dataset.h: version 2)."""
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    magic, version = data[0:7], data[7]
    if magic != b"KILNDS\0" or version != 2:
        sys.exit(f"{path}: not an encoded .kds split (magic {magic!r}, version {version})")
    count, c, h, w, enc = struct.unpack_from("<IHHHH", data, 8)
    at = 24 + 2 * count
    at = (at + 63) // 64 * 64
    offsets = np.frombuffer(data, np.uint64, count + 1, at)
    at += 8 * (count + 1)
    at = (at + 63) // 64 * 64
    view = memoryview(data)
    recs = [view[at + int(offsets[i]): at + int(offsets[i + 1])] for i in range(count)]
    return recs, c, h, w, enc


def _loader_worker(args):
    path, rank, procs, crop, epochs, limit, warmup = args
    recs, c, h, w, enc = read_kds(path)
    n = min(limit, len(recs)) if limit else len(recs)
    rng = random.Random(rank)
    out = np.empty((c, crop, crop), np.uint8)

    def one(i):
        im = Image.open(io.BytesIO(recs[i]))
        a = np.asarray(im)                           # h x w x c, decoded
        y, x = rng.randrange(h - crop + 1), rng.randrange(w - crop + 1)
        a = a[y:y + crop, x:x + crop]
        if rng.random() < 0.5:
            a = a[:, ::-1]
        out[...] = a.transpose(2, 0, 1) if a.ndim == 3 else a[None]

    for i in range(rank, min(n, warmup * procs), procs):   # warm, untimed
        one(i)
    done = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        order = list(range(rank, n, procs))
        rng.shuffle(order)
        for i in order:
            one(i)
            done += 1
    return done, time.perf_counter() - t0, time.process_time() - c0


def pil_loader(a):
    recs, c, h, w, enc = read_kds(a.kds)
    if enc != 2:
        sys.exit(f"{a.kds}: records are not JPEG (encoding {enc})")
    del recs
    args = [(a.kds, r, a.procs, a.crop, a.epochs, a.limit, a.warmup) for r in range(a.procs)]
    if a.procs == 1:
        res = [_loader_worker(args[0])]
    else:
        with mp.get_context("fork").Pool(a.procs) as pool:
            res = pool.map(_loader_worker, args)
    # each process times its own loop (after its warm-up, as kiln's harness
    # times its epochs after the threads have started): the set is done when
    # the slowest is
    t = max(r[1] for r in res)
    cpu = sum(r[2] for r in res)
    done = sum(r[0] for r in res)
    print(json.dumps({"images": done, "seconds": t, "images_per_sec": done / t, "procs": a.procs,
                      "per_proc": done / t / a.procs, "cpu_seconds": cpu, "per_cpu_second": done / cpu}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("dir")
    g.add_argument("--count", type=int, default=2000)
    g.add_argument("--width", type=int, default=1024)
    g.add_argument("--height", type=int, default=768)
    g.add_argument("--classes", type=int, default=10)
    g.add_argument("--quality", type=int, default=90)
    g.add_argument("--png", action="store_true")
    i = sub.add_parser("import")
    i.add_argument("dir")
    i.add_argument("--size", type=int, default=256)
    i.add_argument("--procs", type=int, default=os.cpu_count())
    lo = sub.add_parser("loader")
    lo.add_argument("kds")
    lo.add_argument("--crop", type=int, default=224)
    lo.add_argument("--procs", type=int, default=1)
    lo.add_argument("--epochs", type=int, default=1)
    lo.add_argument("--limit", type=int, default=0)
    lo.add_argument("--warmup", type=int, default=64)
    a = p.parse_args()
    {"generate": generate, "import": pil_import, "loader": pil_loader}[a.cmd](a)


if __name__ == "__main__":
    main()
