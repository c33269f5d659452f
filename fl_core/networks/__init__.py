"""Modified copies of one network, shared by the families that score them: forward passes that start at the first
changed module (:mod:`~fl_core.networks.partial_forward`), BatchNorm folded into, or recalibrated after, the
convolutions it reads (:mod:`~fl_core.networks.batchnorm`), and the one evaluation loop of a classifier
(:mod:`~fl_core.networks.evaluation`)."""
