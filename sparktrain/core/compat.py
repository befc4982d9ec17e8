"""Files written by earlier versions, read here and nowhere else: each reader names the
version change it bridges (docs/outputs.md)."""
from __future__ import annotations

# eval.json from before eval_detail.json held the detail beside the headline
PRE_SPLIT_EVAL_KEYS = ("families", "samples", "weights_sha256")
# failed.json from before it recorded the whole `step` block held these knobs only
PRE_STEP_FAILURE_KNOBS = ("lr", "outer", "inner")


def is_pre_split_eval(metrics: dict) -> bool:
    """An eval.json from before eval_detail.json (every number in one file)."""
    return any(k in metrics for k in PRE_SPLIT_EVAL_KEYS)


def whole_eval(ev: dict, detail) -> dict:
    """The headline and the detail as one record; a pre-split eval.json already is."""
    return {**(detail if isinstance(detail, dict) else {}), **ev}


def pre_step_failure_matches(failed: dict, current_step: dict) -> bool:
    """Whether a failed.json without a `step` record failed with the knobs in effect:
    the few it kept (lr, outer, inner) against `current_step`."""
    return all(failed.get(k) == current_step.get(k) for k in PRE_STEP_FAILURE_KNOBS if k in failed)
