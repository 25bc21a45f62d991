"""Calibration: public-figure profile fits (here) and torch microbenchmarks (planner calibrate)."""
