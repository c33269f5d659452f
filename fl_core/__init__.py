"""FilterLens core library: what convolutional filters learn and why.

No Streamlit import anywhere in this package (a test enforces it): notebooks, the CLI (``python -m fl_core``) and
the dashboard pages all call the same functions.
"""

__version__ = "0.1.0"
