"""Altair charts the pages share (Altair ships with Streamlit; no extra dependency)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

PERCENT_METRICS = ("rate",)
STEP_AXIS = alt.Axis(tickMinStep=1, format="d")  # steps are integers: never "2.000000" on a one-point chart


def is_rate(metric: str) -> bool:
    """Rates (solve, validity, format, ...) live on [0, 1] and are drawn in % on every chart.

    >>> is_rate("tasks/validity_rate/code_f"), is_rate("validity code_f"), is_rate("train/loss")
    (True, True, False)
    """
    return any(word in metric for word in PERCENT_METRICS) or metric.startswith("validity")


def _axis_format(metric: str) -> str:
    return ".0%" if is_rate(metric) else ".3~g"


def _domain(values: pd.Series, metric: str) -> list[float]:
    """Rates on [0, 1]; anything else padded, so a flat series (all zeros) still gets a readable axis."""
    if is_rate(metric):
        return [0.0, max(1.0, float(values.max()))]
    lo, hi = float(values.min()), float(values.max())
    pad = (hi - lo) * 0.1 or max(abs(hi) * 0.1, 1.0)
    return [lo - pad, hi + pad]


def lines(df: pd.DataFrame, y_title: str, color: str = "series", height: int = 220, title: str | None = None,
          key: str | None = None, empty: str = "no data yet", percent: bool | None = None, x: str = "step",
          x_title: str = "step") -> None:
    """Lines of ``value`` over ``step``, one per ``color`` column value; an empty frame says ``empty`` instead.
    ``key``: the metric's name, which decides a rate's % axis when the title does not say "rate"; ``percent``
    says it outright (benchmark scores are shares of problems solved without "rate" in their name). ``x``: the
    column on the x-axis (``step``, or e.g. ``compute``: per-adapter tokens), titled ``x_title``."""
    if df.empty:
        st.caption(f"{title or y_title}: {empty}")
        return
    kind = key or y_title
    if percent is not None:
        kind = "rate" if percent else "value"
    chart = (
        alt.Chart(df, title=title or y_title)
        .mark_line(point=alt.OverlayMarkDef(size=40, filled=True) if len(df) < 200 else False, strokeWidth=2.5)
        .encode(x=alt.X(f"{x}:Q", title=x_title, axis=STEP_AXIS if x == "step" else alt.Axis(format="~s")),
                y=alt.Y("value:Q", title=y_title, axis=alt.Axis(format=_axis_format(kind)),
                        scale=alt.Scale(domain=_domain(df["value"], kind), nice=False)),
                color=alt.Color(f"{color}:N", title=None, scale=alt.Scale(scheme="tableau10"),
                                legend=alt.Legend(orient="top", symbolOpacity=1, symbolStrokeWidth=3) if df[color].nunique() > 1 else None),
                tooltip=[color, alt.Tooltip("step:Q", format="d")] + ([alt.Tooltip(f"{x}:Q", format=",.0f")] if x != "step" else [])
                + [alt.Tooltip("value:Q", format=".1%" if is_rate(kind) else ".3f")])
        .properties(height=height)
    )
    # Streamlit sizes the chart to its content by default and ignores .properties(height=...): say it here.
    st.altair_chart(chart, width="stretch", height=height + 60)


def rating_band(df: pd.DataFrame, height: int = 300) -> None:
    """TrueSkill mu per member with a mu +/- sigma band. ``df`` has member, step, mu, sigma."""
    if df.empty:
        st.caption("ratings: no data yet")
        return
    df = df.assign(low=df["mu"] - df["sigma"], high=df["mu"] + df["sigma"])
    base = alt.Chart(df, title="TrueSkill rating per member (mu ± sigma)").encode(
        x=alt.X("step:Q", title="step", axis=STEP_AXIS),
        color=alt.Color("member:N", scale=alt.Scale(scheme="tableau10" if df["member"].nunique() <= 10 else "tableau20"),
                        legend=alt.Legend(orient="bottom", columns=8, symbolOpacity=1, symbolStrokeWidth=3)))
    band = base.mark_area(opacity=0.15).encode(
        y=alt.Y("low:Q", title="rating", scale=alt.Scale(domain=_domain(pd.concat([df["low"], df["high"]]), "rating"))), y2="high:Q")
    line = base.mark_line(point=len(df) < 300).encode(
        y="mu:Q", tooltip=["member", alt.Tooltip("step:Q", format="d"), alt.Tooltip("mu:Q", format=".2f"), alt.Tooltip("sigma:Q", format=".2f")])
    st.altair_chart((band + line).properties(height=height), width="stretch", height=height + 90)


def bars(df: pd.DataFrame, x: str, y: str, color: str, title: str, height: int = 260, percent: bool = False) -> None:
    """Grouped bars; ``percent``: rates, drawn in % on [0, 1] as on every other chart."""
    if df.empty:
        st.caption(f"{title}: no data")
        return
    # ".3~g", not Vega's default: a flat or all-zero series read "0.000000" on its axis
    y_enc = (alt.Y(f"{y}:Q", title=None, axis=alt.Axis(format=".0%"), scale=alt.Scale(domain=[0.0, 1.0]))
             if percent else alt.Y(f"{y}:Q", title=None, axis=alt.Axis(format=".3~g")))
    # labelLimit=0: whole labels ("weakest member (S2; tied: S4)"), never cut to "weakest member (S..."
    chart = (alt.Chart(df, title=title).mark_bar()
             .encode(x=alt.X(f"{x}:N", title=None, axis=alt.Axis(labelLimit=0, labelAngle=-30)), y=y_enc,
                     color=alt.Color(f"{color}:N", legend=alt.Legend(labelLimit=0, orient="bottom", columns=2)),
                     xOffset=f"{color}:N", tooltip=[x, color, alt.Tooltip(f"{y}:Q", format=".1%" if percent else ".3~g")])
             .properties(height=height))
    st.altair_chart(chart, width="stretch", height=height + 40)
