"""needs_cluster: skips a test where the simulated cluster (tools/simcluster: network namespaces,
shaped links, an sshd per host) cannot run on this machine, saying why. Checked once per session."""

import pytest

from tools.simcluster import cluster

try:
    cluster.check_environment()
    UNAVAILABLE = None
except cluster.ClusterError as e:
    UNAVAILABLE = str(e)
needs_cluster = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"simulated cluster unavailable: {UNAVAILABLE}")
