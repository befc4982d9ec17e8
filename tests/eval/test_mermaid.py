"""Line charts as Mermaid text for a pull request's report (sparktrain/eval/mermaid.py)."""
from sparktrain.eval.mermaid import line_charts


def test_runs_on_the_same_passes_share_one_chart_with_their_colours_named():
    text = line_charts('held-out "loss"', "loss", [("main", [(0, 5.5), (1, 4.25)]),
                                                 ("this branch", [(0, 5.5), (1, 4.0)])])
    assert text.count("```mermaid") == 1
    assert "xychart-beta" in text and "title \"held-out 'loss'\"" in text
    assert 'x-axis "outer pass" [0, 1]' in text
    assert "line [5.5, 4.25]" in text and "line [5.5, 4]" in text
    assert '"plotColorPalette": "#1f77b4, #d62728"' in text
    assert text.endswith("blue: main; red: this branch")


def test_runs_on_other_passes_get_a_chart_each():
    text = line_charts("loss", "loss", [("main", [(0, 5.0), (1, 4.0)]),
                                        ("this branch", [(0, 5.0), (1, 4.5), (2, 4.0)])])
    assert text.count("```mermaid") == 2
    assert 'title "loss: main"' in text and 'x-axis "outer pass" [0, 1, 2]' in text


def test_nothing_to_draw_is_empty():
    assert line_charts("loss", "loss", [("main", [])]) == ""
