"""Reference values for `rows_that_see_no_key_give_zeros` in
tests/nn/attention.rs: PyTorch's `scaled_dot_product_attention` (2.15, f64),
which gives 0 (and zero gradients) on a query row whose mask hides every
key, since 2.5.

Run: /work/refvenv/bin/python attention_hidden_rows.py
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


def keep_mask(b, tq, tk, hidden):
    """True where (i * 3 + j * 5 + b) % 4 != 0, rows listed in `hidden` all False."""
    m = np.array([[[(i * 3 + j * 5 + bb) % 4 != 0 for j in range(tk)] for i in range(tq)] for bb in range(b)])
    for bb, i in hidden:
        m[bb, i, :] = False
    return torch.tensor(m)


def case(name, shapes, mask, causal):
    (qs, ks, vs) = shapes
    q, k, v = init(qs, 1.0, 0.8), init(ks, 2.0, 0.9), init(vs, 3.0, 1.0)
    for t in (q, k, v):
        t.requires_grad_(True)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    n = o.numel()
    loss = (o.reshape(-1) * torch.sin(0.1 * torch.arange(n, dtype=torch.float64))).sum()
    gq, gk, gv = torch.autograd.grad(loss, (q, k, v))
    print(f"// {name}")
    print(f"    out: {wsum(o)}, dq: {wsum(gq)}, dk: {wsum(gk)}, dv: {wsum(gv)},")


# the mask [2, 1, 5, 7]: batch 0 row 2, batch 1 rows 0 and 4 hide every key
m = keep_mask(2, 5, 7, [(0, 2), (1, 0), (1, 4)]).unsqueeze(1)
small = ([2, 2, 5, 4], [2, 2, 7, 4], [2, 2, 7, 3])
case("bool mask", small, m, False)
case("additive mask, -inf where hidden", small,
     torch.where(m, torch.tensor(0.0, dtype=torch.float64), torch.tensor(float("-inf"), dtype=torch.float64)), False)
# causal, key 0 hidden from every row: row 0 sees no key
hide0 = torch.ones(5, 7, dtype=torch.bool)
hide0[:, 0] = False
causal_mask = hide0 & torch.ones(5, 7, dtype=torch.bool).tril()
case("causal with key 0 hidden", small, causal_mask, False)
# wide heads and more keys (the kernels on matrix products)
mw = keep_mask(1, 4, 70, [(0, 1)]).unsqueeze(1)
case("wide: [1,2,4,64] x 70 keys, row 1 hidden", ([1, 2, 4, 64], [1, 2, 70, 64], [1, 2, 70, 64]), mw, False)
mw8 = keep_mask(1, 9, 12, [(0, 0), (0, 5)]).unsqueeze(1)
case("[1,2,9,8] x 12 keys, rows 0 and 5 hidden", ([1, 2, 9, 8], [1, 2, 12, 8], [1, 2, 12, 8]), mw8, False)
