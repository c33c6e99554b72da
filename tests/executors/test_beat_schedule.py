"""celery beat keeps its schedule in plain dbm.dumb files (config.celery.BeatScheduler):
the interpreter's default, dbm.sqlite3 from Python 3.13, made beat die at start on a
busy machine ("locking protocol"), and with it the sweeper."""

from __future__ import annotations

import dbm

from celery.beat import Service

from config.celery import BeatScheduler, app


def test_beat_uses_the_plain_file_scheduler_and_keeps_its_schedule(tmp_path):
    # What a worker's -B and a standalone `celery beat` start, when not told otherwise.
    assert app.conf.beat_scheduler == "config.celery:BeatScheduler"
    assert app.Beat().scheduler_cls == "config.celery:BeatScheduler"
    schedule = str(tmp_path / "celerybeat-schedule")

    def scheduler():
        return Service(
            app, schedule_filename=schedule, scheduler_cls=app.conf.beat_scheduler
        ).get_scheduler()

    first = scheduler()
    assert isinstance(first, BeatScheduler)
    assert "sweep" in first.schedule
    first.schedule["sweep"].total_run_count = 3
    first.sync()
    first.close()

    # Plain files beside the configured name, nothing sqlite (or any other dbm) opens.
    assert (tmp_path / "celerybeat-schedule.dat").exists()
    assert (tmp_path / "celerybeat-schedule.dir").exists()
    assert dbm.whichdb(schedule) == "dbm.dumb"

    # What one beat wrote, the next one reads.
    again = scheduler()
    assert again.schedule["sweep"].total_run_count == 3
    again.close()
