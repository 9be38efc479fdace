import pytest

from realm.model.index.refresh import IndexRefreshScheduler


def test_refresh_starts_every_n_steps_and_never_overlaps():
    scheduler = IndexRefreshScheduler(refresh_every_steps=100)
    assert scheduler.is_time_to_refresh(0)  # no index yet
    scheduler.refresh_started(0)
    assert not scheduler.is_time_to_refresh(150)  # still in flight
    assert scheduler.refresh_swapped(180) == 180
    assert not scheduler.is_time_to_refresh(99)
    assert scheduler.is_time_to_refresh(180)
    scheduler.refresh_started(200)
    assert scheduler.refresh_swapped(230) == 30
    assert scheduler.staleness_at_swap == [180, 30]
    assert scheduler.index_age(250) == 50


def test_swap_without_refresh_and_double_start_are_errors():
    scheduler = IndexRefreshScheduler(refresh_every_steps=10)
    with pytest.raises(RuntimeError, match="no refresh in flight"):
        scheduler.refresh_swapped(5)
    scheduler.refresh_started(0)
    with pytest.raises(RuntimeError, match="still in flight"):
        scheduler.refresh_started(1)


def test_failed_refresh_allows_a_new_one():
    scheduler = IndexRefreshScheduler(refresh_every_steps=10)
    scheduler.refresh_started(0)
    scheduler.refresh_failed()
    assert scheduler.index_age(5) is None
    scheduler.refresh_started(10)
