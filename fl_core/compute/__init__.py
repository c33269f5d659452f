"""Where and within what an analysis computes: the budgets checked before anything is allocated
(:mod:`~fl_core.compute.budgets`) and glibc's malloc set for torch (:mod:`~fl_core.compute.allocator`)."""
