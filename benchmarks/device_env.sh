# Sourced by benchmarks/*_device_run.sh, from the repo root on the GPU machine: the Python set-up
# every device call needs, in one place. Installs the structlog/pycapnp/ml_dtypes/crc32c wheels of WHL
# (default .whl) into /tmp/site, puts that and the repo root on PYTHONPATH and the kernel cache
# under /tmp; the calling script exits 1 if the wheels do not install.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
# The packages the pods need beyond the image's: a missing one is named here, before any test. A
# pod refuses to start without crc32c (pod/rpc/transfer.py), which the image lacks: carry its wheel
# (crc32c==2.9.post0, cp312 manylinux, as in third_party/requirements.lock).
for name in capnp structlog ml_dtypes crc32c; do
  python3 -c "import $name" 2>/dev/null || echo "device_env: python package $name is missing: carry its wheel in ${WHL:-.whl}" >&2
done
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
# `cmd | stamp`: each line of cmd's output with the seconds since stamp started in front of it.
stamp() { python3 -c 'import sys, time
t0 = time.time()
for line in sys.stdin: sys.stdout.write(f"{time.time() - t0:8.3f} {line}"); sys.stdout.flush()'; }
