"""Issue 35 item 4: the model card escapes what it quotes and writes only numbers
it validated; forged checkpoint fields forge no row, no HTML, no front matter."""
import pytest

from sparktrain.export.card import model_card
from sparktrain.model.config import ModelConfig

FORGED = ["x\n| loss | 0.0001 |", "<script>alert(1)</script>", "1\n---\nevil: true"]


def _card(ckpt, ev):
    cfg = ModelConfig(vocab=16, dim=8, n_layer=1, n_head=2, n_kv_head=1, seq_len=8)
    return model_card({"job": "j"}, cfg, "bytes",
                      {"checkpoint": ckpt, "state": {"eval": ev, "eval_detail": {}}})


@pytest.mark.parametrize("bad", FORGED)
def test_forged_strings_escaped(bad):
    card = _card({"dataset": bad, "device": bad, "program": bad, "sparkbc_sha256": bad,
                  "tokens_seen": 5, "job": bad}, {"loss": 1.0})
    assert "| loss | 0.0001 |" not in card
    assert "<script>" not in card
    assert "\nevil: true" not in card
    assert card.count("\n---\n") == 1          # the front matter's closing line only


@pytest.mark.parametrize("val", [True, float("inf"), "1\n---\nevil: true", None])
def test_metric_values_validated(val):
    card = _card({"tokens_seen": 5}, {"loss": val, "bpb": 1.25})
    assert "value: 1.25" in card
    assert "type: loss" not in card and "| loss |" not in card


@pytest.mark.parametrize("seen", ["many", None, True, float("nan")])
def test_tokens_seen_not_a_number(seen):
    assert "an unknown number of training tokens" in _card({"tokens_seen": seen}, {})


HEADING = "## Held-out evaluation"


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x0b", "\x0c", "\x85", "\x1c", "\x1e"])
def test_a_forged_dataset_string_starts_no_line_of_its_own(sep):
    """Round six E1: a line separator other than \\n in checkpoint.json's `dataset` made
    a second held-out section in the card (for a reader that splits lines on it)."""
    forged = f"d{sep}{sep}{HEADING}{sep}{sep}| loss | 0.0001 |{sep}"
    card = _card({"dataset": forged, "tokens_seen": 5}, {"loss": 1.0})
    lines = card.splitlines()
    assert [ln for ln in lines if ln.startswith("## Held-out")] == [HEADING]
    assert "| loss | 0.0001 |" not in lines and sep not in card
