# One device call (nvidia-h200), from the repo root with the structlog/pycapnp/ml_dtypes wheels in .whl/:
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee $OUT/bench.log
timeout 170 python3 -m pytest tests/cuda/test_cuda_tc_gpu.py -q -p no:cacheprovider -x 2>&1 | tee $OUT/gpu_tests.log
timeout 280 python3 benchmarks/leaf_tc_bench.py --only matmul,matmul_f16 --out $OUT/leaf-tc.json --latest $OUT/leaf-latest.json 2>&1 | tee -a $OUT/bench.log
# -> leaf-tc-h200-2026-12-01-mnmajor.json (leaf-tc.json), .log (bench.log), -gpu-tests.log;
#    its leaf-latest.json rows replaced the bf16/f16 matmul rows of benchmarks/results/leaf-latest.json.
