# Sourced by the benchmark scripts: makes `ladd` and this checkout importable on a machine where the
# checkout is not installed and there is no network (the GPU image): the missing packages come from
# the wheels carried in .whl/, and a stub distribution registers the built-in plugins' entry point.
if ! command -v ladd > /dev/null; then
  if [ -d .whl ] && ! python3 -c "import hydra, omegaconf, vector_quantize_pytorch" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  fi
  mkdir -p /tmp/site/ladd-0.0.0.dist-info
  printf 'Metadata-Version: 2.1\nName: ladd\nVersion: 0.0.0+checkout\n' > /tmp/site/ladd-0.0.0.dist-info/METADATA
  printf '[ladd]\nbuiltin = ladd_plugins\n' > /tmp/site/ladd-0.0.0.dist-info/entry_points.txt
  ln -sfn "$PWD/configs" /tmp/site/ladd_configs
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
  ladd() { python3 -m registry.cli "$@"; }
fi
export PYTHONUNBUFFERED=1
