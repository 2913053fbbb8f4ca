"""How long the region prior's runs last at a job's length (shared/fleet/prior.py
`run_hours_over`), at the edges the mutation pass found untested: a horizon every run outlasted
(survival 1: no finite exponential fits, so the mean run), horizons less than an hour apart (the
interpolation stays linear), and a table that starts at 0 h."""

from __future__ import annotations

import math

import pytest

from shared.fleet.prior import LocationPrior


def test_a_horizon_every_run_outlasted_counts_the_mean_run() -> None:
    never_cut = LocationPrior(0.95, 10.0, 0.5, run_survival=((12, 1.0),))
    assert never_cut.run_hours_over(12) == 10.0
    assert never_cut.run_hours_over(6) == 10.0


def test_between_horizons_less_than_an_hour_apart_the_run_is_still_interpolated_linearly() -> None:
    # exp(-0.5 / L) = 1/2 at half an hour: L = 0.5 / ln 2; a quarter hour is halfway from the mean
    short = LocationPrior(0.5, 2.0, 1.0, run_survival=((0.5, 0.5), (0.75, 0.25)))
    at_half = 0.5 / math.log(2)
    assert short.run_hours_over(0.25) == pytest.approx(2.0 + 0.5 * (at_half - 2.0), rel=1e-9)
    at_three_quarters = 0.75 / math.log(4)
    assert short.run_hours_over(0.625) == pytest.approx(at_half + 0.5 * (at_three_quarters - at_half), rel=1e-9)


def test_a_table_that_starts_at_0_h_answers_the_mean_there() -> None:
    # survival at 0 h is 1 by definition: the mean run, and no division by the empty span
    from_zero = LocationPrior(0.95, 10.0, 0.5, run_survival=((0.0, 1.0), (12, 0.5)))
    assert from_zero.run_hours_over(0) == 10.0
    assert from_zero.run_hours_over(6) == pytest.approx(10 + 0.5 * (12 / math.log(2) - 10))
