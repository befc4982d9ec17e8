"""The loss picture: a valid 800x500 PNG, what the figure holds, same bytes each time,
one-line errors for values it cannot draw, and matplotlib kept out of `spark --help`."""
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from sparktrain.core.errors import SparkError
from sparktrain.eval.plot import (HELDOUT_COLOR, TRAIN_COLOR, heldout_points, render,
                                  scale_label, write_loss_png)
from sparktrain.model.config import SCALES

CURVE = [{"outer": 0, "loss": 5.5, "phase": "start"},
         {"outer": 1, "loss": 4.0, "phase": "after_outer"},
         {"outer": 2, "loss": 3.1, "phase": "after_outer"},
         {"outer": 3, "loss": 2.7, "phase": "after_outer"}]


def rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)], np.uint8)


def pixels(data_path, color: str) -> int:
    img = np.asarray(Image.open(data_path).convert("RGB"))        # (H, W, 3)
    return int((img == rgb(color)).all(axis=-1).sum())


def lines_by_color(ax, color: str):
    return [ln for ln in ax.get_lines() if ln.get_color() == color]


def test_png_is_valid_sized_and_carries_no_version(tmp_path):
    path = tmp_path / "sub" / "loss.png"
    data = write_loss_png(path, CURVE, heldout=[{"outer": 3, "loss": 3.4}],
                          job="job-dry-001", scale="tiny")
    assert path.read_bytes() == data and data[:8] == b"\x89PNG\r\n\x1a\n"
    img = Image.open(path)
    assert img.size == (800, 500)
    assert "Software" not in img.info and b"matplotlib" not in data
    assert pixels(path, TRAIN_COLOR) > 200 and pixels(path, HELDOUT_COLOR) > 50
    plain = write_loss_png(tmp_path / "plain.png", CURVE)
    assert pixels(tmp_path / "plain.png", HELDOUT_COLOR) == 0 and plain != data
    assert [p.name for p in path.parent.iterdir()] == ["loss.png"]  # no temp file left


def test_figure_has_title_labels_curve_and_final_heldout_reference():
    fig = render(CURVE, [(3, 3.4)], job="job-dry-001", scale="tiny")
    [ax] = fig.axes
    assert "job-dry-001" in ax.get_title() and "scale tiny" in ax.get_title()
    assert "outer pass" in ax.get_xlabel() and "loss" in ax.get_ylabel()
    assert ax.get_yscale() == "linear"
    [train] = lines_by_color(ax, TRAIN_COLOR)
    assert list(train.get_xdata()) == [0, 1, 2, 3]
    assert list(train.get_ydata()) == [5.5, 4.0, 3.1, 2.7] and train.get_marker() == "o"
    held = lines_by_color(ax, HELDOUT_COLOR)
    marker = [ln for ln in held if ln.get_marker() == "s"]
    assert [(list(m.get_xdata()), list(m.get_ydata())) for m in marker] == [([3], [3.4])]
    reference = [ln for ln in held if list(ln.get_ydata()) == [3.4, 3.4]]
    assert len(reference) == 1                         # the horizontal line across the axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["training loss, whole dataset (last 2.7)",
                      "held-out loss after the last pass (3.4)"]


def test_heldout_per_pass_is_a_line_and_wide_ranges_go_log():
    fig = render([(0, 500.0), (1, 40.0), (2, 3.0)], [(1, 45.0), (2, 3.5)])
    [ax] = fig.axes
    assert ax.get_yscale() == "log"
    [held] = lines_by_color(ax, HELDOUT_COLOR)
    assert list(held.get_xdata()) == [1, 2] and list(held.get_ydata()) == [45.0, 3.5]
    assert ax.get_title() == "loss per outer pass"


def test_same_curve_same_bytes_in_this_and_a_fresh_process(tmp_path):
    a = write_loss_png(tmp_path / "a.png", CURVE, [(3, 3.4)], job="j", scale="tiny")
    assert write_loss_png(tmp_path / "b.png", CURVE, [(3, 3.4)], job="j", scale="tiny") == a
    code = ("import sys; from sparktrain.eval.plot import write_loss_png; "
            f"write_loss_png(sys.argv[1], {CURVE!r}, [(3, 3.4)], job='j', scale='tiny')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "c.png")], check=True)
    assert (tmp_path / "c.png").read_bytes() == a
    write_loss_png(tmp_path / "one.png", CURVE[:1])            # a lone start point still draws
    assert Image.open(tmp_path / "one.png").size == (800, 500)


@pytest.mark.parametrize("curve, heldout, needle", [
    ([], None, "empty"),
    ([{"outer": 0, "loss": float("nan")}], None, "finite"),
    ([{"outer": 0, "loss": float("inf")}], None, "finite"),
    ([{"outer": 0, "loss": -float("inf")}], None, "finite"),
    ([{"outer": 0, "loss": 1e308}], None, "plottable range"),
    ([{"outer": 1e300, "loss": 2.0}], None, "plottable range"),
    ([{"outer": 0}], None, "finite"),
    ([{"outer": 0, "loss": True}], None, "finite"),
    ([{"outer": 0, "loss": "3.0"}], None, "finite"),
    (["x"], None, "neither"),
    (CURVE, [(3, float("nan"))], r"heldout\[0\] needs finite"),
    (CURVE, [(3, 1e308)], r"heldout\[0\] is out of the plottable range"),
])
def test_bad_values_are_one_line_errors_and_write_nothing(tmp_path, curve, heldout, needle):
    with pytest.raises(SparkError, match=needle) as err:
        write_loss_png(tmp_path / "x.png", curve, heldout)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "x.png").exists()


def test_scale_label_names_the_table_row_or_the_size():
    tiny = SCALES["tiny"].to_dict()
    assert scale_label(tiny) == "tiny"
    assert scale_label({**tiny, "train_attn": False}) == "tiny"
    assert scale_label({**tiny, "dim": 48}) == "dim 48, 2 layers, seq 64"
    assert scale_label({"bogus": 1}) is None and scale_label(None) is None


def test_heldout_points_sit_at_the_last_outer_pass():
    assert heldout_points({"loss": 3.0}, CURVE, "e.json") == [{"outer": 3, "loss": 3.0}]
    with pytest.raises(SparkError, match="no held-out 'loss'"):
        heldout_points({"n": 3}, CURVE, "e.json")


def test_spark_help_and_training_do_not_load_matplotlib():
    code = ("import sys, contextlib, io\n"
            "import sparktrain.train.loop, sparktrain.cli.train, sparktrain.data.pairs_score\n"
            "from sparktrain.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(['--help'])\n"
            "    except SystemExit: pass\n"
            "print('matplotlib' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "False\n"


def test_a_corpus_curve_says_what_its_points_measure():
    """A corpus job's points are fixed windows, its held-out one an estimate, not the
    whole dataset nor eval.json's whole held-out score."""
    from sparktrain.data.source import CorpusSource, TextSource

    assert TextSource.curve_labels == CorpusSource.curve_labels
    fig = render([(0, 7.6), (1, 4.0)], [(0, 7.7), (1, 4.4)], labels=CorpusSource.curve_labels)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["training loss, 32 fixed train windows (last 4)",
                      "held-out loss, 64-window estimate (last 4.4)"]


def test_the_bpb_panel_draws_every_baseline_a_run_has():
    from types import SimpleNamespace

    from sparktrain.eval.plot import _references

    metrics = {"zlib9_bpb": 2.0, "lzma9e_bpb": 1.7, "ppmd_bpb": 1.47,
               "lzma9e_primed_bpb": 1.42, "ppmd_primed_bpb": 1.25}
    run = SimpleNamespace(unit="bpb", metrics=metrics, params={"job": "job-c"}, number=1,
                          name="r1")
    refs = _references([run], {"r1": ("C0",)})
    assert [text for _, text, _, _ in refs] == [
        f"{name} ({value:.3f} bpb): run 1; job-c" for name, value in (
            ("zlib-9", 2.0), ("lzma-9e", 1.7), ("PPMd", 1.47), ("lzma-9e primed", 1.42),
            ("PPMd primed", 1.25))]
    assert len({style for _, _, style, _ in refs}) == 5  # each its own line style
