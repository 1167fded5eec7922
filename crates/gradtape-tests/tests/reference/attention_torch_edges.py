"""Reference values for tests/nn/attention_torch_edges.rs: PyTorch's
`F.scaled_dot_product_attention` (f64) at the edges of its argument space
that the bad-input campaign probed: `is_causal` with fewer queries than
keys and more (PyTorch aligns the causal band top-left), masks that
broadcast from lower ranks (`[tk]`, `[b, 1, tq, 1]`, additive
`[1, h, 1, tk]`), `scale` 0 (uniform weights), a negative `scale`, inputs
of rank 3 and 5, and no keys (`tk = 0`: PyTorch gives zeros).

Run: /work/refvenv/bin/python attention_torch_edges.py
Inputs are the tests' `init(shape, k, scale)[i] = scale * sin(0.37 i + k)`
(row-major i); each tensor is summarised as (Σ x, Σ x[i] sin(0.1 i)) and the
gradients are of L = Σ o[i] sin(0.1 i).
"""
import numpy as np
import torch
import torch.nn.functional as F


def init(shape, k, scale):
    n = int(np.prod(shape))
    return torch.tensor(scale * np.sin(0.37 * np.arange(n) + k), dtype=torch.float64).reshape(shape)


def wsum(t):
    v = t.detach().reshape(-1).double().numpy()
    return (float(v.sum()), float((v * np.sin(0.1 * np.arange(v.size))).sum()))


def case(name, shapes, mask=None, causal=False, scale=None):
    (qs, ks, vs) = shapes
    q, k, v = init(qs, 1.0, 0.8), init(ks, 2.0, 0.9), init(vs, 3.0, 1.0)
    for t in (q, k, v):
        t.requires_grad_(True)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)
    n = o.numel()
    loss = (o.reshape(-1) * torch.sin(0.1 * torch.arange(n, dtype=torch.float64))).sum()
    grads = torch.autograd.grad(loss, (q, k, v), allow_unused=True)
    grads = [g if g is not None else torch.zeros_like(t) for g, t in zip(grads, (q, k, v))]
    print(f"        // {name}")
    print(f"        [{wsum(o)}, {wsum(grads[0])}, {wsum(grads[1])}, {wsum(grads[2])}],")


print("torch", torch.__version__)
qkv = ([2, 2, 3, 4], [2, 2, 5, 4], [2, 2, 5, 3])
case("causal, tq 3 < tk 5 (top-left)", qkv, causal=True)
case("causal, tq 5 > tk 3 (top-left)", ([2, 2, 5, 4], [2, 2, 3, 4], [2, 2, 3, 3]), causal=True)
# bool mask [tk]: keys 1 and 3 hidden (PyTorch 2.15 refuses a mask of rank
# 1, "Dimension out of range", so it gets the [1, tk] that [tk] broadcasts
# as; gradtape takes [tk] itself)
case("bool mask [5] (as [1, 5])", qkv, mask=torch.tensor([[True, False, True, False, True]]))
# bool mask [b, 1, tq, 1]: batch 1 row 1 sees nothing; PyTorch >= 2.5 gives zeros there
m = torch.ones(2, 1, 3, 1, dtype=torch.bool)
m[1, 0, 1, 0] = False
case("bool mask [2, 1, 3, 1]", qkv, mask=m)
# additive mask [1, h, 1, tk]
add = init([1, 2, 1, 5], 4.0, 2.0)
case("additive mask [1, 2, 1, 5]", qkv, mask=add)
case("scale 0", qkv, scale=0.0)
case("scale -0.7, causal", qkv, causal=True, scale=-0.7)
case("rank 3", ([3, 4, 6], [3, 6, 6], [3, 6, 2]), causal=True)
case("rank 5", ([2, 1, 2, 3, 4], [2, 1, 2, 4, 4], [2, 1, 2, 4, 5]))
case("no keys", ([1, 2, 3, 4], [1, 2, 0, 4], [1, 2, 0, 3]))
