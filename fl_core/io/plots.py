"""Figures of a model's structure: its convolutions by kind and width (:class:`~fl_core.io.inspect.InspectResult`)."""

from __future__ import annotations

import plotly.graph_objects as go

from fl_core.figures import color, readable
from fl_core.io.inspect import InspectResult


def convolutions_figure(result: InspectResult) -> go.Figure:
    """Output channels of every convolution in forward order, one colour per kind (first, regular, depthwise, ...),
    one row of bars per model."""
    frame = result.to_frame()
    kinds = list(dict.fromkeys(frame["kind"]))
    fig = go.Figure()
    for i, kind in enumerate(kinds):
        rows = frame[frame["kind"] == kind]
        fig.add_trace(go.Bar(x=[f"{spec}<br>{layer}" if len(result.models) > 1 else layer
                                for spec, layer in zip(rows["spec"], rows["layer"])],
                             y=rows["out"], name=kind, marker_color=color(i),
                             customdata=rows[["kernel_h", "kernel_w", "groups", "in"]].to_numpy(),
                             hovertemplate="%{x}<br>%{y} outputs, %{customdata[3]} inputs, kernel "
                                           "%{customdata[0]}×%{customdata[1]}, groups %{customdata[2]}<extra>" + kind
                                           + "</extra>"))
    order = [f"{s}<br>{lay}" if len(result.models) > 1 else lay for s, lay in zip(frame["spec"], frame["layer"])]
    fig.update_xaxes(categoryorder="array", categoryarray=order, showticklabels=len(order) <= 40)
    fig.update_layout(title="Convolutions in forward order: output channels by kind", yaxis_title="output channels",
                      height=380, margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)
