register_family(Family(
    "filternorms", "per-filter L2 norms of every convolution and the near-zero filters (weights only)",
    "fl_core.filternorms.analysis:analyze_filter_norms", "fl_core.filternorms.settings:FilterNormsSettings",
    "fl_core.filternorms.analysis:FilterNormsResult", command="fl_core.cli.filternorms",
    survey=SurveyMeasure("fl_core.filternorms.analysis:filter_norm_values", {
        "filters": "filters of every convolution", "near_zero_share": "share of near-zero filters",
        "median_norm": "median filter norm ‖w‖"}, ("near_zero_share", "median_norm"), label="filter norms"),
    report=("filternorms", "Filter norms"),
    how_to_read=("Each box shows the norms ‖w‖ of one convolution's filters, in forward order; the bars give the "
                 "share of filters whose norm is below a small fraction of the layer's largest. Near-zero filters "
                 "pass almost nothing on and are the first a pruning would remove.")))
