"""Input and output: model specs, safe checkpoint and ONNX loading, the upload store, images and crop data sets, layers,
small nets."""
