"""Reference for the lazy sparse Adam in tests/nn/optimizers.rs: PyTorch's
SparseAdam in float64 (a separate script: TensorFlow and PyTorch do not
load into one process here).

Run: ~/.cache/gradtape-peers/bin/python sparse_adam_torch.py
"""
import numpy as np
import torch

T0 = np.arange(12, dtype=np.float64).reshape(4, 3) * 0.1 - 0.5


def sparse_grad(k):
    """Rows [0, 1], then [2, 0], then [0, 3] of a [4, 3] table (rows 1 to 3
    miss some steps, so lazy and dense-equivalent updates differ)."""
    vals = np.array([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3]]) * (1 + k)
    return vals, np.array([[0, 1], [2, 0], [0, 3]][k])


# PyTorch SparseAdam (lazy): only rows with a gradient move
p = torch.tensor(T0.copy(), requires_grad=True)
opt = torch.optim.SparseAdam([p], lr=2.0**-7, betas=(0.875, 1 - 2.0**-10), eps=2.0**-20)
for k in range(3):
    v, i = sparse_grad(k)
    p.grad = torch.sparse_coo_tensor(torch.tensor(np.array([i])), torch.from_numpy(v), (4, 3))
    opt.step()
print(f"// torch {torch.__version__} SparseAdam:", [float(x) for x in p.detach().numpy().ravel()])
