"""The Training Lab: small trainings, label/input variants, run folders, suites of runs and the paper's claims over
them."""
