"""`spark sweep` is alive while its points run: with no point finished for a while, a line
says how many run and wait (a newcomer saw nothing for 3 minutes after `running 4
point(s)`), and every point still comes back as it finishes."""
from __future__ import annotations

import time

import pytest

distributed = pytest.importorskip("distributed")

from sparktrain.sweep.driver import finished  # noqa: E402


def test_a_line_while_no_point_finishes_and_every_point_comes_back():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        futures = [client.submit(time.sleep, 1.2, key=f"point-{i}", pure=False)
                   for i in range(2)]
        said: list[str] = []
        came = list(finished(client, futures, said.append, every=0.4))
    assert sorted(f.key for f in came) == ["point-0", "point-1"]
    assert said, "no heartbeat while the points ran"
    assert said[0].startswith("1 point(s) running, 1 waiting for a worker, 0 finished ("), said
    assert any("0 waiting for a worker, 1 finished" in line for line in said), said
