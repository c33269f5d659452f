"""One analysis family over many models, one row per model, the rows computed by the workers of a Dask cluster: an
embedded one on this machine (``--workers``) or a running one (``--scheduler tcp://HOST:8786``, default
``FL_SCHEDULER``). Each row says which worker computed it and in how many seconds; a model that cannot be loaded or
analysed is a row with its error, and the survey goes on.

Models: ``--model SPEC`` (repeatable; a registry name pattern such as ``timm:convnext_*`` or
``timm:resnet*@pretrained`` is every match), ``--models-file FILE`` (a spec or pattern a line, ``#`` comments) and
``--folder DIR`` (every checkpoint file in it). ``--set NAME=VALUE`` (repeatable) sets a field of the measured
family's own settings (``--family masterkeys --set k=12``), checked as that family's command checks it.

Examples:
    python -m fl_core survey --family energy --model 'timm:convnext_*' --model demo:tiny_vgg --csv convnext.csv
    python -m fl_core survey --family weights --folder runs/ckpts --scheduler tcp://10.0.0.5:8786 --json w.json
    python -m fl_core survey --family weights --set duplicate_r2=0.99 --model demo:tiny_vgg --model demo:squeezenet1_0
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from fl_core.errors import ArgumentError
from fl_core.families import FAMILIES
from fl_core.settings import (
    Settings,
    add_settings_arguments,
    bounded,
    parse_setting,
    replace_settings,
    settings_fields,
    settings_from_args,
)
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
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="family_setting",
                        help="a setting of the measured family (its own settings class), e.g. k=12; repeatable")
    add_settings_arguments(parser, SurveySettings, exclude=("family_settings",))


def family_settings(family: str, assignments: list[str]) -> Settings | None:
    """The family's settings with the ``--set NAME=VALUE`` fields (each parsed and checked as its field's
    options and widgets are); ``None`` without any."""
    if not assignments:
        return None
    cls = FAMILIES[family].settings_class()
    fields = {field.name: field for field in settings_fields(cls)} if cls else {}
    values = {}
    for assignment in assignments:
        name, _, text = assignment.partition("=")
        name = name.strip()
        if name not in fields:
            known = ", ".join(sorted(fields)) if fields else "none"
            raise ArgumentError(f"--set {name}: no setting of the {family} family; its settings are {known}.")
        values[name] = parse_setting(fields[name], text, f"--set {name}")
    return replace_settings(cls(), values)


def run(args: argparse.Namespace, progress) -> SurveyResult:
    from fl_core.survey.analysis import HEADLINES
    from fl_core.survey.engine import map_survey, survey_client
    from fl_core.survey.models import survey_models

    settings = settings_from_args(SurveySettings, args,
                                  family_settings=family_settings(args.family, args.family_setting))
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
