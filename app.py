"""scaling-planner web app: ``streamlit run app.py``.

Five pages (Streamlit multipage with ``st.navigation``): Estimate, Search, Compare hardware,
Validation, Calibration. Each page lives in ``app_pages/``; shared helpers in
``app_pages/common.py``, plotly figures in ``app_pages/charts.py``.
"""

from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="scaling-planner", page_icon=":material/speed:", layout="wide")

PAGES = [
    st.Page("app_pages/estimate.py", title="Estimate", icon=":material/speed:", default=True),
    st.Page("app_pages/search.py", title="Search", icon=":material/travel_explore:"),
    st.Page("app_pages/compare.py", title="Compare hardware", icon=":material/compare_arrows:"),
    st.Page("app_pages/validation.py", title="Validation", icon=":material/fact_check:"),
    st.Page("app_pages/calibration.py", title="Calibration", icon=":material/tune:"),
]

st.navigation(PAGES).run()
