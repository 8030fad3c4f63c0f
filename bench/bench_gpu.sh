#!/usr/bin/env bash
# Every GPU figure of issues #24 (cold starts) and #25 (scale) in one run, as JSON lines (device,
# versions and commit in every record): the relaxed kernels' compile and run times and the exact
# counting kernel up to 10^8 rows (bench_kernels.py), their compile time against the workload's
# size (bench_compile.py), GEM and RAP-softmax on ADULT as whole processes with an empty, a warm
# and no compile cache (bench_latency.py), AIM on the large-clique Bayes-net table (bench_aim.py
# --table bnet9), 8 seeds of PEP, RAP-softmax and GEM as a loop, one mapped program and one
# vmapped program (bench_run_many.py), and exact counts of 10^8 rows by scatter-add and by one-hot
# matmul (bench_counting.py). The readers' figures are the CPU's (bench_reader.py). About 8 minutes on one H100/H200; it needs no GPU (on a
# CPU it measures the CPU, much more slowly) and installs nothing: it uses the machine's JAX.
#
#     bash bench/bench_gpu.sh [OUT.jsonl]      # default bench/results/gpu.jsonl
#     BENCH_GPU_QUICK=1 bash bench/bench_gpu.sh /tmp/smoke.jsonl   # small sizes: a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-bench/results/gpu.jsonl}")"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -c "import jax; print('jax', jax.__version__, jax.devices())"
if [ -n "${BENCH_GPU_QUICK:-}" ]; then
  python bench/bench_kernels.py --quick --out "$out"
  python bench/bench_compile.py --repeats 1 --cases adult-all adult-35 --out "$out"
  python bench/bench_latency.py --cases pep --repeats 1 --out "$out"
  (cd bench && python bench_aim.py --table binary16 --seeds 0 --out "$out")
  (cd bench && python bench_run_many.py --mechanisms pep --seeds 2 --repeats 1 --out "$out")
else
  python bench/bench_kernels.py --repeats 5 --max-rows 1e8 --max-relaxed-rows 1e4 --max-queries 1e6 --out "$out"
  python bench/bench_compile.py --repeats 1 --out "$out"
  python bench/bench_latency.py --cases gem rap-softmax pep --repeats 1 --out "$out"
  (cd bench && python bench_aim.py --table bnet9 --max-cells 10000 --seeds 0 --out "$out")
  (cd bench && python bench_run_many.py --mechanisms pep rap-softmax gem --repeats 3 --out "$out")
  (cd bench && python bench_counting.py --rows 1e7 1e8 --repeats 3 --out "$out")
fi
echo "bench_gpu: wrote $out"
