#!/usr/bin/env bash
# The Horovod-gloo peer with pyspark: the peer environment of setup_horovod_torch.sh (stock Horovod
# 0.28.1 built with PyTorch and gloo) plus the pyspark and py4j that requirements/cluster_engines.txt
# pins, so that horovod.spark.run can run stock Horovod beside herring (benchmarks/cluster_engines,
# Horovod's own test_spark.py). Idempotent; prints the peer's python on its last line. The first
# run installs pyspark from pip's cache when the project's .venv already installed it (seconds),
# otherwise downloads it (about 450 MB).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$(bash "$ROOT/benchmarks/peers/setup_horovod_torch.sh" | tail -n 1)"
pin() { grep -hE "^$1==" "$ROOT"/requirements/*.txt | head -n 1; }
# Horovod's test_spark.py also imports mock and pytest (its test utilities).
want="$(pin pyspark) $(pin py4j) $(pin mock) $(pin pytest)"
if ! "$PY" -c "import pyspark, sys; sys.exit(pyspark.__version__ != '$(pin pyspark | cut -d= -f3)')" 2>/dev/null; then
  echo "[horovod-spark] installing $want into the peer environment" >&2
  "$PY" -m pip install -q $want 2>&1 | grep -v "^WARNING: Location" >&2 || true
  "$PY" -c "import pyspark, horovod.spark" || { echo "[horovod-spark] pyspark did not install" >&2; exit 1; }
fi
echo "$PY"
