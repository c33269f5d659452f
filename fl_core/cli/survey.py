"""One analysis family over many models, one row per model, the rows computed by the workers of a Dask cluster: an
embedded one on this machine (``--workers``) or a running one (``--scheduler tcp://HOST:8786``, default
``FL_SCHEDULER``). Each row says which worker computed it and in how many seconds; a model that cannot be loaded or
analysed is a row with its error, and the survey goes on.

Models: ``--model SPEC`` (repeatable; a registry name pattern such as ``timm:convnext_*`` or
``timm:resnet*@pretrained`` is every match), ``--models-file FILE`` (a spec or pattern a line, ``#`` comments) and
``--folder DIR`` (every checkpoint file in it).

Examples:
    python -m fl_core survey --family energy --model 'timm:convnext_*' --model demo:tiny_vgg --csv convnext.csv
    python -m fl_core survey --family weights --folder runs/ckpts --scheduler tcp://10.0.0.5:8786 --json w.json
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from fl_core.settings import add_settings_arguments, bounded, settings_from_args
from fl_core.survey.engine import MAX_WORKERS, SCHEDULER_ENV, default_workers
from fl_core.survey.settings import SurveySettings

if TYPE_CHECKING:
    from fl_core.survey.analysis import SurveyResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", action="append", default=[], metavar="SPEC",
                        help="a model spec or a registry name pattern (timm:convnext_*); repeatable")
    parser.add_argument("--models-file", action="append", default=[], metavar="FILE",
                        help="a text file of specs or patterns, one a line; repeatable")
    parser.add_argument("--folder", action="append", default=[], metavar="DIR",
                        help="every checkpoint file of this folder; repeatable")
    parser.add_argument("--scheduler", default=os.environ.get(SCHEDULER_ENV) or None, metavar="ADDRESS",
                        help=f"a running Dask scheduler (default: {SCHEDULER_ENV}, else an embedded cluster)")
    parser.add_argument("--workers", type=bounded(int, 1, MAX_WORKERS, "workers"), default=default_workers(),
                        metavar="N", help="worker processes of the embedded cluster (default: %(default)s)")
    add_settings_arguments(parser, SurveySettings)


def run(args: argparse.Namespace, progress) -> SurveyResult:
    from fl_core.survey.analysis import HEADLINES
    from fl_core.survey.engine import map_survey, survey_client
    from fl_core.survey.models import survey_models

    settings = settings_from_args(SurveySettings, args)
    specs = survey_models(args.model, args.models_file, args.folder, limit=settings.max_models)
    with survey_client(args.scheduler, args.workers) as client:
        result = map_survey(client, specs, settings, device=args.device, progress=progress)
    first, second = HEADLINES[settings.family]
    for row in result.rows:
        numbers = (f"{first} {row.values[first]:.3f}, {second} {row.values[second]:.3f}" if row.error is None
                   else f"error: {row.error}")
        print(f"{row.label}: {numbers} ({row.worker}, {row.seconds:.1f} s)")
    print(f"{len(result.rows)} models in {result.seconds:.1f} s on {len(result.workers)} worker(s), "
          f"{len(result.failed)} failed")
    return result
