#!/usr/bin/env bash
# The Horovod-gloo peer with pyspark: the peer environment of setup_horovod_torch.sh (stock Horovod
# 0.28.1 built with PyTorch and gloo) plus what horovod.spark needs, at the pins of requirements/
# (pyspark, py4j, and pyarrow, which horovod.spark imports; mock and pytest for Horovod's own
# test_spark.py), so that horovod.spark.run can run stock Horovod beside herring
# (benchmarks/cluster_engines). Idempotent; prints the peer's python on its last line. Installs from
# pip's cache when the project's .venv installed the same pins (seconds), otherwise downloads them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$(bash "$ROOT/benchmarks/peers/setup_horovod_torch.sh" | tail -n 1)"
pin() { grep -hE "^$1==" "$ROOT"/requirements/*.txt | head -n 1; }
PYSPARK_VERSION="$(pin pyspark | cut -d= -f3)"
ready() {
  "$PY" -c "import pyspark, horovod.spark, mock, pytest, sys; sys.exit(pyspark.__version__ != '$PYSPARK_VERSION')" \
    >/dev/null 2>&1
}
if ! ready; then
  echo "[horovod-spark] installing pyspark==$PYSPARK_VERSION into the peer environment" >&2
  "$PY" -m pip install -q $(pin pyspark) $(pin py4j) $(pin pyarrow) $(pin mock) $(pin pytest) 2>&1 \
    | grep -v "^WARNING: Location" >&2 || true
  ready || { echo "[horovod-spark] horovod.spark does not import in the peer environment" >&2; exit 1; }
fi
echo "$PY"
