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


def test_a_refresh_is_swapped_in_when_the_next_one_starts_whenever_its_build_ended():
    scheduler = IndexRefreshScheduler(refresh_every_steps=10, index_snapshot_step=0)
    assert [step for step in range(25) if scheduler.is_time_to_refresh(step)] == list(range(10, 25))
    assert scheduler.swap_step() is None and not scheduler.is_time_to_swap(24)
    scheduler.refresh_started(10)
    assert scheduler.swap_step() == 20
    assert [step for step in range(10, 25) if scheduler.is_time_to_swap(step)] == list(range(20, 25))
    assert scheduler.refresh_swapped(20) == 10
    assert scheduler.is_time_to_refresh(20)  # the next refresh starts at the swap's step
    scheduler.refresh_started(20)
    assert (scheduler.swap_step(), scheduler.index_age(25)) == (30, 15)


def test_a_resumed_schedule_swaps_the_refresh_in_flight_at_its_checkpoint_when_it_was_due():
    """Checkpointed at step 25, between the start of the refresh of step 20 and its swap."""
    resumed = IndexRefreshScheduler(refresh_every_steps=10, index_snapshot_step=10, in_flight_snapshot_step=20)
    assert not resumed.is_time_to_refresh(25) and not resumed.is_time_to_swap(29)
    assert resumed.is_time_to_swap(30) and resumed.refresh_swapped(30) == 10
    assert resumed.is_time_to_refresh(30) and not resumed.is_time_to_refresh(29)


def test_a_resumed_schedule_without_a_refresh_in_flight_counts_from_the_index_in_use():
    resumed = IndexRefreshScheduler(refresh_every_steps=10, index_snapshot_step=0)
    assert [step for step in range(3, 12) if resumed.is_time_to_refresh(step)] == [10, 11]


def test_swap_without_refresh_and_double_start_are_errors():
    scheduler = IndexRefreshScheduler(refresh_every_steps=10)
    with pytest.raises(RuntimeError, match="no refresh in flight"):
        scheduler.refresh_swapped(5)
    scheduler.refresh_started(0)
    with pytest.raises(RuntimeError, match="still in flight"):
        scheduler.refresh_started(1)
    with pytest.raises(ValueError, match="needs refresh_every_steps"):
        IndexRefreshScheduler(refresh_every_steps=None, in_flight_snapshot_step=3)


def test_failed_refresh_allows_a_new_one():
    scheduler = IndexRefreshScheduler(refresh_every_steps=10)
    scheduler.refresh_started(0)
    scheduler.refresh_failed()
    assert scheduler.index_age(5) is None and scheduler.swap_step() is None
    scheduler.refresh_started(10)


def test_no_refresh_before_the_doc_tower_has_trained_refresh_every_steps():
    """Towers frozen for 30 steps: the index of step 0 is the doc tower's until step 30, so the
    first refresh snapshots it 10 steps of training later."""
    scheduler = IndexRefreshScheduler(refresh_every_steps=10, index_snapshot_step=0, doc_tower_trains_from=30)
    assert [step for step in range(45) if scheduler.is_time_to_refresh(step)] == list(range(40, 45))
