#!/usr/bin/env bash
# Where the library's release build spends its time (the build loop of
# issue 27): run it before and after a change that should make the build
# faster, on a machine left otherwise idle.
#
#   scripts/build-time.sh            # target folder target/build-time
#   scripts/build-time.sh DIR        # another target folder, relative to the
#                                    # repository root (kept between runs)
#
# 1. Builds the dependencies, then rebuilds the `gradtape` library alone
#    (release profile, the repository's settings) and prints its wall time
#    and rustc's phases from `-Z time-passes`: the front end (type and
#    borrow checking, MIR and the crate's metadata) runs on one core, then
#    LLVM optimises the codegen units (`LLVM_passes`) and, with the
#    default thin-local LTO, optimises and compiles them again after
#    importing small functions across units (`LLVM_thinlto`).
#    `-Z` flags need `RUSTC_BOOTSTRAP=1`; it is set for this measurement
#    only and changes nothing in what is built.
# 2. Lists the library's codegen units by machine-code size, with the
#    modules that fill each (rustc puts every instance of a generic function
#    in the unit of the module that defines it, so one module's generic
#    kernels can make one unit much larger than the rest).
#
# Needs `nm` and `ar` (binutils) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p "${1:-target/build-time}"
target=$(cd "${1:-target/build-time}" && pwd)
export CARGO_TARGET_DIR=$target

echo "== dependencies"
cargo build -q --release -p gradtape
echo "== the gradtape library, rebuilt alone"
touch crates/gradtape/src/lib.rs
log=$target/time-passes.log
start=$(date +%s.%N)
RUSTC_BOOTSTRAP=1 cargo rustc -q --release -p gradtape --lib -- -Ztime-passes >"$log" 2>&1
end=$(date +%s.%N)
python3 - "$start" "$end" "$log" <<'PY'
import re, sys
start, end, log = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print(f"wall: {end - start:.1f} s")
for line in open(log):
    m = re.match(r"time:\s+([\d.]+);.*\t(\S+)$", line.rstrip())
    if m and float(m.group(1)) >= 0.5:
        print(f"  {float(m.group(1)):7.1f} s  {m.group(2)}")
PY

echo "== codegen units by machine code"
rlib=$(ls -t "$target"/release/deps/libgradtape-*.rlib | head -1)
units=$(mktemp -d)
trap 'rm -rf "$units"' EXIT
(cd "$units" && ar x "$rlib")
for o in "$units"/*.o; do
    nm -S --size-sort -C "$o" 2>/dev/null | python3 -c '
import collections, re, sys
sizes, total = collections.Counter(), 0
for line in sys.stdin:
    parts = line.split(None, 3)
    if len(parts) < 4:
        continue
    size, name = int(parts[1], 16), re.sub(r"<.*", "", parts[3].strip().lstrip("<"))
    path = name.split("::")
    sizes["::".join(path[:4] if path[0] == "gradtape" else path[:2])] += size
    total += size
top = ", ".join(f"{k} {v // 1000} KB" for k, v in sizes.most_common(3))
print(f"{total // 1000:6d} KB  {sys.argv[1]}: {top}")
' "$(basename "$o" .rcgu.o | sed 's/.*-//')"
done | sort -rn
