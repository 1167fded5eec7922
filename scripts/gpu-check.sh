#!/usr/bin/env bash
# The GPU check (issue 29): the CUDA backend's tests and the bench on a
# machine with an NVIDIA GPU, beside PyTorch on the same GPU.
#
# The GPU machine has no Rust toolchain, so the binaries are built here and
# carried there:
#
#   scripts/gpu-check.sh build    # here: .gpu-check/ (the GPU tests, the bench)
#   scripts/gpu-check.sh run      # there, from the repository root, with .gpu-check/
#
# `run` finds the CUDA libraries (the driver's libcuda, and libnvrtc and
# libcublas from the CUDA toolkit or its Python packages), prints the GPU,
# runs the GPU tests (every op against the CPU, mlp_step, cnn_step and the
# digits example trained on both), the digits example on the GPU, then the
# bench's workloads on the GPU, eager and traced, and the same
# workloads in PyTorch on the GPU (scripts/gpu_peers_torch.py). Sized to
# finish in a few minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
out=.gpu-check
case "${1:-}" in
build)
    set -e
    target=${CARGO_TARGET_DIR:-target}
    cargo build --release -p gradtape-bench --features cuda
    cargo build --release -p gradtape-examples --example digits --features cuda
    bin=$(cargo test --release -p gradtape-tests --features cuda --test gpu --no-run --message-format=json 2>/dev/null |
        python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gpu":
        print(m["executable"])' | tail -1)
    mkdir -p "$out"
    cp "$bin" "$out/gpu-tests"
    cp "$target/release/gradtape-bench" "$out/gradtape-bench"
    cp "$target/release/examples/digits" "$out/digits"
    strip "$out/gpu-tests" "$out/gradtape-bench" "$out/digits" 2>/dev/null || true
    grep -qx "/$out/" .git/info/exclude 2>/dev/null || echo "/$out/" >> .git/info/exclude
    ls -la "$out"
    ;;
run)
    libs=""
    for name in libnvrtc.so libcublas.so libcublasLt.so; do
        d=$(find /usr/local /opt /usr/lib /usr/lib64 \( -name "$name" -o -name "$name.1[0-9]*" \) 2>/dev/null | head -1 | xargs -r dirname)
        [ -n "$d" ] && libs="$libs:$d"
    done
    export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "== GPU tests"
    timeout "${GPU_TESTS_TIMEOUT:-150}" "$out/gpu-tests" --test-threads=1 --nocapture
    echo "== the digits example on the GPU"
    timeout 60 "$out/digits" --device cuda:0
    echo "== gradtape on the GPU"
    for w in ${GPU_WORKLOADS:-mlp_step rnn_grad elementwise jacobian hessian cnn_step mlp_step_layers transformer_step}; do
        timeout 40 "$out/gradtape-bench" --device cuda:0 "$w"
    done
    echo "== PyTorch on the GPU"
    timeout 90 python3 scripts/gpu_peers_torch.py ${GPU_WORKLOADS:-}
    ;;
*)
    echo "usage: scripts/gpu-check.sh build|run" >&2
    exit 2
    ;;
esac
