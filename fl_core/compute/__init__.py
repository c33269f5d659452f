"""Where and within what an analysis computes: the device, its dtypes and threads (:mod:`~fl_core.compute.device`),
progress (:mod:`~fl_core.compute.progress`), the budgets checked before anything is allocated
(:mod:`~fl_core.compute.budgets`), glibc's malloc set for torch (:mod:`~fl_core.compute.allocator`) and what the
machine runs (:mod:`~fl_core.compute.environment`)."""
