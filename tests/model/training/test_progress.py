from realm.model.training.progress import Progress


def test_progress_reports_rate_and_eta_of_this_process_steps():
    now = [100.0]
    progress = Progress(total_steps=50, start_step=10, clock=lambda: now[0])
    now[0] = 104.0
    metrics = progress.update(20, loss=1.5)
    assert metrics == {
        "loss": 1.5, "step": 20, "total_steps": 50, "steps_per_s": 2.5, "eta_s": 12.0, "elapsed_s": 4.0,
    }
