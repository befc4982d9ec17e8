"""`spark compare` on a made-up `dvc exp show --json` answer (no DVC run): which
experiments, their labels, the curves, old metric layouts, the picture's bytes.
The real-DVC path is tests/pipeline/test_sweeps.py."""
import copy
import struct

import matplotlib.axes
import pytest

from sparktrain.errors import SparkError
from sparktrain.eval import compare as cmp
from sparktrain.eval.headline import HEADLINE_KEYS

METRIC = "out/train/job-dry-001/eval.json"
PARAMS = {"job": "job-dry-001", "scales": {}, "step": {"lr": 0.1, "seed": 0, "outer": 2}}
HEADLINE = {"loss": 4.5, "perplexity": 90.0, "next_token_accuracy": 0.2, "exact_match": 0.0,
            "copy_recall": 0.1}
OLD_LAYOUT = dict(HEADLINE, families={"chat": {"loss": 4.0, "n": 3}}, samples=[], n=10,
                  data="data/eval/tiny_heldout.jsonl", weights_sha256="ab" * 32)


def _data(step: dict, metric: dict | None, timestamp: str) -> dict:
    params = copy.deepcopy(PARAMS)
    params["step"].update(step)
    return {"timestamp": timestamp, "params": {"params.yaml": {"data": params}},
            "metrics": {METRIC: {"data": metric}} if metric is not None else {}}


def _exp(name: str, rev: str, step: dict, metric: dict | None, timestamp: str) -> dict:
    return {"name": name, "revs": [{"rev": rev, "name": name, "error": None,
                                     "data": _data(step, metric, timestamp)}]}


def shown(*exps, base_metric=HEADLINE) -> list:
    return [{"rev": "workspace", "name": None, "data": _data({}, HEADLINE, None)},
            {"rev": "a" * 40, "name": "main", "data": _data({}, base_metric, "2024-01-01"),
             "experiments": list(exps)}]


LR_05 = _exp("lr-five", "b" * 40, {"lr": 0.05}, dict(HEADLINE, loss=4.2), "2024-01-03")
LR_02 = _exp("lr-two", "c" * 40, {"lr": 0.02}, dict(HEADLINE, loss=4.8), "2024-01-02")
QUEUED = {"name": "queued-one", "executor": "workers",
          "revs": [{"rev": "d" * 40, "name": "queued-one", "data": None, "error": None}]}


def checkpoint(exp) -> dict:
    last = {0.05: 2.0, 0.02: 3.0}.get(exp.params["step.lr"], 2.5)
    return {"loss_curve": [{"outer": 0, "loss": 5.5, "phase": "start"},
                           {"outer": 1, "loss": 4.0, "phase": "after_outer"},
                           {"outer": 2, "loss": last, "phase": "after_outer"}]}


def test_every_experiment_oldest_first_labelled_by_the_params_that_differ():
    sweep = cmp.compare([], shown(LR_05, LR_02, QUEUED), checkpoint)
    assert sweep["changed_params"] == ["step.lr"]       # against main's 0.1 too
    exps = sweep["experiments"]
    assert [e.name for e in exps] == ["lr-two", "lr-five"]   # queued one left out
    assert [e.label for e in exps] == ["lr=0.02", "lr=0.05"]
    assert exps[1].loss_curve == [{"outer": 0, "loss": 5.5}, {"outer": 1, "loss": 4.0},
                                  {"outer": 2, "loss": 2.0}]
    # no heldout_loss in the curve: the metric's loss, at the last pass
    assert exps[1].heldout == [{"outer": 2, "loss": 4.2}]
    assert exps[1].metrics == dict(HEADLINE, loss=4.2) and not exps[1].old_layout


def test_named_experiments_by_name_or_rev_and_the_baseline_by_branch():
    sweep = cmp.compare(["c" * 8, "main"], shown(LR_05, LR_02), checkpoint)
    assert [e.name for e in sweep["experiments"]] == ["lr-two", "main"]
    assert [e.label for e in sweep["experiments"]] == ["lr=0.02", "lr=0.1"]


def test_a_per_pass_heldout_loss_in_the_checkpoint_is_drawn_as_a_curve():
    def with_heldout(exp):
        ckpt = checkpoint(exp)
        for item, held in zip(ckpt["loss_curve"], (5.6, 4.9, 4.4)):
            item["heldout_loss"] = held
        return ckpt

    [exp] = cmp.compare(["lr-five"], shown(LR_05), with_heldout)["experiments"]
    assert exp.heldout == [{"outer": 0, "loss": 5.6}, {"outer": 1, "loss": 4.9},
                           {"outer": 2, "loss": 4.4}]


def test_same_params_twice_are_told_apart_by_name():
    again = _exp("lr-five-again", "e" * 40, {"lr": 0.05}, HEADLINE, "2024-01-04")
    labels = [e.label for e in cmp.compare([], shown(LR_05, again), checkpoint)["experiments"]]
    assert labels == ["lr=0.05 (lr-five)", "lr=0.05 (lr-five-again)"]


def test_old_metric_layout_is_read_and_flagged():
    old = _exp("before-split", "f" * 40, {"seed": 1}, OLD_LAYOUT, "2024-01-05")
    [exp] = cmp.compare([], shown(old, base_metric=OLD_LAYOUT), checkpoint)["experiments"]
    assert exp.old_layout and exp.metrics == HEADLINE and exp.label == "seed=1"


@pytest.mark.parametrize("answer, wanted, needle", [
    (shown(), [], "no experiments yet"),
    (shown(QUEUED), [], "no experiments yet"),
    (shown(LR_05), ["nope"], "no experiment named 'nope' (experiments: lr-five)"),
    (shown(_exp("odd", "9" * 40, {"lr": 0.3}, {"accuracy": 1.0}, "2024-01-02")), [],
     "experiment odd: no held-out loss in out/train/job-dry-001/eval.json"),
    (shown(_exp("unrun", "9" * 40, {"lr": 0.3}, None, "2024-01-02")), [],
     "experiment unrun: no held-out loss"),
])
def test_bad_choices_are_one_clear_error(answer, wanted, needle):
    with pytest.raises(SparkError) as err:
        cmp.compare(wanted, answer, checkpoint)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_checkpoint_without_a_curve_is_refused():
    with pytest.raises(SparkError, match="experiment lr-five: its checkpoint.json has no"):
        cmp.compare([], shown(LR_05), lambda exp: {"loss_curve": []})
    with pytest.raises(SparkError, match=r"loss_curve\[1\] is not"):
        cmp.compare([], shown(LR_05), lambda exp: {"loss_curve": [{"loss": 1}, {"loss": None}]})


def test_table_and_json_hold_the_same_numbers():
    sweep = cmp.compare([], shown(LR_05, LR_02), checkpoint)
    table = cmp.format_table(sweep)
    assert "params that differ: step.lr" in table
    assert table.splitlines()[2].split() == ["experiment", "step.lr", "train", "held-out",
                                             "ppl", "acc", "exact", "copy"]
    assert table.splitlines()[3].split() == ["lr-two", "0.02", "3.0000", "4.8000", "90.0",
                                             "0.200", "0.000", "0.100"]
    assert max(len(ln) for ln in table.splitlines()) <= 80
    assert "2      3.0000 (4.8000)  2.0000 (4.2000)" in table
    doc = cmp.as_json(sweep)
    assert [e["params"] for e in doc["experiments"]] == [{"step.lr": 0.02}, {"step.lr": 0.05}]
    assert set(doc["experiments"][0]["metrics"]) <= set(HEADLINE_KEYS)


def test_the_picture_is_800_by_500_and_the_same_bytes_twice(tmp_path):
    sweep = cmp.compare([], shown(LR_05, LR_02), checkpoint)
    first = cmp.write_png(tmp_path / "sub" / "sweep.png", sweep)
    again = cmp.write_png(tmp_path / "again.png", cmp.compare([], shown(LR_05, LR_02),
                                                                checkpoint))
    assert first == again == (tmp_path / "sub" / "sweep.png").read_bytes()
    assert first[:8] == b"\x89PNG\r\n\x1a\n" and b"Software" not in first
    assert struct.unpack(">II", first[16:24]) == (800, 500)
    labels = [t.get_text() for t in cmp.render(sweep).legends[0].get_texts()]
    assert labels == ["lr=0.02", "lr=0.05"]


# --- the picture holds for any sweep: 2, 6, 12 experiments, pairs and corpus ------

CORPUS_METRIC = {"loss": 1.9, "bpb": 2.4, "zlib9_bpb": 2.9, "lzma9e_bpb": 2.5, "perplexity": 6.7}


def _long_exp(i: int, corpus: bool) -> dict:
    """An experiment whose params differ in long ways, as the coder runs do."""
    step = {"lr": 0.01 * (i + 1), "seed": i, "optimizer": None if i % 2 else "adamw"}
    exp = _exp(f"exp-{i:02d}-{'corpus' if corpus else 'pairs'}", f"{i + 1:x}" * 40, step,
               dict(CORPUS_METRIC, bpb=2.4 - i / 50) if corpus else dict(HEADLINE, loss=4 + i / 9),
               f"2024-02-{i + 1:02d}")
    params = exp["revs"][0]["data"]["params"]["params.yaml"]["data"]
    params["program"] = (f"data/programs/coder-medium-stdlib-{i}.sparkbc" if corpus
                         else "data/programs/train-step.sparkbc")
    params["corpus"] = {"glob": "**/*.py" if corpus else None, "heldout": 0.1}
    return exp


def _corpus_checkpoint(exp) -> dict:
    return {"loss_curve": [{"outer": k, "loss": 3.0 - k / 3, "heldout_loss": 3.1 - k / 4,
                            "heldout_bpb": 3.5 - k / 5} for k in range(4)]}


def _any_checkpoint(exp):
    return _corpus_checkpoint(exp) if exp.kind == "corpus" else checkpoint(exp)


def _outside(fig) -> list[str]:
    """Artists whose drawn extent leaves the canvas, and a legend overlapping a panel."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    bad = []
    # a panel's tight box holds its drawn tick labels, title and axis labels
    artists = [t for t in [fig._suptitle, *fig.texts] if t is not None and t.get_text()]
    artists += fig.legends + list(fig.axes)
    for a in artists:
        box = (a.get_tightbbox(renderer) if isinstance(a, matplotlib.axes.Axes)
               else a.get_window_extent(renderer))
        if (box.x0 < canvas.x0 - 1 or box.y0 < canvas.y0 - 1 or box.x1 > canvas.x1 + 1
                or box.y1 > canvas.y1 + 1):
            bad.append(f"{type(a).__name__} {getattr(a, 'get_text', lambda: '')()!r} {box}")
    for legend in fig.legends:
        for ax in fig.axes:
            if legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)):
                bad.append(f"the legend overlaps a panel")
    return bad


@pytest.mark.parametrize("n", [2, 6, 12])
def test_every_artist_stays_inside_the_canvas(n):
    exps = [_long_exp(i, corpus=i % 2 == 1) for i in range(n)]
    sweep = cmp.compare([], shown(*exps), _any_checkpoint)
    fig = cmp.render(sweep)
    assert _outside(fig) == []
    assert fig.bbox.width == 800
    titles = sorted(ax.get_title() for ax in fig.axes)
    assert titles == ["corpus jobs (held-out text)", "pairs jobs"]     # units never share an axis
    corpus_ax = next(ax for ax in fig.axes if ax.get_title().startswith("corpus"))
    assert corpus_ax.get_ylabel() == "bits per byte"
    flat = sorted(round(line.get_ydata()[0], 6) for line in corpus_ax.get_lines()
                  if len(set(line.get_ydata())) == 1 and len(line.get_ydata()) == 2)
    assert flat == [2.5, 2.9]                                    # lzma-9e and zlib-9 drawn
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "zlib-9 (2.900 bpb)" in texts and "lzma-9e (2.500 bpb)" in texts
    for text in texts[:n]:
        assert "data/programs" not in text and "step." not in text     # shortened
        assert "lr=" in text


def test_labels_show_only_what_differs_shortened():
    exps = [_long_exp(i, corpus=True) for i in range(3)]
    labels = [e.label for e in cmp.compare([], shown(*exps), _any_checkpoint)["experiments"]]
    # main (the baseline) has no corpus: glob and heldout differ from it too
    assert labels[0] == ("glob=**/*.py heldout=0.1 program=coder-medium-stdl… lr=0.01 "
                         "optimizer=adamw seed=0")
    assert labels[1].endswith("lr=0.02 optimizer=none seed=1")


def test_a_pairs_only_sweep_has_one_panel_in_nats():
    fig = cmp.render(cmp.compare([], shown(LR_05, LR_02), checkpoint))
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss (cross-entropy, nats per token)"]
    assert _outside(fig) == []
