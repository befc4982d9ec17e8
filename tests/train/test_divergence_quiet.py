"""A diverging run says so in one line: no numpy RuntimeWarning comes before it,
from the main process or from the shard workers."""
import pytest

from sparkhelp import ROOT, run_spark


@pytest.mark.parametrize("extra", [[], ["--shards", "2", "--workers", "2"]])
def test_divergence_is_one_line_without_runtime_warnings(tmp_path, extra):
    rc, _, err = run_spark(["train", "--dataset", ROOT / "data/train/dataset.jsonl",
                            "--out", tmp_path / "o", "--lr", "1e30", "--outer", "2",
                            "--inner", "2", *extra], cwd=tmp_path)
    assert rc == 1, err
    assert "RuntimeWarning" not in err and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("spark: error:")]
    assert len(errors) == 1 and "training diverged" in errors[0]
    assert err.rstrip().splitlines()[-1] == errors[0]
