"""Saved results: the ``.flr`` files of the folder this server shows (``filterlens app --results DIR``,
``FL_RESULTS_DIR``), each with its family's figures and table, as TensorBoard shows a log folder."""

from __future__ import annotations

import streamlit as st

from fl_ui.messages import show
from fl_ui.paths import saved_results_folder
from fl_ui.savedresults import SUFFIX, family_of, figure_explanation, files_frame, models_of, saved_files, saved_result
from fl_ui.widgets import plot_with_explanation, screen_columns, slug, table_with_download, url_widget, user_errors

st.title("💾 Saved results")
st.markdown(
    "Results saved in a notebook or a script (`result.save(\"name.flr\")`) or downloaded from any page's "
    "**⬇ Result (.flr)** button open here with their figures and tables, as they were computed: nothing is "
    "recomputed. Every family's result saves the same way; `fl_core.load_result(path)` reads one back in Python.")

folder = saved_results_folder()
if folder is None:
    st.info("This server shows no folder of saved results. Start it with `filterlens app --results DIR` (a server "
            "sets `FL_RESULTS_DIR`) to list the `.flr` files in DIR and its subfolders here.")
else:
    with user_errors():
        files = saved_files(folder)
        show(st.caption, "{} result file(s) in {} and its subfolders, newest first.", len(files), folder)
        if not files:
            show(st.info, "There is no {} file in this folder yet: save one with result.save(...) or download one "
                 "from a page.", SUFFIX)
        else:
            table_with_download(files_frame(files), "saved_results")
            names = [file.name for file in files]
            chosen = url_widget("Result", names[0], key="file", choices=names,
                                help="The saved result shown below (newest first).")
            file = files[names.index(chosen)]
            result = saved_result(file)
            family = family_of(result)
            show(st.subheader, "{}", file.name)
            show(st.markdown, "The **{}** analysis of {}.", family, ", ".join(models_of(result)) or "no model")
            stem = slug(file.name.removesuffix(SUFFIX))
            for kind in result.plot_kinds():
                with user_errors():
                    plot_with_explanation(result.plot(kind), figure_explanation(result, kind), f"{stem}_{kind}")
            st.subheader("Table")
            frame = result.to_frame()
            shown = screen_columns(frame, {column: column.replace("_", " ") for column in frame.columns
                                           if column != "spec"})  # the spec is named above; headers wrap
            table_with_download(frame, f"{stem}_table", shown=shown, wrap=True, result=result)
