"""A rolling deploy: the previous release's web server and worker keep running on the
database this code has migrated, and keep working, until they are replaced.

The previous release is the newest CHANGELOG.md entry with a commit. Its checkout is a
``git worktree`` of that commit with a virtualenv of its own, made from that commit's
requirements.lock (uv, from its warm cache); its processes are started as that release
starts them (``python -m config.web``, ``celery -A config worker``), on the suite's test
database, already migrated by this code. They use a Celery queue of their own, so the
suite's worker never takes their work.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from release.changelog import ROOT, previous_release
from tests.e2e.support import AgentClient, ReviewerClient, WorkerLogs

pytestmark = pytest.mark.e2e

UV = ROOT / ".venv" / "bin" / "uv"


def _git(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False, **kwargs
    )


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    """The previous release's checkout and interpreter: (version, directory, python)."""
    release = previous_release()
    if _git("cat-file", "-e", f"{release.commit}^{{commit}}").returncode != 0:
        pytest.fail(
            f"the previous release {release.version} (commit {release.commit}, CHANGELOG.md) "
            "is not in this clone: the upgrade test needs the repository's history "
            "(git fetch --unshallow)",
            pytrace=False,
        )
    tree = tmp_path_factory.mktemp("previous-release") / release.version
    started = time.monotonic()
    added = _git("worktree", "add", "--detach", str(tree), release.commit)
    assert added.returncode == 0, added.stderr
    try:
        python = tree / ".venv" / "bin" / "python"
        for command in (
            # The interpreter of this checkout's virtualenv, the packages of that commit.
            [UV, "venv", "--quiet", "--python", ROOT / ".venv" / "bin" / "python", ".venv"],
            [UV, "pip", "sync", "--quiet", "--python", python, "requirements.lock"],
        ):
            made = subprocess.run(
                [str(part) for part in command], cwd=tree, capture_output=True, text=True
            )
            assert made.returncode == 0, made.stderr
        print(f"{release.version} checked out in {time.monotonic() - started:.1f}s")
        yield release.version, tree, str(python)
    finally:
        removed = _git("worktree", "remove", "--force", str(tree))
        assert removed.returncode == 0, removed.stderr


@pytest.fixture
def previous_processes(previous, live, live_env, live_logs, worker_keys):
    """The previous release's web server and worker, on this database and a queue of
    their own; yields (its URL, its worker)."""
    from demo.processes import start_web, start_worker

    version, tree, python = previous
    env = {
        **live_env,
        "COUNTERSIGN_QUEUE": f"{live_env['COUNTERSIGN_QUEUE']}-{version}",
        "COUNTERSIGN_VAR_DIR": str(tree / "var"),
    }
    started = []
    try:
        web, url = start_web(env, live_logs, name=f"web-{version}", python=python, cwd=tree)
        started.append(web)
        worker = start_worker(
            {**env, "COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"]},
            live_logs,
            name=f"worker-{version}",
            python=python,
            cwd=tree,
        )
        started.append(worker)
        yield url, worker
    finally:
        for proc in started:
            proc.stop()


def propose_approve_execute(url: str, token: str, worker, upstream, email: str) -> dict:
    """Propose through the agent API of the web server at ``url``, approve on its review
    page, and wait for ``worker`` to execute the plan."""
    agent = AgentClient(url, token)
    rita = ReviewerClient(url, "rita", "pw-rita")
    logs = WorkerLogs(worker)
    try:
        writes = len(upstream.writes())
        plan = agent.propose(email=email)
        assert plan["status"] == "awaiting_approval"
        rita.decide(plan["id"], "approve")
        done = agent.wait_for(plan["id"], timeout=30)
        assert done["status"] == "completed", done
        finished = logs.wait_finished(1)
        assert len(finished) == 1 and "completed" in finished[0], finished
        assert len(upstream.writes()) == writes + 1
        assert upstream.state()["contacts"]["c-1001"]["email"] == email
        return done
    finally:
        agent.close()
        rita.close()


def test_the_previous_release_runs_on_the_migrated_database_then_this_one(
    previous_processes, live, upstream, agent_token, reviewer
):
    old_url, old_worker = previous_processes
    # The previous release's processes, on the schema this code migrated: a proposal
    # (an INSERT of the columns it knows), an approval, an execution (its attempt).
    propose_approve_execute(old_url, agent_token, old_worker, upstream, "ada@old.example")
    # Then this release's, on the same database.
    propose_approve_execute(live["url"], agent_token, live["worker"], upstream, "ada@new.example")
