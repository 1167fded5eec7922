"""Writes the .npy fixtures of tests/nn/io.rs with NumPy (np.save).

Run: ~/.cache/gradtape-peers/bin/python npy_fixtures.py
"""
import os
import numpy as np

out = os.path.join(os.path.dirname(__file__), "..", "data", "npy")
os.makedirs(out, exist_ok=True)
arrays = {
    "f32_2x3": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
    "f64_scalar": np.array(3.25),
    "i64_vec": np.array([-3, 0, 7], dtype=np.int64),
    "i32_2x3x4": np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 5,
    "bool_2x2": np.array([[True, False], [False, True]]),
    "c64_vec": np.array([1 + 2j, -0.5j], dtype=np.complex64),
    "c128_vec": np.array([0.25 - 1j], dtype=np.complex128),
    "f64_empty": np.zeros((0, 3)),
    "f64_fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "f8_big_endian": np.arange(4, dtype=">f8") + 0.5,
    "u1_unsupported": np.arange(3, dtype=np.uint8),
}
for name, a in arrays.items():
    np.save(os.path.join(out, name + ".npy"), a)
print(np.__version__, sorted(arrays))
