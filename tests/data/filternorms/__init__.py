"""Filter norms: the L2 norm of every filter of every convolution (weights only)."""
