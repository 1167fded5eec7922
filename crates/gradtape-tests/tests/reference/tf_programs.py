"""Random programs run by TensorFlow, for tests/ops/tf_programs.rs: seeded
programs of 2 to 9 steps over ~120 ops (elementwise with broadcasting,
reductions, shape and index ops, matmul, einsum, scans, sorts, segments,
casts, integer and bool ops), each step's value and the gradients of a
weighted sum of the program's leaves w.r.t. its float inputs.

Run: /work/refvenv/bin/python tf_programs.py SEED COUNT [MAXNUMEL [more,act]] > out.txt
(TensorFlow 2.21, CPU; `more` draws three steps in ten from draw_more_step's
ops too: gather_nd, scatter_nd, tensor_scatter_nd_add/update,
boolean_mask, where(x), unique, searchsorted, bincount, band_part, trace,
diag_part, l2_normalize, l2_loss; `act` three in ten from draw_act_step's:
Keras 3's activations (mish, hard_sigmoid, hard_silu, celu, relu with its
arguments, squareplus, sparse_plus, glu; silu, log_sigmoid and softsign
again) and an LSTM step written with split, sigmoid and tanh. Either
word, or both, comma-separated; without them the draws are unchanged.)
The committed fixture ../data/tf_programs.txt is `tf_programs.py 1 300 16`.

Format, one program a block:
  P <id> <mode>                      mode: f64, f32 or int
  I <dtype> <shape> <values>         an input (shape `1,2`; `-` for a scalar)
  S <op> <operand indices> <attrs>   a step (indices into inputs then steps,
                                     `,`-separated; attrs `k=v;k=v`, `-` if none)
  V <dtype> <shape> <values>         the value of the step above
  E <message>                        TensorFlow refused the step above (the
                                     program ends there, without gradients)
  G <values>|none                    d/dx of the loss per float input, in order
  L <indices>                        the values the loss sums (its leaves)
  X <message>                        TensorFlow's gradient raised (no G lines)
The loss is Σ over the float leaves of Σ_i (1 + i/2) y[i] (flattened).
Values: floats as Python's repr, ints, bools as 0/1; `.` for no elements.
"""
import math
import sys

import numpy as np
import tensorflow as tf

from tf_programs_act import ACT_OPS, draw_act_step, run_act

TF = {"f64": tf.float64, "f32": tf.float32, "i32": tf.int32, "i64": tf.int64, "bool": tf.bool}
NAME = {v: k for k, v in TF.items()}
FLOATS = ("f64", "f32")
INTS = ("i32", "i64")

UNARY_F = {
    "abs": tf.abs, "neg": tf.negative, "exp": tf.exp, "log": tf.math.log, "sqrt": tf.sqrt,
    "rsqrt": tf.math.rsqrt, "square": tf.square, "sin": tf.sin, "cos": tf.cos, "tan": tf.tan,
    "tanh": tf.tanh, "sigmoid": tf.sigmoid, "relu": tf.nn.relu, "relu6": tf.nn.relu6,
    "elu": tf.nn.elu, "selu": tf.nn.selu, "softplus": tf.nn.softplus, "softsign": tf.nn.softsign,
    "log1p": tf.math.log1p, "expm1": tf.math.expm1, "sign": tf.sign, "floor": tf.floor,
    "ceil": tf.math.ceil, "round": tf.round, "reciprocal": tf.math.reciprocal, "asin": tf.asin,
    "acos": tf.acos, "atan": tf.atan, "sinh": tf.sinh, "cosh": tf.cosh, "asinh": tf.asinh,
    "acosh": tf.acosh, "atanh": tf.atanh, "erf": tf.math.erf, "erfc": tf.math.erfc,
    "lgamma": tf.math.lgamma, "digamma": tf.math.digamma,
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: tf.nn.gelu(x, approximate=True), "silu": tf.nn.silu,
    "leaky_relu": lambda x: tf.nn.leaky_relu(x, alpha=0.2), "log_sigmoid": tf.math.log_sigmoid,
    "is_nan": tf.math.is_nan, "is_inf": tf.math.is_inf, "is_finite": tf.math.is_finite,
    "stop_gradient": tf.stop_gradient,
}
UNARY_I = {"abs": tf.abs, "neg": tf.negative, "sign": tf.sign, "square": tf.square}
BINARY_NUM = {
    "add": tf.add, "sub": tf.subtract, "mul": tf.multiply, "maximum": tf.maximum,
    "minimum": tf.minimum, "floor_div": tf.math.floordiv, "floor_mod": tf.math.floormod,
    "squared_difference": tf.math.squared_difference,
}
BINARY_F = {
    "div": tf.math.truediv, "pow": tf.pow, "atan2": tf.atan2, "xlogy": tf.math.xlogy,
    "xlog1py": tf.math.xlog1py, "divide_no_nan": tf.math.divide_no_nan,
}
BINARY_I = {"truncate_div": tf.truncatediv, "pow": tf.pow}
COMPARE = {"eq": tf.equal, "ne": tf.not_equal, "lt": tf.less, "le": tf.less_equal,
           "gt": tf.greater, "ge": tf.greater_equal}
LOGICAL = {"logical_and": tf.logical_and, "logical_or": tf.logical_or,
           "logical_xor": tf.math.logical_xor}
REDUCE_NUM = {"sum": tf.reduce_sum, "mean": tf.reduce_mean, "max": tf.reduce_max,
              "min": tf.reduce_min, "prod": tf.reduce_prod}
REDUCE_F = {"logsumexp": tf.reduce_logsumexp, "std": tf.math.reduce_std,
            "variance": tf.math.reduce_variance}
REDUCE_B = {"any": tf.reduce_any, "all": tf.reduce_all}
SEGMENT = {"sum": tf.math.segment_sum, "mean": tf.math.segment_mean, "max": tf.math.segment_max,
           "min": tf.math.segment_min, "prod": tf.math.segment_prod}
USEGMENT = {"sum": tf.math.unsorted_segment_sum, "mean": tf.math.unsorted_segment_mean,
            "max": tf.math.unsorted_segment_max, "min": tf.math.unsorted_segment_min,
            "prod": tf.math.unsorted_segment_prod}


def ints(a):
    return [int(v) for v in a]


def run_op(op, xs, a):
    """The step `op` on tensors `xs` with attributes `a`, in TensorFlow."""
    x = xs[0] if xs else None
    if op in UNARY_F and x.dtype.is_floating:
        return UNARY_F[op](x)
    if op in UNARY_I:
        return UNARY_I[op](x)
    if op in BINARY_NUM:
        return BINARY_NUM[op](x, xs[1])
    if op in BINARY_F or op in BINARY_I:
        return (BINARY_F.get(op) if x.dtype.is_floating else BINARY_I.get(op))(x, xs[1])
    if op in COMPARE:
        return COMPARE[op](x, xs[1])
    if op in LOGICAL:
        return LOGICAL[op](x, xs[1])
    if op == "logical_not":
        return tf.logical_not(x)
    red = {**REDUCE_NUM, **REDUCE_F, **REDUCE_B}
    if op in red:
        axes = None if a["axes"] == "all" else ints(a["axes"])
        return red[op](x, axis=axes, keepdims=bool(a["keep"]))
    if op == "norm":
        return tf.norm(x, axis=a["axis"][0], keepdims=bool(a["keep"]))
    if op in ("argmax", "argmin"):
        return (tf.argmax if op == "argmax" else tf.argmin)(x, axis=a["axis"][0])
    if op == "cast":
        return tf.cast(x, TF[a["to"]])
    if op == "reshape":
        return tf.reshape(x, ints(a["shape"]))
    if op == "transpose":
        return tf.transpose(x, ints(a["perm"]))
    if op == "expand_dims":
        return tf.expand_dims(x, a["axis"][0])
    if op == "squeeze":
        return tf.squeeze(x, ints(a["axes"]))
    if op == "concat":
        return tf.concat(xs, a["axis"][0])
    if op == "stack":
        return tf.stack(xs, a["axis"][0])
    if op == "split":
        return tf.split(x, a["num"][0], a["axis"][0])[a["pick"][0]]
    if op == "split_sizes":
        return tf.split(x, ints(a["sizes"]), a["axis"][0])[a["pick"][0]]
    if op == "unstack":
        return tf.unstack(x, axis=a["axis"][0])[a["pick"][0]]
    if op == "slice":
        return tf.slice(x, ints(a["begin"]), ints(a["size"]))
    if op == "strided_slice":
        sl = [slice(*[None if v == "n" else int(v) for v in s.split(":")]) for s in a["s"]]
        return x[tuple(sl)]
    if op == "gather":
        idx = tf.constant(np.array(ints(a["idx"]), np.int64).reshape(ints(a["ishape"])))
        return tf.gather(x, idx, axis=a["axis"][0], batch_dims=a["batch"][0])
    if op == "tile":
        return tf.tile(x, ints(a["mult"]))
    if op == "pad":
        p = np.array(ints(a["pads"]), np.int64).reshape(-1, 2)
        return tf.pad(x, p, mode=a["mode"], constant_values=a.get("value", [0])[0])
    if op == "reverse":
        return tf.reverse(x, ints(a["axes"]))
    if op == "roll":
        return tf.roll(x, ints(a["shift"]), ints(a["axes"]))
    if op == "broadcast_to":
        return tf.broadcast_to(x, ints(a["shape"]))
    if op == "where":
        return tf.where(x, xs[1], xs[2])
    if op == "matmul":
        return tf.linalg.matmul(x, xs[1], transpose_a=bool(a["ta"]), transpose_b=bool(a["tb"]))
    if op == "einsum":
        return tf.einsum(a["spec"], *xs)
    if op == "softmax":
        return tf.nn.softmax(x, axis=a["axis"][0])
    if op == "log_softmax":
        return tf.nn.log_softmax(x, axis=a["axis"][0])
    if op in ("cumsum", "cumprod"):
        f = tf.cumsum if op == "cumsum" else tf.math.cumprod
        return f(x, axis=a["axis"][0], exclusive=bool(a["excl"]), reverse=bool(a["rev"]))
    if op == "clip":
        return tf.clip_by_value(x, a["lo"][0], a["hi"][0])
    if op == "sort":
        return tf.sort(x, axis=a["axis"][0], direction="DESCENDING" if a["desc"] else "ASCENDING")
    if op == "argsort":
        d = "DESCENDING" if a["desc"] else "ASCENDING"
        return tf.cast(tf.argsort(x, axis=a["axis"][0], direction=d, stable=True), tf.int64)
    if op == "top_k_values":
        return tf.math.top_k(x, k=a["k"][0]).values
    if op == "top_k_indices":
        return tf.cast(tf.math.top_k(x, k=a["k"][0]).indices, tf.int64)
    if op == "one_hot":
        return tf.one_hot(x, a["depth"][0], on_value=a["on"][0], off_value=a["off"][0],
                          axis=a["axis"][0], dtype=TF[a["to"]])
    # (the ops of `more` campaigns, MORE below)
    if op in ("gather_nd", "scatter_nd", "tensor_scatter_add", "tensor_scatter_update"):
        idx = tf.constant(np.array(ints(a["idx"]), np.int64).reshape(ints(a["ishape"])))
        if op == "gather_nd":
            return tf.gather_nd(x, idx)
        if op == "scatter_nd":
            return tf.scatter_nd(idx, x, tf.constant(ints(a["shape"]), tf.int64))
        f = tf.tensor_scatter_nd_add if op == "tensor_scatter_add" else tf.tensor_scatter_nd_update
        return f(x, idx, xs[1])
    if op == "l2_normalize":
        return tf.math.l2_normalize(x, axis=ints(a["axes"]), epsilon=a["eps"][0])
    if op == "band_part":
        return tf.linalg.band_part(x, a["lower"][0], a["upper"][0])
    if op == "boolean_mask":
        return tf.boolean_mask(x, xs[1])
    if op == "argwhere":
        return tf.where(x)
    if op in ("unique_values", "unique_indices"):
        y, i = tf.unique(x, out_idx=tf.int64)
        return y if op == "unique_values" else i
    if op == "searchsorted":
        return tf.cast(tf.searchsorted(x, xs[1], side="right" if a["right"] else "left"), tf.int64)
    if op == "bincount":
        return tf.math.bincount(x, weights=xs[1] if len(xs) > 1 else None, minlength=a["min"][0],
                                dtype=xs[1].dtype if len(xs) > 1 else tf.int64)
    if op == "trace":
        return tf.linalg.trace(x)
    if op == "diag_part":
        return tf.linalg.diag_part(x)
    if op == "l2_loss":
        return tf.nn.l2_loss(x)
    if op in ACT_OPS:
        return run_act(op, xs, a)
    if op.startswith("segment_"):
        return SEGMENT[op[8:]](x, tf.constant(ints(a["ids"]), tf.int64))
    if op.startswith("usegment_"):
        return USEGMENT[op[9:]](x, tf.constant(ints(a["ids"]), tf.int64), a["num"][0])
    raise ValueError(op)


# ---------------------------------------------------------------- drawing


class Gen:
    def __init__(self, rng, mode, maxnumel):
        self.rng, self.mode, self.maxnumel = rng, mode, maxnumel
        self.fdt = "f32" if mode == "f32" else "f64"
        # ("I", dtype, shape, array) or ("S", op, operands, attrs), in order
        self.entries = []
        self.vals = []  # (dtype, shape, tensor) of each entry

    def r(self, n):
        return int(self.rng.integers(n))

    def p(self, q):
        return self.rng.random() < q

    def dim(self):
        return 0 if self.p(0.04) else [1, 1, 2, 2, 3, 3, 4, 5][self.r(8)]

    def shape(self, rank=None):
        rank = [0, 1, 1, 2, 2, 2, 3, 3, 4][self.r(9)] if rank is None else rank
        s = [self.dim() for _ in range(rank)]
        while np.prod(s) > self.maxnumel:
            s[self.r(len(s))] = max(1, s[self.r(len(s))] // 2) if self.r(2) else 1
        return tuple(s)

    def floats(self, n):
        kind = self.r(5)
        if kind == 0:  # small integers: ties and zeros
            v = self.rng.integers(-3, 4, n).astype(float)
        elif kind == 1:  # halves
            v = self.rng.integers(-8, 9, n) / 4.0
        else:
            v = np.round(self.rng.normal(0, [0.5, 1.5, 3.0][self.r(3)], n), 4)
        big = 1e30 if self.fdt == "f32" else 1e200
        for i in range(n):
            if self.p(0.03):
                v[i] = [big, -big, 1.0 / big, -0.0, 40.0, -40.0][self.r(6)]
            if self.p(0.008):
                v[i] = [math.nan, math.inf, -math.inf][self.r(3)]
        return v

    def new_input(self, dtype, shape, values=None):
        n = int(np.prod(shape))
        if values is not None:
            v = np.asarray(values)
        elif dtype in FLOATS:
            v = self.floats(n)
        elif dtype in INTS:
            lo, hi = [(-3, 4), (-8, 9), (-100, 101)][self.r(3)]
            v = self.rng.integers(lo, hi, n)
        else:
            v = self.rng.random(n) < 0.5
        v = v.astype({"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
                      "bool": bool}[dtype]).reshape(shape)
        self.entries.append(("I", dtype, tuple(shape), v))
        self.vals.append((dtype, tuple(shape), tf.constant(v, dtype=TF[dtype])))
        return len(self.vals) - 1

    def pick(self, kinds, recent=True):
        """Index of a value whose dtype is in `kinds`, leaning to recent ones."""
        c = [i for i, v in enumerate(self.vals) if v[0] in kinds]
        if not c:
            return None
        if recent and self.p(0.6):
            return c[-1 - self.r(min(3, len(c)))]
        return c[self.r(len(c))]

    def bshape(self, s):
        """A shape broadcasting against `s`: drop leading dims, set some to 1."""
        s = list(s)
        if s and self.p(0.3):
            s = s[self.r(len(s) + 1):]
        s = [1 if self.p(0.3) else d for d in s]
        if self.p(0.15) and len(s) < 4:
            s = [1 + self.r(2)] + s
        if self.p(0.03) and s:  # a mismatch TensorFlow refuses
            s[self.r(len(s))] += 2
        return tuple(s)

    def partner(self, i, kinds):
        """A second operand for value `i`: an existing one of the same shape
        or a broadcasting one, else a new input."""
        d, s, _ = self.vals[i]
        c = [j for j, v in enumerate(self.vals) if v[0] == d and v[1] == s and j != i]
        if c and self.p(0.4):
            return c[self.r(len(c))]
        return self.new_input(d, self.bshape(s))

    def axis(self, rank, extra=0):
        n = rank + extra
        if n == 0 or self.p(0.02):
            return n + self.r(2)  # out of range
        a = self.r(n)
        return a - n if self.p(0.4) else a

    def axes(self, rank):
        if self.p(0.15):
            return "all"
        k = self.r(rank + 1)
        ax = list(self.rng.permutation(rank)[:k])
        ax = [int(a) - rank if self.p(0.3) else int(a) for a in ax]
        if self.p(0.02) and ax:
            ax.append(ax[0])  # a repeated axis
        return ax


def draw_step(g):
    """One step: (op, operands, attrs)."""
    fl, nums = g.fdt, FLOATS + INTS
    r = g.r(100)
    if r < 18:
        i = g.pick(FLOATS)
        return ([*UNARY_F][g.r(len(UNARY_F))], [i], {})
    if r < 22:
        i = g.pick(INTS)
        if i is None:
            return None
        return ([*UNARY_I][g.r(len(UNARY_I))], [i], {})
    if r < 38:
        i = g.pick(nums)
        dt = g.vals[i][0]
        ops = [*BINARY_NUM] + ([*BINARY_F] if dt in FLOATS else [*BINARY_I])
        op = ops[g.r(len(ops))]
        if op in ("floor_div", "floor_mod", "truncate_div", "pow") and dt in INTS and g.p(0.8):
            # mostly nonzero divisors, non-negative exponents
            s = g.bshape(g.vals[i][1])
            v = g.rng.integers(1, 6, int(np.prod(s)))
            j = g.new_input(dt, s, v if op == "pow" else v * g.rng.choice([-1, 1], v.size))
            return (op, [i, j], {})
        j = g.partner(i, [dt])
        return (op, [i, j] if g.p(0.8) else [j, i], {})
    if r < 42:
        i = g.pick(nums)
        return ([*COMPARE][g.r(6)], [i, g.partner(i, None)], {})
    if r < 44:
        i = g.pick(["bool"])
        if i is None:
            return None
        if g.p(0.3):
            return ("logical_not", [i], {})
        return ([*LOGICAL][g.r(3)], [i, g.partner(i, None)], {})
    if r < 54:
        i = g.pick(nums + ("bool",))
        d, s, _ = g.vals[i]
        ops = {"bool": [*REDUCE_B], **{k: [*REDUCE_NUM] for k in INTS}}.get(d, [*REDUCE_NUM, *REDUCE_F])
        return (ops[g.r(len(ops))], [i], {"axes": g.axes(len(s)), "keep": g.r(2)})
    if r < 56:
        i = g.pick(FLOATS)
        s = g.vals[i][1]
        return ("norm", [i], {"axis": [g.axis(len(s))], "keep": g.r(2)})
    if r < 59:
        i = g.pick(nums)
        return (["argmax", "argmin"][g.r(2)], [i], {"axis": [g.axis(len(g.vals[i][1]))]})
    if r < 62:
        i = g.pick(nums + ("bool",))
        d = g.vals[i][0]
        to = [x for x in (fl, "i32", "i64", "bool") if x != d]
        return ("cast", [i], {"to": to[g.r(len(to))]})
    i = g.pick(nums) if g.p(0.85) else g.pick(nums + ("bool",))
    d, s, _ = g.vals[i]
    rank, n = len(s), int(np.prod(s))
    if r < 66:
        dims = []
        m = n
        for _ in range(g.r(4)):
            f = [k for k in (1, 2, 3, 4, 5) if m % k == 0] if m else [0, 1, 2]
            dims.append(f[g.r(len(f))])
            m = m // dims[-1] if dims[-1] else m
        dims.append(m if n else 0)
        g.rng.shuffle(dims)
        if g.p(0.3) and n:
            dims[g.r(len(dims))] = -1 if 0 not in dims else dims[0]
        if g.p(0.03):
            dims.append(2)
        return ("reshape", [i], {"shape": [int(v) for v in dims]})
    if r < 69:
        perm = [int(v) for v in g.rng.permutation(rank)]
        return ("transpose", [i], {"perm": perm})
    if r < 71:
        return ("expand_dims", [i], {"axis": [g.axis(rank, 1)]})
    if r < 72:
        ones = [k for k in range(rank) if s[k] == 1]
        ax = [k - rank if g.p(0.5) else k for k in ones if g.p(0.6)]
        if g.p(0.03):
            ax.append(g.axis(rank))
        return ("squeeze", [i], {"axes": ax})
    if r < 75 and rank:
        k = 2 + g.r(2)
        op = "concat" if g.p(0.6) else "stack"
        ax = g.axis(rank, 1 if op == "stack" else 0)
        args = [i]
        for _ in range(k - 1):
            t = list(s)
            if op == "concat" and g.p(0.7) and -rank <= ax < rank:
                t[ax] = g.r(4)
            if g.p(0.03):
                t[g.r(rank)] += 1
            args.append(g.new_input(d, tuple(t)))
        g.rng.shuffle(args)
        return (op, [int(a) for a in args], {"axis": [ax]})
    if r < 78 and rank:
        ax = g.axis(rank)
        dd = s[ax] if -rank <= ax < rank else 3
        u = g.r(3)
        if u == 0:
            num = [k for k in range(1, 5) if dd % k == 0] if dd else [1]
            num = num[g.r(len(num))] if g.p(0.95) else 3
            return ("split", [i], {"num": [num], "axis": [ax], "pick": [g.r(num)]})
        if u == 1:
            cuts = sorted(g.rng.integers(0, dd + 1, g.r(3)))
            sizes = np.diff([0, *cuts, dd]).tolist()
            return ("split_sizes", [i], {"sizes": sizes, "axis": [ax], "pick": [g.r(len(sizes))]})
        return ("unstack", [i], {"axis": [ax], "pick": [g.r(max(dd, 1))]})
    if r < 81 and rank:
        b = [g.r(k + 1) for k in s]
        z = [g.r(k - bb + 1) for k, bb in zip(s, b)]
        if g.p(0.03):
            z[0] += 1
        return ("slice", [i], {"begin": b, "size": z})
    if r < 84 and rank:
        sl = []
        for k in range(g.r(rank + 1)):
            st = [1, 1, 2, -1, -2][g.r(5)]
            rn = lambda: "n" if g.p(0.4) else str(g.r(2 * s[k] + 3) - s[k] - 1)
            sl.append(f"{rn()}:{rn()}:{st}")
        return ("strided_slice", [i], {"s": sl})
    if r < 87 and rank:
        ax = g.axis(rank)
        dd = s[ax] if -rank <= ax < rank else 2
        batch = 1 if rank >= 2 and g.p(0.2) and ax not in (0, -rank) else 0
        ish = (s[0],) * batch + g.shape(g.r(3))
        ni = int(np.prod(ish))
        if batch and -rank <= ax < rank and (ax % rank) == 0:
            batch = 0
        idx = g.rng.integers(0, max(dd, 1), ni) if dd else np.zeros(ni, int)
        if g.p(0.03) and ni:
            idx[0] = dd + 1
        return ("gather", [i], {"idx": ints(idx), "ishape": list(ish), "axis": [ax], "batch": [batch]})
    if r < 89:
        m = [1 + g.r(2) if g.p(0.7) else g.r(3) for _ in s]
        if np.prod(m) * n > 4 * g.maxnumel:
            m = [1] * rank
        return ("tile", [i], {"mult": m})
    if r < 92:
        mode = ["CONSTANT", "REFLECT", "SYMMETRIC"][g.r(3)]
        lim = lambda k: {"CONSTANT": 2, "REFLECT": max(k - 1, 0), "SYMMETRIC": k}[mode]
        pads = [g.r(min(lim(k), 2) + 1) for k in s for _ in (0, 1)]
        if g.p(0.03) and pads:
            pads[0] = 5
        a = {"pads": pads, "mode": mode}
        if mode == "CONSTANT":
            a["value"] = [[0.0, 1.5, -2.0][g.r(3)] if d in FLOATS else 0]
        return ("pad", [i], a)
    if r < 94:
        ax = [int(k) - rank if g.p(0.4) else int(k) for k in g.rng.permutation(rank)[: g.r(rank + 1)]]
        return ("reverse", [i], {"axes": ax})
    if r < 96 and rank:
        k = 1 + g.r(2)
        ax = [g.axis(rank) for _ in range(k)]
        return ("roll", [i], {"shift": [g.r(9) - 4 for _ in ax], "axes": ax})
    if r < 97:
        t = [(1 + g.r(3)) if k == 1 and g.p(0.5) else k for k in s]
        if len(t) < 4 and g.p(0.4):
            t = [1 + g.r(3)] + t
        return ("broadcast_to", [i], {"shape": t})
    if r < 98:
        c = g.pick(["bool"])
        if c is None or g.p(0.3):
            c = g.new_input("bool", g.bshape(s))
        return ("where", [c, i, g.partner(i, None)], {})
    return None


def draw_more_step(g):
    """Steps of `more` campaigns: nd gathers and scatters, masks, unique,
    searchsorted, bincount, band_part, trace, diag_part, l2_normalize,
    l2_loss."""
    r = g.r(12)
    i = g.pick(FLOATS + INTS) if g.p(0.8) else g.pick(FLOATS)
    d, s, _ = g.vals[i]
    rank, n = len(s), int(np.prod(s))
    if r < 4 and rank:
        k = 1 + g.r(rank)
        ish = g.shape(g.r(3)) + (k,)
        m = int(np.prod(ish[:-1]))
        idx = np.stack([g.rng.integers(0, max(s[j], 1), m) for j in range(k)], -1) if m else np.zeros((0, k), int)
        if g.p(0.03) and m:
            idx[0, 0] = s[0] + g.r(2) if g.p(0.5) else -1
        a = {"idx": ints(idx.reshape(-1)), "ishape": list(ish)}
        if r == 0:
            return ("gather_nd", [i], a)
        upd = tuple(ish[:-1]) + tuple(s[k:])
        if r == 1:
            u = g.new_input(d, upd)
            return ("scatter_nd", [u], {**a, "shape": list(s)})
        if r == 3:  # unique index tuples: TensorFlow's update of duplicates is unordered
            flat = [tuple(t) for t in idx.reshape(m, k)]
            keep = [j for j in range(m) if flat[j] not in flat[:j]]
            idx = idx.reshape(m, k)[keep]
            a = {"idx": ints(idx.reshape(-1)), "ishape": [len(keep), k]}
            upd = (len(keep),) + tuple(s[k:])
        u = g.new_input(d, upd)
        return (["", "", "tensor_scatter_add", "tensor_scatter_update"][r], [i, u], a)
    if r == 4 and d in FLOATS:
        ax = [int(v) for v in g.rng.permutation(rank)[: g.r(rank + 1)]] if rank else []
        return ("l2_normalize", [i], {"axes": ax, "eps": [[1e-12, 0.5, 0.0][g.r(3)]]})
    if r == 5 and rank >= 2:
        return ("band_part", [i], {"lower": [g.r(4) - 1], "upper": [g.r(4) - 1]})
    if r == 6 and rank:
        k = 1 + g.r(rank)
        m = g.new_input("bool", s[:k])
        return ("boolean_mask", [i, m], {})
    if r == 7:
        return ("argwhere", [i], {})
    if r == 8 and rank == 1:
        return (["unique_values", "unique_indices"][g.r(2)], [i], {})
    if r == 9 and rank and d in FLOATS + INTS:
        srt = g.new_input(d, s, np.sort(g.vals[i][2].numpy(), axis=-1))
        v = g.new_input(d, s[:-1] + (g.dim(),))
        return ("searchsorted", [srt, v], {"right": g.r(2)})
    if r == 10:
        c = g.pick(INTS)
        if c is None:
            return None
        cs = g.vals[c][1]
        a = {"min": [g.r(4)]}
        if g.p(0.5):
            return ("bincount", [c, g.new_input(g.fdt, cs)], a)
        return ("bincount", [c], a)
    if r == 11 and rank >= 2:
        return (["trace", "diag_part", "l2_loss"][g.r(3)], [i], {})
    if r == 11 and d in FLOATS:
        return ("l2_loss", [i], {})
    return None


MORE = False
ACT_STEPS = False


def draw_float_step(g):
    """Steps on floats and their shapes: matmul, einsum, softmaxes, scans,
    clips, sorts, one_hot, segments."""
    r = g.r(100)
    i = g.pick(FLOATS)
    d, s, _ = g.vals[i]
    rank = len(s)
    if r < 18:
        if rank < 2:
            i = g.new_input(d, g.shape(2 + g.r(2)))
            d, s, _ = g.vals[i]
            rank = len(s)
        ta, tb = g.r(2), g.r(2)
        m, k = (s[-1], s[-2]) if ta else (s[-2], s[-1])
        n = g.dim() if g.p(0.9) else 3
        if g.p(0.03):
            k += 1
        batch = list(g.bshape(s[:-2])) if rank > 2 else ([] if g.p(0.7) else [2])
        bs = batch + ([n, k] if tb else [k, n])
        j = g.new_input(d, tuple(bs))
        return ("matmul", [i, j], {"ta": ta, "tb": tb})
    if r < 26:
        specs = {0: ["->"], 1: ["i->", "i->i", "i,i->", "i,j->ij"], 2: ["ij->ji", "ij->", "ij->j", "ij,jk->ik", "ij,ij->i", "ij,kj->ik"],
                 3: ["bij,bjk->bik", "bij->bji", "bij->jb", "bij,bik->jk"], 4: ["abcd->dcba", "abcd,abde->abce"]}.get(rank)
        if specs is None:
            return None
        sp = specs[g.r(len(specs))]
        ins, out = sp.split("->")
        ops = ins.split(",")
        args = [i]
        if len(ops) == 2:
            dims = dict(zip(ops[0], s))
            t = tuple(dims.get(c, g.dim()) for c in ops[1])
            args.append(g.new_input(d, t))
        if rank == 2 and s[0] == s[1] and g.p(0.3):
            sp = ["ii->i", "ii->"][g.r(2)]
        return ("einsum", args, {"spec": sp})
    if r < 36 and rank:
        return (["softmax", "log_softmax"][g.r(2)], [i], {"axis": [g.axis(rank)]})
    if r < 50 and rank:
        return (["cumsum", "cumprod"][g.r(2)], [i], {"axis": [g.axis(rank)], "excl": g.r(2), "rev": g.r(2)})
    if r < 56:
        lo = [-1.0, 0.0, 0.5, -2.5][g.r(4)]
        return ("clip", [i], {"lo": [lo], "hi": [lo + [0.0, 1.0, 3.0][g.r(3)]]})
    if r < 70 and rank:
        ax = g.axis(rank)
        u = g.r(4)
        if u == 0:
            return ("sort", [i], {"axis": [ax], "desc": g.r(2)})
        if u == 1:
            return ("argsort", [i], {"axis": [ax], "desc": g.r(2)})
        k = g.r(s[-1] + 1) if g.p(0.95) else s[-1] + 1
        return (["top_k_values", "top_k_indices"][u - 2], [i], {"k": [k]})
    if r < 78:
        j = g.pick(INTS)
        if j is None or g.p(0.3):
            j = g.new_input(["i32", "i64"][g.r(2)], g.shape(g.r(3)))
        depth = g.r(5)
        return ("one_hot", [j], {"depth": [depth], "on": [[1.0, 2.5][g.r(2)]], "off": [[0.0, -1.0][g.r(2)]],
                                  "axis": [-1 if g.p(0.5) else g.r(len(g.vals[j][1]) + 1)], "to": g.fdt})
    if rank:
        kind = [*SEGMENT][g.r(5)]
        n = s[0]
        if g.p(0.5):
            ids = sorted(g.rng.integers(0, 4, n).tolist())
            if g.p(0.03) and n > 1:
                ids = ids[::-1]
            return ("segment_" + kind, [i], {"ids": ids})
        num = g.r(5)
        ids = g.rng.integers(-1 if g.p(0.2) else 0, max(num, 1), n).tolist()
        return ("usegment_" + kind, [i], {"ids": ids, "num": [num]})
    return None


# ---------------------------------------------------------------- output


def fmt_vals(a, dtype):
    a = np.asarray(a).reshape(-1)
    if a.size == 0:
        return "."
    if dtype in FLOATS:
        return ",".join(repr(float(v)) for v in a)
    return ",".join(str(int(v)) for v in a)


def fmt_shape(s):
    return ",".join(str(int(d)) for d in s) if len(s) else "-"


def fmt_attrs(a):
    if not a:
        return "-"
    out = []
    for k, v in a.items():
        if isinstance(v, (list, tuple)):
            v = ",".join(repr(float(x)) if isinstance(x, float) else str(x) for x in v)
        out.append(f"{k}={v}")
    return ";".join(out)


def program(seed, pid, maxnumel):
    rng = np.random.default_rng([seed, pid])
    mode = ["f64"] * 6 + ["f32"] * 2 + ["int"] * 2
    g = Gen(rng, mode[int(rng.integers(10))], maxnumel)
    for _ in range(1 + g.r(2)):
        g.new_input(g.fdt, g.shape())
    if g.mode == "int":
        for _ in range(1 + g.r(2)):
            g.new_input(["i32", "i64"][g.r(2)], g.shape())
    nsteps, err, tries, steps = 2 + g.r(8), None, 0, 0
    while steps < nsteps and tries < 60:
        tries += 1
        st = draw_step(g) if g.p(0.6) else draw_float_step(g)
        if MORE and g.p(0.3):
            st = draw_more_step(g)
        if ACT_STEPS and g.p(0.3):
            st = draw_act_step(g)
        if st is None:
            continue
        op, args, attrs = st
        try:
            y = run_op(op, [g.vals[a][2] for a in args], attrs)
        except (tf.errors.OpError, ValueError, TypeError, IndexError) as e:
            if g.p(0.7):
                continue
            g.entries.append(("S", op, list(args), attrs))
            err = " ".join(str(e).split())[:160] or type(e).__name__
            break
        if int(np.prod(y.shape)) > 8 * g.maxnumel:
            continue
        g.entries.append(("S", op, list(args), attrs))
        g.vals.append((NAME[y.dtype], tuple(y.shape), y))
        steps += 1
    return g, err


def emit(seed, pid, maxnumel, out):
    g, err = program(seed, pid, maxnumel)
    lines = [f"P {pid} {g.mode}"]
    used = {a for e in g.entries if e[0] == "S" for a in e[2]}
    leaves = [k for k, e in enumerate(g.entries) if e[0] == "S" and k not in used]
    # the whole program again under a tape, from the inputs
    xs, vals = [], []
    with tf.GradientTape() as tape:
        for k, e in enumerate(g.entries):
            if e[0] == "I":
                _, d, s, v = e
                lines.append(f"I {d} {fmt_shape(s)} {fmt_vals(v, d)}")
                x = tf.constant(v, dtype=TF[d])
                if d in FLOATS:
                    tape.watch(x)
                    xs.append(x)
                vals.append(x)
                continue
            _, op, args, attrs = e
            lines.append(f"S {op} {','.join(map(str, args))} {fmt_attrs(attrs)}")
            if err is not None and k == len(g.entries) - 1:
                lines.append(f"E {err}")
                break
            y = run_op(op, [vals[a] for a in args], attrs)
            vals.append(y)
            lines.append(f"V {NAME[y.dtype]} {fmt_shape(y.shape)} {fmt_vals(y.numpy(), NAME[y.dtype])}")
        if err is None:
            loss = tf.constant(0.0, TF[g.fdt])
            for k in leaves:
                y = vals[k]
                if y.dtype.is_floating:
                    w = 1.0 + 0.5 * np.arange(int(np.prod(y.shape)))
                    y = tf.cast(y, loss.dtype)
                    loss = loss + tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(w, loss.dtype))
    if err is None:
        lines.append("L " + (",".join(map(str, leaves)) or "-"))
        try:
            grads = tape.gradient(loss, xs)
        except (tf.errors.OpError, ValueError, TypeError, LookupError) as e:
            # TensorFlow's gradient itself failing (or none registered:
            # `Unique` of floats) (a bug of its: there is
            # one to compute); the program's gradients are not compared
            lines.append("X " + " ".join(str(e).split())[:160])
            grads = []
        for x, gr in zip(xs, grads):
            gr = None if gr is None else tf.convert_to_tensor(gr).numpy()  # (IndexedSlices)
            lines.append("G " + ("none" if gr is None else fmt_vals(gr, NAME[x.dtype])))
    out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    maxnumel = int(sys.argv[3]) if len(sys.argv) > 3 else 48
    words = sys.argv[4].split(",") if len(sys.argv) > 4 else []
    MORE, ACT_STEPS = "more" in words, "act" in words
    for pid in range(count):
        emit(seed, pid, maxnumel, sys.stdout)
