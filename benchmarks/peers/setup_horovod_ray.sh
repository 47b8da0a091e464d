#!/usr/bin/env bash
# The Horovod-gloo peer with Ray: the peer environment of setup_horovod_torch.sh (stock Horovod
# 0.28.1 built with PyTorch and gloo) plus Ray at the pin of requirements/cluster_engines.txt and
# pytest (Horovod's own test_ray.py), so that Horovod's Ray tests run on stock Horovod beside
# herring (benchmarks/cluster_engines/horovod_ray_suite.py). Idempotent; prints the peer's python
# on its last line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$(bash "$ROOT/benchmarks/peers/setup_horovod_torch.sh" | tail -n 1)"
pin() { grep -hE "^$1==" "$ROOT"/requirements/*.txt | head -n 1; }
RAY="$(grep -hE '^ray\[train\]==' "$ROOT"/requirements/cluster_engines.txt | head -n 1)"
RAY_VERSION="${RAY##*==}"
ready() {
  "$PY" -c "import ray, grpc, horovod.ray, pytest, sys; sys.exit(ray.__version__ != '$RAY_VERSION')" >/dev/null 2>&1
}
if ! ready; then
  echo "[horovod-ray] installing $RAY into the peer environment" >&2
  "$PY" -m pip install -q "$RAY" $(pin grpcio) $(pin pytest) 2>&1 | grep -v "^WARNING: Location" >&2 || true
  ready || { echo "[horovod-ray] horovod.ray does not import in the peer environment" >&2; exit 1; }
fi
echo "$PY"
