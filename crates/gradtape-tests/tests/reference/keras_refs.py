"""What the Keras reference scripts here share: the inputs' formula and
the printing of a Rust constant. Imported by the scripts beside it (run
from this directory)."""
import numpy as np


def fill(shape, k):
    """fill(shape, k)[i] = 0.5 * sin(0.7 * i + k), i row-major."""
    n = int(np.prod(shape))
    return (0.5 * np.sin(0.7 * np.arange(n) + k)).reshape(shape)


def show(name, a):
    """`a` as a Rust `pub const NAME: [f64; n]`, with its length above."""
    a = np.asarray(a, dtype=np.float64).ravel()
    print(f"/// {len(a)} values")
    print("pub const " + name.upper() + ": [f64; %d] = [%s];" % (len(a), ", ".join(repr(float(x)) for x in a)))
