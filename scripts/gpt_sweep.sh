#!/usr/bin/env bash
# The `gpt` example's step at eleven model shapes (the last three word-piece
# vocabularies of 2048-32768 tokens: the output projection, cross-entropy and
# the table's AdamW dominate), gradtape (eager and traced)
# beside its peers (torch eager, jax.jit, tf.function): the median time per
# step of 40 steps (the first 5 of the peers' left out; gradtape's first
# traced call), each run alone under QUIET (a command that pauses other
# work while it runs; none by default), one line per shape
# with traced / the fastest peer and eager / torch.
#
#   GPT=target/release/examples/gpt PY=python3 QUIET=/work/quiet.sh scripts/gpt_sweep.sh [ROUNDS]
#
# GPT: the gpt example's binary (built with
# `cargo build --release -p gradtape-examples --example gpt`); PY: a Python
# with torch, jax and tensorflow. Not a test: the numbers go in
# docs/compiler-notes.md.
set -u
cd "$(dirname "$0")/.."
GPT=${GPT:-target/release/examples/gpt}
PY=${PY:-python3}
QUIET=${QUIET:-}
ROUNDS=${1:-1}
STEPS=${STEPS:-40}
configs=(
  "--width 128 --heads 4 --layers 2 --context 64 --batch 16"
  "--width 256 --heads 8 --layers 2 --context 128 --batch 8"
  "--width 64 --heads 2 --layers 6 --context 32 --batch 32"
  "--width 128 --heads 4 --layers 2 --context 256 --batch 4"
  "--width 384 --heads 6 --layers 4 --context 64 --batch 8"
  "--width 512 --heads 8 --layers 4 --context 128 --batch 8"
  "--width 128 --heads 4 --layers 2 --context 64 --batch 16 --llama"
  "--width 256 --heads 8 --layers 2 --context 128 --batch 8 --llama"
  "--width 256 --heads 8 --layers 2 --context 128 --batch 8 --vocab 2048"
  "--width 256 --heads 8 --layers 2 --context 128 --batch 8 --vocab 8192"
  "--width 256 --heads 8 --layers 2 --context 128 --batch 8 --vocab 32768"
)
ms() { grep -o "$1 [0-9.]* ms" | tail -1 | grep -o "[0-9.]*" | head -1; }
for r in $(seq "$ROUNDS"); do
  for c in "${configs[@]}"; do
    # shellcheck disable=SC2086
    e=$($QUIET "$GPT" --steps "$STEPS" --generate 0 --eager $c 2>&1 | ms eager)
    t=$($QUIET "$GPT" --steps "$STEPS" --generate 0 $c 2>&1 | ms traced)
    p=$($QUIET "$PY" scripts/gpt_torch.py --steps "$STEPS" $c 2>&1 | ms "median step")
    j=$($QUIET "$PY" scripts/gpt_jax.py --steps "$STEPS" $c 2>&1 | ms "median step")
    f=$($QUIET "$PY" scripts/gpt_tf.py --steps "$STEPS" $c 2>&1 | ms "median step")
    echo "$r|$c|$e|$t|$p|$j|$f" | awk -F'|' '{
      if ($3 == "" || $4 == "" || $5 == "" || $6 == "" || $7 == "") { print "round " $1 " | " $2 " | a run failed: " $0; next }
      best = $5; if ($6 < best) best = $6; if ($7 < best) best = $7;
      printf "round %s | %s | eager %s traced %s | torch %s jax %s tf %s | traced/fastest %.2f eager/torch %.2f\n",
        $1, $2, $3, $4, $5, $6, $7, $4 / best, $3 / $5 }'
  done
done
