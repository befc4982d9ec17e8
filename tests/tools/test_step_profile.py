"""tools/step_profile.py: the products it replays are the step's, and its parts add up."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sparktrain.model.build import build_model
from sparktrain.model.config import SCALES
from sparktrain.train.bench import synthetic_batch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import step_profile  # noqa: E402


@pytest.mark.parametrize("scale", ["tiny", "large"])
def test_the_recorded_products_are_the_steps_arithmetic(scale):
    cfg = SCALES[scale]
    model = build_model(cfg)
    params = model.init_params(1, b"profile")
    batch = synthetic_batch(2, cfg.seq_len)
    products = step_profile.record_products(model, params, batch)
    flops = sum(step_profile.product_flops(a, b) for (a, _), (b, _) in products)
    # flops_per_token counts 6 x params plus attention's mixing: the products are nearly all
    assert 0.85 < flops / (model.flops_per_token() * 2 * cfg.seq_len) < 1.05
    # recording leaves the model's results alone: same bytes with and without the tracer
    loss, grads = model.loss_and_grads(params, batch)
    loss2, grads2 = model.loss_and_grads(params, batch)
    assert loss == loss2 and all(np.array_equal(grads[n], grads2[n]) for n in grads)
    assert not any(type(g) is not np.ndarray for g in grads.values())


def test_a_matrix_times_a_vector_counts_one_column():
    assert step_profile.product_flops((8, 4), (4,)) == 2 * 8 * 4
    assert step_profile.product_flops((3, 8, 4), (4, 5)) == 2 * 3 * 8 * 4 * 5


def test_the_tool_prints_its_table_and_refuses_bad_counts():
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "step_profile.py"), "--scale",
                          "tiny", "--steps", "2"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for part in ("attention", "mlp", "between the layers", "optimizer update",
                 "products alone (replayed)"):
        assert part in run.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "tools" / "step_profile.py"), "--steps",
                          "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_the_peers_benchmark_refuses_a_tree_without_its_venv(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_peers.py"), "--tree",
                          f"x={tmp_path}", "--rounds", "1"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "Traceback" not in run.stderr
