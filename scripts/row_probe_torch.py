"""The torch counterpart of the row_probe example (gradtape-examples):
F.layer_norm, F.gelu (tanh and erf forms), F.cross_entropy (integer labels,
reduction='none'), forward and forward+backward (a fixed random cotangent),
2 threads, the same shapes and bytes.

    python scripts/row_probe_torch.py [REPS] [FILTER]
"""
import os, sys, time
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
filt = sys.argv[2] if len(sys.argv) > 2 else ""
g = torch.Generator().manual_seed(7)


# ROW_PROBE_FLUSH: 32 MB written between calls (as the Rust probe)
junk = torch.zeros(8 << 20) if os.environ.get("ROW_PROBE_FLUSH") else None


def timed(f):
    for _ in range(3):
        f()
    t = []
    for _ in range(reps):
        if junk is not None:
            junk.add_(1.0)
        s = time.perf_counter()
        f()
        t.append((time.perf_counter() - s) * 1e3)
    t.sort()
    return t[len(t) // 2], t[0]


def line(name, by, r):
    print(f"{name:<44} median {r[0]:8.3f} ms  min {r[1]:8.3f} ms  {by / (r[1] * 1e-3) / 1e9:6.1f} GB/s")


def case(name, fwd, leaves, dy, fb, bb):
    def f():
        with torch.no_grad():
            fwd()

    def fbw():
        for l in leaves:
            l.grad = None
        y = fwd()
        y.backward(dy)

    line(f"{name} torch  fwd", fb, timed(f))
    line(f"{name} torch  fwd+bwd", fb + bb, timed(fbw))


for m, n in [(1024, 256), (512, 384), (2048, 128), (64, 4096)]:
    name = f"layer_norm [{m},{n}]"
    if filt not in name:
        continue
    x = (torch.randn(m, n, generator=g) * 2 + 0.5).requires_grad_()
    w = (torch.randn(n, generator=g) * 0.1 + 1).requires_grad_()
    b = (torch.randn(n, generator=g) * 0.1).requires_grad_()
    dy = torch.randn(m, n, generator=g)
    e = m * n * 4
    case(name, lambda: F.layer_norm(x, (n,), w, b, 1e-5), [x, w, b], dy, 2 * e, 3 * e)
for approx in ["tanh", "none"]:
    for m, n in [(1024, 1024), (512, 1536)]:
        name = f"gelu {'tanh' if approx == 'tanh' else 'erf '} [{m},{n}]"
        if filt not in name:
            continue
        x = (torch.randn(m, n, generator=g) * 1.5).requires_grad_()
        dy = torch.randn(m, n, generator=g)
        e = m * n * 4
        case(name, lambda: F.gelu(x, approximate=approx), [x], dy, 2 * e, 3 * e)
for m, n in [(1024, 65), (256, 8192)]:
    name = f"xent [{m},{n}]"
    if filt not in name:
        continue
    x = (torch.randn(m, n, generator=g) * 2).requires_grad_()
    labels = torch.tensor([(i * 7919) % n for i in range(m)])
    dy = torch.randn(m, generator=g)
    e = m * n * 4
    case(name, lambda: F.cross_entropy(x, labels, reduction="none"), [x], dy, e, 2 * e)
