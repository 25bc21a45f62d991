"""Rich rendering for the ``planner`` CLI: every function prints to the Console it is given.

Units shown: times in seconds (s), memory in GiB (2**30 bytes), throughput in tokens per second,
MFU/HFU in percent of the dense peak, FLOPs per token in TFLOP (1e12 FLOP).

One module per command: :mod:`~planner.render.simulation` (``planner simulate``),
:mod:`~planner.render.validation` (``planner validate``), :mod:`~planner.render.listing`
(``planner list``) and :mod:`~planner.render.search` (``planner search``), on the shared
:mod:`~planner.render.tables` (number formatting, table shapes) and
:mod:`~planner.render.layouts` (one-line layout descriptions). Every name is re-exported here.
"""

from __future__ import annotations

from planner.render.layouts import compact_layout as compact_layout
from planner.render.layouts import layout_summary as layout_summary
from planner.render.layouts import overlap_names as overlap_names
from planner.render.listing import render_list as render_list
from planner.render.search import COMM_CATEGORIES as COMM_CATEGORIES
from planner.render.search import COMPUTE_CATEGORIES as COMPUTE_CATEGORIES
from planner.render.search import objective_text as objective_text
from planner.render.search import render_exports as render_exports
from planner.render.search import render_pareto as render_pareto
from planner.render.search import render_search as render_search
from planner.render.search import render_search_summary as render_search_summary
from planner.render.search import render_search_top as render_search_top
from planner.render.search import render_search_why as render_search_why
from planner.render.simulation import render_header as render_header
from planner.render.simulation import render_headline as render_headline
from planner.render.simulation import render_memory as render_memory
from planner.render.simulation import render_notes as render_notes
from planner.render.simulation import render_simulation as render_simulation
from planner.render.simulation import render_time as render_time
from planner.render.tables import _kv_table as _kv_table
from planner.render.validation import render_validation as render_validation
