"""`spark compare` on a made-up `dvc exp show --json` answer (no DVC run): which
experiments, their labels, the curves, old metric layouts, the picture's bytes.
The real-DVC path is tests/pipeline/test_readme_blocks.py (README's grid)."""
import copy
import json
import math
import struct

import matplotlib.axes
import pytest

from sparktrain.core.errors import SparkError, columns
from sparktrain.eval import plot
from sparktrain.eval import compare as cmp
from sparktrain.core.metric_keys import HEADLINE_KEYS
from sparktrain.eval.experiments import ExpRow

import yaml

METRIC = "out/train/job-dry-001/eval.json"
CKPT = "out/train/job-dry-001/checkpoint.json"
PARAMS = {"job": "job-dry-001", "scales": {}, "step": {"lr": 0.1, "seed": 0, "outer": 2}}
HEADLINE = {"loss": 4.5, "perplexity": 90.0, "next_token_accuracy": 0.2, "exact_match": 0.0,
            "copy_recall": 0.1}
OLD_LAYOUT = dict(HEADLINE, families={"chat": {"loss": 4.0, "n": 3}}, samples=[], n=10,
                  data="data/eval/tiny_heldout.jsonl", weights_sha256="ab" * 32)


class FakeExperiments:
    """The reader's interface (sparktrain/eval/experiments.py) over made-up
    experiments: rows() as exp_show lists them, read() of their files."""

    def __init__(self, exps, base_metric=HEADLINE, checkpoint=None):
        self.exps = [e for e in exps if e["metric"] != "queued"]
        self.base = {"name": "main", "rev": "main", "step": {}, "metric": base_metric,
                     "params": None}
        self.checkpoint = checkpoint or globals()["checkpoint"]

    def rows(self, rev=None):
        exps = [ExpRow(e["name"], e["rev"][:7], "main") for e in self.exps]
        return exps, [ExpRow("main", "main", "main")]

    def baseline_of(self, name):
        return None          # every made-up experiment is on the one baseline

    def _find(self, rev):
        return next(e for e in [self.base, *self.exps] if e["rev"][:7] == rev)

    def read(self, path, rev):
        e = self._find(rev)
        params = _params(e)
        if path == "params.yaml":
            return yaml.safe_dump(params).encode()
        if path == METRIC:
            return None if e["metric"] is None else json.dumps(e["metric"]).encode()
        if path == CKPT:
            exp = cmp.Experiment(e["name"], rev, "main", cmp.resolved_params(params), {}, False)
            return json.dumps(self.checkpoint(exp)).encode()
        return None


def _params(e) -> dict:
    params = copy.deepcopy(e.get("params") or PARAMS)
    params["step"].update(e["step"])
    return params


def _exp(name: str, rev: str, step: dict, metric, params=None) -> dict:
    return {"name": name, "rev": rev, "step": step, "metric": metric, "params": params}


def shown(*exps, base_metric=HEADLINE, checkpoint=None) -> FakeExperiments:
    """Experiments oldest first, as the reader lists them."""
    return FakeExperiments(exps, base_metric, checkpoint)


LR_02 = _exp("lr-two", "c" * 40, {"lr": 0.02}, dict(HEADLINE, loss=4.8))
LR_05 = _exp("lr-five", "b" * 40, {"lr": 0.05}, dict(HEADLINE, loss=4.2))
QUEUED = _exp("queued-one", "d" * 40, {}, "queued")


def checkpoint(exp) -> dict:
    last = {0.05: 2.0, 0.02: 3.0}.get(exp.params["step.lr"], 2.5)
    return {"loss_curve": [{"outer": 0, "loss": 5.5, "phase": "start"},
                           {"outer": 1, "loss": 4.0, "phase": "after_outer"},
                           {"outer": 2, "loss": last, "phase": "after_outer"}]}


def test_every_experiment_oldest_first_labelled_by_the_params_that_differ():
    sweep = cmp.compare([], shown(LR_02, LR_05, QUEUED))
    assert sweep["changed_params"] == ["step.lr"]
    exps = sweep["experiments"]
    assert [e.name for e in exps] == ["lr-two", "lr-five"]   # queued one left out
    assert [e.label for e in exps] == ["lr=0.02", "lr=0.05"]
    assert [e.number for e in exps] == [1, 2]
    assert exps[1].loss_curve == [{"outer": 0, "loss": 5.5}, {"outer": 1, "loss": 4.0},
                                  {"outer": 2, "loss": 2.0}]
    # no heldout_loss in the curve: the metric's loss, at the last pass
    assert exps[1].heldout == [{"outer": 2, "loss": 4.2}]
    assert exps[1].metrics == dict(HEADLINE, loss=4.2) and not exps[1].old_layout


def test_named_experiments_by_name_or_rev_and_the_baseline_by_branch():
    sweep = cmp.compare(["c" * 8, "main"], shown(LR_05, LR_02))
    assert [e.name for e in sweep["experiments"]] == ["lr-two", "main"]
    assert [e.label for e in sweep["experiments"]] == ["lr=0.02", "lr=0.1"]


def test_one_experiment_is_labelled_by_what_differs_from_its_baseline():
    [exp] = cmp.compare(["lr-two"], shown(LR_05, LR_02))["experiments"]
    assert exp.label == "lr=0.02"


def test_a_per_pass_heldout_loss_in_the_checkpoint_is_drawn_as_a_curve():
    def with_heldout(exp):
        ckpt = checkpoint(exp)
        for item, held in zip(ckpt["loss_curve"], (5.6, 4.9, 4.4)):
            item["heldout_loss"] = held
        return ckpt

    [exp] = cmp.compare(["lr-five"], shown(LR_05, checkpoint=with_heldout))["experiments"]
    assert exp.heldout == [{"outer": 0, "loss": 5.6}, {"outer": 1, "loss": 4.9},
                           {"outer": 2, "loss": 4.4}]


def test_same_params_twice_are_told_apart_by_name():
    again = _exp("lr-five-again", "e" * 40, {"lr": 0.05}, HEADLINE)
    other = _exp("lr-two", "c" * 40, {"lr": 0.02}, HEADLINE)
    labels = [e.label for e in cmp.compare([], shown(LR_05, again, other))["experiments"]]
    assert labels == ["lr=0.05 (lr-five)", "lr=0.05 (lr-five-again)", "lr=0.02"]
    # nothing differs between the two: their names, and what they share is said once
    sweep = cmp.compare([], shown(LR_05, again))
    assert [e.label for e in sweep["experiments"]] == ["lr-five", "lr-five-again"]
    assert sweep["shared_params"] == {"step.lr": 0.05}
    assert "the same in all, not in the baseline: step.lr=0.05" in cmp.compare_table(sweep)


def test_old_metric_layout_is_read_and_flagged():
    old = _exp("before-split", "f" * 40, {"seed": 1}, OLD_LAYOUT)
    [exp] = cmp.compare([], shown(old, base_metric=OLD_LAYOUT))["experiments"]
    assert exp.old_layout and exp.metrics == HEADLINE and exp.label == "seed=1"


@pytest.mark.parametrize("answer, wanted, needle", [
    (shown(), [], "no experiments yet"),
    (shown(QUEUED), [], "no experiments yet"),
    (shown(LR_05), ["nope"], "no experiment named 'nope' (experiments: lr-five)"),
    (shown(_exp("odd", "9" * 40, {"lr": 0.3}, {"accuracy": 1.0})), [],
     "experiment odd: no held-out loss in out/train/job-dry-001/eval.json"),
    (shown(_exp("unrun", "9" * 40, {"lr": 0.3}, None)), [],
     "experiment unrun: no held-out loss"),
])
def test_bad_choices_are_one_clear_error(answer, wanted, needle):
    with pytest.raises(SparkError) as err:
        cmp.compare(wanted, answer)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_checkpoint_without_a_curve_is_refused():
    with pytest.raises(SparkError, match="experiment lr-five: its checkpoint.json has no"):
        cmp.compare([], shown(LR_05, checkpoint=lambda exp: {"loss_curve": []}))
    bad = {"loss_curve": [{"loss": 1}, {"loss": None}]}
    with pytest.raises(SparkError, match=r"loss_curve\[1\] is not"):
        cmp.compare([], shown(LR_05, checkpoint=lambda exp: bad))


def test_a_hostile_file_at_a_rev_is_one_line():
    class Aliases(FakeExperiments):
        def read(self, path, rev):
            return b"a: &x [1]\nb: *x\n" if path == "params.yaml" else super().read(path, rev)

    with pytest.raises(SparkError, match="alias"):
        cmp.compare([], Aliases([LR_05]))


def test_table_and_json_hold_the_same_numbers():
    sweep = cmp.compare([], shown(LR_02, LR_05))
    table = cmp.compare_table(sweep)
    assert "params that differ: step.lr" in table
    assert table.splitlines()[2].split() == ["experiment", "lr", "train", "held-out",
                                             "ppl", "acc", "exact", "copy"]
    assert table.splitlines()[3].split() == ["1", "lr-two", "0.02", "3.0000", "4.8000", "90.0",
                                             "0.200", "0.000", "0.100"]
    assert max(len(ln) for ln in table.splitlines()) <= 80
    assert "2    5.5000  4.0000  2.0000" in table      # run 2's curve, pass by pass
    doc = cmp.as_json(sweep)
    assert [e["params"] for e in doc["experiments"]] == [{"step.lr": 0.02}, {"step.lr": 0.05}]
    assert [e["number"] for e in doc["experiments"]] == [1, 2]
    assert set(doc["experiments"][0]["metrics"]) <= set(HEADLINE_KEYS)


def test_on_a_terminal_rich_draws_the_same_cells_under_a_solid_rule():
    sweep = cmp.compare([], shown(LR_02, LR_05))
    plain, drawn = cmp.compare_table(sweep, tty=False), cmp.compare_table(sweep, tty=True)
    assert "\u2500" not in plain and "\u2500" * 20 in drawn
    assert [ln for ln in drawn.splitlines() if not (ln and set(ln) <= {"\u2500"})] == \
        plain.splitlines()                  # the same lines, two spaces apart, rules added
    assert columns(["a", "b"], [["[job-1]", ":x:"]], tty=True)[2] == "[job-1]  :x:"


def test_the_picture_is_800_by_500_and_the_same_bytes_twice(tmp_path):
    sweep = cmp.compare([], shown(LR_02, LR_05))
    first = plot.write_compare_png(tmp_path / "sub" / "sweep.png", sweep)
    again = plot.write_compare_png(tmp_path / "again.png", cmp.compare([], shown(LR_02, LR_05)))
    assert first == again == (tmp_path / "sub" / "sweep.png").read_bytes()
    assert first[:8] == b"\x89PNG\r\n\x1a\n" and b"Software" not in first
    assert struct.unpack(">II", first[16:24]) == (800, 500)
    labels = [t.get_text() for t in plot.render_compare(sweep).legends[0].get_texts()]
    assert labels == ["1  lr=0.02", "2  lr=0.05"]


# --- the picture holds for any sweep: 2, 6, 12 experiments, pairs and corpus ------

CORPUS_METRIC = {"loss": 1.9, "bpb": 2.4, "zlib9_bpb": 2.9, "lzma9e_bpb": 2.5, "perplexity": 6.7}


def _long_exp(i: int, corpus: bool) -> dict:
    """An experiment whose params differ in long ways, as the coder runs do."""
    step = {"lr": 0.01 * (i + 1), "seed": i, "optimizer": None if i % 2 else "adamw"}
    params = copy.deepcopy(PARAMS)
    params["program"] = (f"data/programs/coder-medium-stdlib-{i}.sparkbc" if corpus
                         else "data/programs/train-step.sparkbc")
    params["corpus"] = {"glob": "**/*.py" if corpus else None, "heldout": 0.1}
    return _exp(f"exp-{i:02d}-{'corpus' if corpus else 'pairs'}", f"{i + 1:07x}" * 6, step,
                dict(CORPUS_METRIC, bpb=2.4 - i / 50) if corpus else dict(HEADLINE, loss=4 + i / 9),
                params)


def _corpus_checkpoint(exp) -> dict:
    return {"loss_curve": [{"outer": k, "loss": 3.0 - k / 3, "heldout_loss": 3.1 - k / 4,
                            "heldout_bpb": 3.5 - k / 5} for k in range(4)]}


def _any_checkpoint(exp):
    return _corpus_checkpoint(exp) if "coder" in exp.params["program"] else checkpoint(exp)


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


@pytest.mark.parametrize("n", [2, 6, 12, 30])
def test_every_artist_stays_inside_the_canvas(n):
    exps = [_long_exp(i, corpus=i % 2 == 1) for i in range(n)]
    sweep = cmp.compare([], shown(*exps, checkpoint=_any_checkpoint))
    fig = plot.render_compare(sweep)
    assert _outside(fig) == []
    assert fig.bbox.width == 800
    titles = sorted(ax.get_title() for ax in fig.axes)
    assert titles == ["held-out text", "pairs jobs"]     # units never share an axis
    corpus_ax = next(ax for ax in fig.axes if ax.get_title().startswith("held-out"))
    assert corpus_ax.get_ylabel() == "bits per byte"
    flat = sorted(round(line.get_ydata()[0], 6) for line in corpus_ax.get_lines()
                  if len(set(line.get_ydata())) == 1 and len(line.get_ydata()) == 2)
    assert flat == [2.5, 2.9]                                    # lzma-9e and zlib-9 drawn
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    corpus_runs = ", ".join(str(e.number) for e in sweep["experiments"] if e.unit == "bpb")
    plural = "s" * (n > 2)
    unwrapped = [" ".join(t.split()) for t in texts]
    assert f"zlib-9 (2.900 bpb): run{plural} {corpus_runs}; job-dry-001" in unwrapped
    assert f"lzma-9e (2.500 bpb): run{plural} {corpus_runs}; job-dry-001" in unwrapped
    for text in texts[:n]:
        assert "data/programs" not in text and "step." not in text     # shortened
        assert "lr=" in text
    # pairs and corpus runs side by side: nine metric columns, still 80 columns
    assert max(len(ln) for ln in cmp.compare_table(sweep).splitlines()) <= 80


def test_labels_show_only_what_differs_shortened():
    exps = [_long_exp(i, corpus=True) for i in range(3)]
    sweep = cmp.compare([], shown(*exps, checkpoint=_any_checkpoint))
    labels = [e.label for e in sweep["experiments"]]
    # the programs share all but their number: the number is kept, the rest is `…`;
    # an unset optimizer is its default, sgd, not `none`
    assert labels == ["program=…ib-0 lr=0.01 optimizer=adamw seed=0",
                      "program=…ib-1 lr=0.02 optimizer=sgd seed=1",
                      "program=…ib-2 lr=0.03 optimizer=adamw seed=2"]
    # glob and heldout are the same in all three, only the baseline differs
    # (heldout 0.1 is its default: the same as the baseline's unset one)
    assert sweep["shared_params"] == {"corpus.glob": "**/*.py"}


def test_an_unset_knob_is_its_default_not_a_difference():
    explicit = _exp("says-sgd", "a1" * 20, {"lr": 0.05, "optimizer": "sgd"}, HEADLINE)
    sweep = cmp.compare([], shown(LR_02, explicit))
    assert sweep["changed_params"] == ["step.lr"]
    assert [e.params["step.optimizer"] for e in sweep["experiments"]] == ["sgd", "sgd"]


def test_a_pairs_only_sweep_has_one_panel_in_nats():
    fig = plot.render_compare(cmp.compare([], shown(LR_02, LR_05)))
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss (cross-entropy, nats per token)"]
    assert _outside(fig) == []


# --- 16 points (a 4 x 4 sweep), as `spark sweep` names them -------------------

def _grid16() -> list[dict]:
    exps = []
    for i, (lr, seed) in enumerate((lr, seed) for lr in (0.02, 0.05, 0.1, 0.2)
                                   for seed in (0, 1, 2, 3)):
        params = copy.deepcopy(PARAMS)
        params["program"] = ("data/programs/train-step.sparkbc" if i % 2
                             else "data/programs/train-step-long-name.sparkbc")
        step = {"lr": lr, "seed": seed, "optimizer": "adamw" if i % 4 == 3 else None,
                "momentum": 0.9 if i < 8 else 0.0}
        exps.append(_exp(f"sweep-{i:04d}{'abcdef'}", f"{i + 1:07x}" * 6, step,
                         dict(HEADLINE, loss=4 + i / 37), params))
    return exps


def _grid_checkpoint(exp) -> dict:
    """A curve per run that its lr and seed shape, held-out loss per pass."""
    lr, seed = exp.params["step.lr"], exp.params["step.seed"]
    return {"loss_curve": [{"outer": k, "loss": 5.5 * math.exp(-k * (lr + seed / 200)),
                            "heldout_loss": 5.6 * math.exp(-k * lr / 2) + (k * lr) ** 2}
                           for k in range(5)]}


def _shown16():
    return shown(*_grid16(), checkpoint=_grid_checkpoint)


def _legend_entries(fig) -> list[str]:
    return [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]


def test_a_16_point_sweep_table_fits_80_columns():
    sweep = cmp.compare([], _shown16())
    assert sweep["changed_params"] == ["program", "step.lr", "step.momentum",
                                       "step.optimizer", "step.seed"]
    table = cmp.compare_table(sweep)
    wide = [ln for ln in table.splitlines() if len(ln) > 80]
    assert wide == []
    for exp in sweep["experiments"]:          # every run is in it, by number and name
        assert f"{exp.number:>2} {exp.name}" in table


def test_a_16_point_sweep_legend_names_every_run_by_what_differs():
    sweep = cmp.compare([], _shown16())
    fig = plot.render_compare(sweep)
    texts = _legend_entries(fig)
    assert len(texts) == 16
    keys = sweep["changed_params"]
    for exp, text in zip(sweep["experiments"], texts):
        assert text.startswith(f"{exp.number} ")
        for key in keys:
            value = cmp.short_value(exp.params[key])
            if key == "program":          # the shared part of a long value is `…`
                value = "…tep-long-name" if "long" in value else "train-step"
            assert f"{cmp.short_key(key, keys)}={value}" in text, (key, text)
        assert "…" not in text.replace("=…tep-long-name", "")    # nothing cut
    assert _outside(fig) == []
    # every run its own colour and line style
    lines = [(h.get_color(), h.get_linestyle()) for h in fig.legends[0].legend_handles]
    assert len(set(lines)) == 16


def test_the_16_point_picture(tmp_path):
    """The picture, saved for a look (COMPARE_PNG=path keeps it)."""
    import os
    sweep = cmp.compare([], _shown16())
    path = os.environ.get("COMPARE_PNG") or tmp_path / "compare-16.png"
    data = plot.write_compare_png(path, sweep)
    assert struct.unpack(">II", data[16:24])[0] == 800


@pytest.mark.parametrize("flags, names", [
    ({"where": ["lr=0.05"]}, ["sweep-0004abcdef", "sweep-0005abcdef", "sweep-0006abcdef",
                              "sweep-0007abcdef"]),
    ({"where": ["step.lr=0.05", "seed=3"]}, ["sweep-0007abcdef"]),
    ({"where": ["optimizer=sgd"], "last": 2}, ["sweep-0013abcdef", "sweep-0014abcdef"]),
    ({"last": 3}, ["sweep-0013abcdef", "sweep-0014abcdef", "sweep-0015abcdef"]),
    ({"wanted": ["sweep-0001abcdef", "sweep-0003abcdef"]},
     ["sweep-0001abcdef", "sweep-0003abcdef"]),
])
def test_a_subset_by_name_by_param_or_the_last_n(flags, names):
    sweep = cmp.compare(flags.pop("wanted", []), _shown16(), **flags)
    assert [e.name for e in sweep["experiments"]] == names
    assert [e.number for e in sweep["experiments"]] == list(range(1, len(names) + 1))


@pytest.mark.parametrize("flags, needle", [
    ({"where": ["lr"]}, "--where 'lr': expected KEY=VALUE"),
    ({"where": ["lr=7"]}, "no experiment has lr=7"),
    ({"last": 0}, "--last must be >= 1"),
])
def test_bad_subset_flags_are_one_line(flags, needle):
    with pytest.raises(SparkError) as err:
        cmp.compare([], _shown16(), **flags)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_many_long_params_fall_back_to_a_wrapped_key_inside_80_columns():
    exps = []
    for i in range(16):
        step = {"lr": 0.001 * (i + 1), "seed": i, "outer": 2 + i, "inner": 8 + i,
                "batch_size": 4 + i, "clip": 0.5 + i / 10, "momentum": i / 20}
        params = copy.deepcopy(PARAMS)
        params["program"] = f"data/programs/{'x' * 30}-{i}-{'y' * 10}.sparkbc"
        exps.append(_exp(f"long-run-name-{i:02d}", f"{i + 1:07x}" * 6, step, HEADLINE, params))
    sweep = cmp.compare([], shown(*exps))
    table = cmp.compare_table(sweep)
    assert [ln for ln in table.splitlines() if len(ln) > 80] == []
    for exp in sweep["experiments"]:     # each run's whole label is in the key, wrapped
        at = table.index(f"{exp.number:>2} {exp.name}")
        key = " ".join(table[at:].split("\n\n")[0].split("\n")[0:3]).split()
        assert f"program=…xx-{exp.number - 1}-yy…" in " ".join(key)


class EarlierCommit(FakeExperiments):
    """HEAD has lr-two; lr-five ran on an earlier commit (`dvc exp list --all-commits`)."""

    def rows(self, rev=None):
        if rev == "0123456":
            return [ExpRow("lr-five", "b" * 7, "0123456")], [ExpRow("0123456", "0123456",
                                                                    "0123456")]
        return [ExpRow("lr-two", "c" * 7, "main")], [ExpRow("main", "main", "main")]

    def baseline_of(self, name):
        return "0123456" + "8" * 33 if name == "lr-five" else None

    def _find(self, rev):
        return self.base if rev == "0123456" else super()._find(rev)


def test_an_experiment_of_an_earlier_commit_is_found_by_name():
    source = EarlierCommit([LR_02, LR_05])
    sweep = cmp.compare(["lr-five", "lr-two"], source)
    assert [(e.name, e.baseline) for e in sweep["experiments"]] == \
        [("lr-five", "0123456"), ("lr-two", "main")]
    assert [e.name for e in cmp.compare((), source)["experiments"]] == ["lr-two"]  # HEAD's only
    with pytest.raises(SparkError, match="no experiment named 'nope'"):
        cmp.compare(["nope"], source)


def test_two_corpora_get_their_own_named_and_coloured_compressor_lines():
    """Runs on two held-out texts: a zlib-9 and an lzma-9e line for each, in the colour of
    its first run and named by its runs, never two grey lines that name no corpus."""
    exps = [_long_exp(i, corpus=True) for i in range(3)]
    exps[2]["metric"] = dict(exps[2]["metric"], zlib9_bpb=3.3, lzma9e_bpb=3.1)
    sweep = cmp.compare([], shown(*exps, checkpoint=_any_checkpoint))
    fig = plot.render_compare(sweep)
    [ax] = fig.axes
    flat = {round(line.get_ydata()[0], 6): line.get_color() for line in ax.get_lines()
            if len(set(line.get_ydata())) == 1 and len(line.get_ydata()) == 2}
    assert sorted(flat) == [2.5, 2.9, 3.1, 3.3]
    assert flat[2.9] == flat[2.5] != flat[3.3] == flat[3.1]
    texts = [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]
    assert "zlib-9 (2.900 bpb): runs 1, 2; job-dry-001" in texts
    assert "zlib-9 (3.300 bpb): run 3; job-dry-001" in texts


class TwoJobs(FakeExperiments):
    """A coder run beside the pairs grid: its files under its own job folder."""

    def read(self, path, rev):
        return super().read(path.replace("job-coder-tiny", "job-dry-001"), rev)


CODER = _exp("coder", "e" * 40, {}, dict(HEADLINE, loss=3.0), params={
    "job": "job-coder-tiny", "program": "data/programs/train-coder.sparkbc", "scales": {},
    "tokenizer": "bpe", "vocab_size": 512,
    "step": {"lr": 0.003, "seed": 0, "outer": 6, "optimizer": "adamw", "batch_size": 16,
             "schedule": "cosine", "warmup": 30}})


def test_runs_of_several_jobs_name_the_job_and_what_differs_within_one():
    sweep = cmp.compare([], TwoJobs([LR_02, LR_05, CODER]))
    assert sweep["changed_params"] == ["job", "step.lr"]
    assert [e.label for e in sweep["experiments"]] == [
        "job=job-dry-001 lr=0.02", "job=job-dry-001 lr=0.05", "job=job-coder-tiny lr=0.003"]
    table = cmp.compare_table(sweep, tty=False)
    assert "optimizer" not in table and "vocab_size" not in table
    every = cmp.compare([], TwoJobs([LR_02, LR_05, CODER]), every_param=True)
    assert {"step.optimizer", "tokenizer", "vocab_size", "program"} <= set(
        every["changed_params"])
    assert len(cmp.compare_table(every, tty=False).splitlines()) > len(table.splitlines())
