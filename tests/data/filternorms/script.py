from fl_core import FilterNormsSettings, analyze_filter_norms

result = analyze_filter_norms("demo:tiny_vgg", settings=FilterNormsSettings(zero_tol=0.01), min_filters=8)
print(result.to_frame().head(), result.plot(), result.zero_tol + 1.0)
