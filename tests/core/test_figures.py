"""The house layout at talk size (core.figures.fit), on hand-made figures: known answers for where the title, its
subtitle, a colour bar's title, a long y axis title and point labels go. The drawn result is measured in the browser
(tests/e2e/test_layout.py)."""
import plotly.graph_objects as go

from core.figures import fit, style


def test_title_lines_become_a_subtitle_with_room_above_the_plot():
    fig = style(go.Figure(go.Scatter(x=[1, 2], y=[3, 4], name="a")),
                "Effect of pruning<br><sup>K = 5%, N = 100</sup>", "x (unit)", "y (unit)")
    fit(fig)
    title = fig.layout.title
    assert title.text == "Effect of pruning" and title.subtitle.text == "K = 5%, N = 100"
    assert title.subtitle.font.size == 15  # plotly's <sup>: 70 % of the 21 px title
    assert (title.yref, title.y, title.yanchor, title.pad.t) == ("container", 1, "top", 12)
    # 12 px above, the 21 px title, 6 px, the subtitle line, 12 px below
    assert fig.layout.margin.t == round(12 + 21 * 1.25 + 6 + 15 * 1.35 + 12 + 0.49)
    again = fit(fig)  # idempotent
    assert again.layout.title.subtitle.text == "K = 5%, N = 100" and again.layout.margin.t == fig.layout.margin.t


def test_a_legend_or_subplot_titles_above_the_plot_get_their_own_room():
    plain = fit(style(go.Figure(go.Scatter(x=[1], y=[1], name="a")), "T", "x", "y"))
    above = style(go.Figure(go.Scatter(x=[1], y=[1], name="a")), "T", "x", "y")
    above.update_layout(legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"})
    assert fit(above).layout.margin.t > plain.layout.margin.t + 20


def test_colour_bar_titles_sit_beside_the_bar():
    fig = fit(style(go.Figure(go.Heatmap(z=[[0, 1]], colorbar={"title": {"text": "relevance"}})), "T"))
    assert fig.data[0].colorbar.title.side == "right"


def test_a_y_title_longer_than_its_plot_is_high_breaks_before_its_unit():
    short = fit(style(go.Figure(go.Scatter(x=[1], y=[1])), "T", "x", "loss (nats)", height=460))
    assert short.layout.yaxis.title.text == "loss (nats)"
    tall_title = "final held-out loss of every placement over seeds (nats / token)"
    fig = fit(style(go.Figure(go.Scatter(x=[1], y=[1])), "T", "x", tall_title, height=400))
    assert fig.layout.yaxis.title.text == "final held-out loss of every placement over seeds<br>(nats / token)"


def test_point_labels_that_would_collide_move_apart_and_a_free_one_stays():
    fig = go.Figure([go.Scatter(x=[110, 111.5], y=[270, 250], mode="markers+text", text=["FP4 (bnb)", "k=1"],
                                textposition="top center", marker={"size": 13}),
                     go.Scatter(x=[200, 100, 280], y=[150, 1500, 140], mode="markers+text", text=["k=7", "", ""],
                                textposition="top center", marker={"size": 13})])
    style(fig, "Memory vs perplexity", "memory (MB)", "perplexity")
    fig.update_yaxes(type="log")
    fit(fig)
    first, second = fig.data[0].textposition
    assert first == "top center" and second != "top center"  # the second label moves off the first
    assert fig.data[1].textposition[0] == "top center"  # nothing near: the trace's own position
