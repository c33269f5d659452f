"""Benchmark: first render of the default page and a cached rerun (targets: < 15 s and < 1 s on 2 CPU cores).

    python bench/bench_dashboard.py

Runs the real ``app.py`` headless with Streamlit's AppTest in a fresh process (cold caches), so the first run
includes loading the demo models, the patch PCA, the energy profiles and the whitening curves; then times a rerun of
the sidebar + Home page with warm caches.
"""

from __future__ import annotations

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from fl_ui.testing import page_app

APP = Path(__file__).resolve().parent.parent / "app.py"


def main() -> None:
    start = time.perf_counter()
    app = AppTest.from_file(str(APP), default_timeout=600)
    app.run()
    first = time.perf_counter() - start
    assert not app.exception and not app.error, "the default page failed to render"
    warm = page_app("views/home.py")
    warm.run()
    start = time.perf_counter()
    warm.run()
    rerun = time.perf_counter() - start
    print(f"first render {first:.1f} s (target < 15 s: {first / 15:.2f} of budget); "
          f"cached rerun {rerun:.2f} s (target < 1 s: {rerun:.2f} of budget)")


if __name__ == "__main__":
    main()
