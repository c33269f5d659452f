"""The earlier home of the device, progress and evaluation helpers, kept importable (a family written for it keeps
working): :mod:`fl_core.compute.device`, :mod:`fl_core.compute.progress`, :mod:`fl_core.networks.evaluation`."""

from fl_core.compute.device import (  # noqa: F401
    FAST_FLOAT64_CUDA,
    DeviceLike,
    analysis_threads,
    available_devices,
    cpu_layout,
    cpu_threads,
    default_device,
    inference_autocast,
    load_average,
    product_dtype,
    resolve_device,
    statistics_dtype,
)
from fl_core.compute.progress import (  # noqa: F401
    Progress,
    ProgressLike,
    progress_bar,
    progress_callback,
    report,
    silent,
    sub_progress,
    watched,
)
from fl_core.networks.evaluation import (  # noqa: F401
    evaluate_classifier,
    evaluate_logits,
)
