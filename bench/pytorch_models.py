#!/usr/bin/python3
"""PyTorch side of bench/pytorch_compare: the same networks as kiln's built-in
specs (engine/networks/*.json), trained on synthetic data, FP32, SGD with
momentum 0.9, and the throughput printed as one JSON object.

The architectures follow the spec files layer for layer (the same filters,
kernels, strides, padding, biases, pooling, dropout and dense sizes); the
initialisation does not matter for speed and is PyTorch's own. By default the
model and the batch are in channels-last memory format, which is PyTorch's
fastest on the CPU (oneDNN's blocked kernels); --nchw measures the default
layout instead.

Run by hand it uses whatever allocator its environment gives it; for PyTorch
at its best on the CPU (no page faults in the steps), run it as
bench/pytorch_compare does: LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 (Debian's libjemalloc2).

With --amp bf16 the steps run under torch.autocast("cpu", torch.bfloat16),
PyTorch's mixed precision on the CPU (convolutions and matrix products in
bfloat16 on oneDNN's AVX-512 BF16 kernels, FP32 weights).

With --device cuda (tests/gpu/check) the same runs on the GPU: cuDNN's
benchmark mode on, TF32 off (kiln's FP32 is FP32: FMA math), --amp bf16 or
fp16 under torch.autocast("cuda"), fp16 with a GradScaler, and the clock read
after torch.cuda.synchronize() at each step, as kiln reads each step's loss.

With --mode infer each step is one forward pass in eval mode under
torch.no_grad() (dropout off, batch norm on its running statistics), the
images per second of inference instead of training.

Usage: pytorch_models.py NET [--batch N] [--steps N] [--warmup N]
                             [--threads N] [--nchw] [--amp bf16|fp16]
                             [--device cpu|cuda] [--mode train|infer]
"""
import argparse
import json
import sys
import time

import torch
from torch import nn


def lenet(classes=10):
    # engine/networks/lenet.json: no activation after the convolutions
    return nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2),
        nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
        nn.Flatten(),
        nn.Linear(50 * 4 * 4, 500), nn.ReLU(),
        nn.Linear(500, classes))


def cifar10_cnn(classes=10):
    # engine/networks/cifar10-cnn.json
    return nn.Sequential(
        nn.Conv2d(3, 50, 3, padding=1), nn.ReLU(),
        nn.Conv2d(50, 50, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2, 2), nn.Dropout(0.25),
        nn.Conv2d(50, 100, 3, padding=1), nn.ReLU(),
        nn.Conv2d(100, 100, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2, 2), nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(100 * 8 * 8, 512), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(512, classes))


class BasicBlock(nn.Module):
    # engine/networks/resnet20.json: conv-bn-relu-conv-bn, plus the input or
    # (where the shape changes) a 1x1 stride-2 projection with batch norm, relu
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.proj(x) if self.proj is not None else x))


class Bottleneck(nn.Module):
    # engine/networks/resnet50.json (torchvision's v1.5 layout): 1x1, 3x3
    # (with the stride), 1x1 expanded 4x, each with batch norm; a 1x1
    # projection with batch norm where the shape changes
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (self.proj(x) if self.proj is not None else x))


def resnet50(classes=1000):
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def resnet20(classes=10):
    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(3):
            layers.append(BasicBlock(cin, cout, stride if b == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes)]
    return nn.Sequential(*layers)


NETS = {  # the model, its input, its class count (as kiln bench's)
    "lenet": (lenet, (1, 28, 28), 10),
    "cifar10-cnn": (cifar10_cnn, (3, 32, 32), 10),
    "resnet20": (resnet20, (3, 32, 32), 10),
    "resnet50": (resnet50, (3, 224, 224), 1000),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("net", choices=sorted(NETS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nchw", action="store_true", help="default layout, not channels-last")
    ap.add_argument("--amp", choices=["bf16", "fp16"], help="mixed precision (autocast)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--mode", choices=["train", "infer"], default="train")
    a = ap.parse_args()

    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    make, shape, classes = NETS[a.net]
    model = make(classes)
    fmt = torch.contiguous_format if a.nchw else torch.channels_last
    model = model.to(dev, memory_format=fmt)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = (torch.rand(a.batch, *shape) * 2 - 1).to(dev).contiguous(memory_format=fmt)
    y = torch.randint(0, classes, (a.batch,)).to(dev)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    scaler = torch.cuda.amp.GradScaler() if cuda and a.amp == "fp16" else None

    def infer_step():
        with torch.no_grad():
            out = model(x)
        if cuda:
            torch.cuda.synchronize()
        return out

    def step():
        opt.zero_grad(set_to_none=True)
        if dtype is not None:
            with torch.autocast(a.device, dtype=dtype):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if cuda:
            torch.cuda.synchronize()
        return loss

    if a.mode == "infer":
        model.eval()
        step = infer_step
    for _ in range(a.warmup):
        step()
    times = []
    t0 = time.perf_counter()
    for _ in range(a.steps):
        s = time.perf_counter()
        step()
        times.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    times.sort()
    json.dump({"framework": "pytorch", "version": torch.__version__, "network": a.net,
               "batch": a.batch, "steps": a.steps, "threads": torch.get_num_threads(),
               "memory_format": "nchw" if a.nchw else "channels_last",
               "precision": "amp-" + a.amp if a.amp else "fp32", "device": a.device,
               "mode": a.mode,
               "gpu": torch.cuda.get_device_name(0) if cuda else None,
               "images_per_sec": a.batch * a.steps / total,
               "ms_per_step": 1e3 * total / a.steps,
               "ms_per_step_median": 1e3 * times[len(times) // 2]}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
