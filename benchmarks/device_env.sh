# Sourced by benchmarks/*_device_run.sh, from the repo root on the GPU machine: the Python set-up
# every device call needs, in one place. Installs the structlog/pycapnp/ml_dtypes wheels of WHL
# (default .whl) into /tmp/site, puts that and the repo root on PYTHONPATH and the kernel cache
# under /tmp; the calling script exits 1 if the wheels do not install.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
