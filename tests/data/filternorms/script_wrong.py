from fl_core import analyze_filter_norms

print(analyze_filter_norms("demo:tiny_vgg", zero_tol="0.01").zero_tol)
