"""PyTorch eager on the GPU, for the GPU check (scripts/gpu-check.sh): the
workloads of the shared bench's WORKLOADS.md that gradtape runs on a GPU,
with the same inputs and the same JSON lines (impl "torch-eager-cuda").
Each step ends by reading its checksum back (`.item()`), so a step's time
includes all its GPU work, as gradtape's does."""
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

DEV = "cuda"
IMPL = "torch-eager-cuda"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def init(shape, k, scale):
    n = int(np.prod(shape))
    a = (scale * np.sin(0.37 * np.arange(n, dtype=np.float64) + k)).astype(np.float32).reshape(shape)
    return torch.from_numpy(a).to(DEV)


def timeit(step, iters, warmup):
    out = None
    for _ in range(warmup):
        out = step()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        out = step()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), out


def emit(name, median, iters, checksum):
    print(json.dumps({"impl": IMPL, "workload": name, "median_s": median, "iters": iters,
                      "checksum": [float(c) for c in checksum], "device": torch.cuda.get_device_name()}), flush=True)


def sgd_loop(loss_fn, params, name, iters):
    params = [p.clone().requires_grad_(True) for p in params]

    def step():
        loss = loss_fn(params)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= 0.01 * g
        return loss.item(), grads[0].abs().sum().item()

    first = step()
    m, _ = timeit(step, iters, 3)
    emit(name, m, iters, first)


def mlp_step():
    X = init([128, 784], 0.1, 0.5)
    labels = torch.arange(128, device=DEV) % 10
    params = [init([784, 512], 1, math.sqrt(2 / 784)), torch.zeros(512, device=DEV), init([512, 512], 2, math.sqrt(2 / 512)),
              torch.zeros(512, device=DEV), init([512, 10], 3, math.sqrt(2 / 512)), torch.zeros(10, device=DEV)]

    def loss_fn(p):
        h = torch.relu(X @ p[0] + p[1])
        h = torch.relu(h @ p[2] + p[3])
        return F.cross_entropy(h @ p[4] + p[5], labels)

    sgd_loop(loss_fn, params, "mlp_step", 50)


def rnn_grad():
    X = init([64, 32, 64], 0.1, 0.5)
    params = [p.requires_grad_(True) for p in
              [init([64, 128], 1, 1 / 8), init([128, 128], 2, 0.5 / math.sqrt(128)), torch.zeros(128, device=DEV)]]

    def step():
        W, U, b = params
        h = torch.zeros(32, 128, device=DEV)
        for t in range(64):
            h = torch.tanh(X[t] @ W + h @ U + b)
        loss = (h * h).mean()
        g = torch.autograd.grad(loss, params)
        return loss.item(), g[1].abs().sum().item()

    m, out = timeit(step, 20, 3)
    emit("rnn_grad", m, 20, out)


def elementwise():
    x0 = init([4194304], 0, 1)

    def step():
        x = x0.clone().requires_grad_(True)
        loss = (torch.exp(torch.sin(x)) * x).sum()
        (g,) = torch.autograd.grad(loss, x)
        return loss.item(), g.abs().sum().item()

    m, out = timeit(step, 20, 3)
    emit("elementwise", m, 20, out)


def jacobian():
    x = init([256], 0.5, 1)
    W = init([256, 256], 1, 1 / 16)
    b = init([256], 2, 0.1)
    f = lambda x: torch.tanh(W @ x + b)  # noqa: E731
    m, J = timeit(lambda: torch.autograd.functional.jacobian(f, x, vectorize=True).abs().sum().item(), 20, 3)
    emit("jacobian", m, 20, [J])


def hessian():
    x = init([128], 0.5, 1)
    W = init([128, 128], 1, 1 / math.sqrt(128))
    f = lambda x: (torch.tanh(W @ x) ** 2).sum()  # noqa: E731
    m, H = timeit(lambda: torch.autograd.functional.hessian(f, x, vectorize=True).abs().sum().item(), 20, 3)
    emit("hessian", m, 20, [H])


def cnn_step():
    X = init([32, 28, 28, 1], 0.1, 0.5).permute(0, 3, 1, 2).contiguous()
    labels = torch.arange(32, device=DEV) % 10
    params = [init([3, 3, 1, 16], 1, math.sqrt(2 / 9)), torch.zeros(16, device=DEV), init([3, 3, 16, 32], 2, math.sqrt(2 / 144)),
              torch.zeros(32, device=DEV), init([1568, 10], 3, math.sqrt(2 / 1568)), torch.zeros(10, device=DEV)]

    def loss_fn(p):
        h = F.max_pool2d(torch.relu(F.conv2d(X, p[0].permute(3, 2, 0, 1), p[1], padding=1)), 2)
        h = F.max_pool2d(torch.relu(F.conv2d(h, p[2].permute(3, 2, 0, 1), p[3], padding=1)), 2)
        h = h.permute(0, 2, 3, 1).reshape(32, 1568)
        return F.cross_entropy(h @ p[4] + p[5], labels)

    sgd_loop(loss_fn, params, "cnn_step", 20)


def transformer_step():
    B, T, V, D, H, L = 8, 128, 256, 256, 4, 2
    i = np.arange(B * T).reshape(B, T)
    tok = torch.from_numpy((7 * i + 3) % V).to(DEV)
    labels = torch.from_numpy(((11 * i + 5) % V).reshape(B * T)).to(DEV)
    mask = torch.from_numpy(np.triu(np.full([T, T], -1e9, np.float32), 1)).to(DEV)
    ones = lambda n: torch.ones(n, device=DEV)
    zeros = lambda n: torch.zeros(n, device=DEV)
    params = []
    for blk in range(L):
        k0 = 10 + 10 * blk
        params += [init([D, 3 * D], k0 + 1, 1 / 16), init([D, D], k0 + 2, 1 / 16), ones(D), zeros(D),
                   ones(D), zeros(D), init([D, 1024], k0 + 3, 1 / 16), zeros(1024),
                   init([1024, D], k0 + 4, 1 / 32), zeros(D)]
    params += [init([V, D], 1, 0.02), init([T, D], 2, 0.02), ones(D), zeros(D), init([D, V], 3, 1 / 16)]

    def loss_fn(p):
        E, P, lnf_g, lnf_b, Wout = p[10 * L:]
        x = (F.embedding(tok, E) + P).reshape(B * T, D)
        for blk in range(L):
            Wqkv, Wo, ln1_g, ln1_b, ln2_g, ln2_b, W1, b1, W2, b2 = p[10 * blk:10 * blk + 10]
            h = F.layer_norm(x, (D,), ln1_g, ln1_b, 1e-5)
            q, k, v = [t.reshape(B, T, H, D // H).transpose(1, 2) for t in (h @ Wqkv).split(D, dim=-1)]
            s = q @ k.transpose(-2, -1) / 8 + mask
            a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B * T, D)
            x = x + a @ Wo
            h = F.layer_norm(x, (D,), ln2_g, ln2_b, 1e-5)
            x = x + F.gelu(h @ W1 + b1) @ W2 + b2
        return F.cross_entropy(F.layer_norm(x, (D,), lnf_g, lnf_b, 1e-5) @ Wout, labels)

    sgd_loop(loss_fn, params, "transformer_step", 20)


ALL = [mlp_step, rnn_grad, elementwise, jacobian, hessian, cnn_step, transformer_step]

if __name__ == "__main__":
    wanted = sys.argv[1:]
    for w in ALL:
        if not wanted or w.__name__ in wanted:
            w()
