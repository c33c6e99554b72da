"""A rolling deploy: the previous release's web server and worker keep running on the
database this code has migrated, and keep working, until they are replaced.

The previous release is the newest CHANGELOG.md entry with a commit. Its checkout is a
``git worktree`` of that commit with a virtualenv of its own, made from that commit's
requirements.lock (uv, from its warm cache); its processes are started as that release
starts them (``python -m config.web``, ``celery -A config worker``), on the suite's test
database, already migrated by this code. Its worker has a Celery queue of its own, so
the suite's worker never takes its work; its web server feeds the suite's worker.
"""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from config.release.changelog import ROOT, previous_release
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
def started():
    """Processes a test starts; stopped at its end, newest first."""
    processes = []
    yield processes
    for proc in reversed(processes):
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


def test_a_rolling_deploy_from_the_previous_release(
    previous, started, live, live_env, live_logs, worker_keys, upstream, agent_token, reviewer
):
    """docs/deployment.md, Upgrading: after `migrate`, the previous release's processes
    and this one's may serve side by side in any mix while they are replaced.

    The two mixes where the releases meet are run: a previous web server with this
    release's worker (the suite's own), and this release's web server with a previous
    worker. Between them every write of the previous release on the migrated schema is
    made (its web server's plan, approval and audit events; its worker's attempt and
    audit events) and each release reads what the other wrote; this release beside
    itself is the rest of the suite."""
    from demo.processes import start_web, start_worker, wait_ready

    version, tree, python = previous
    # The previous worker and the web server that feeds it: a queue of their own. The
    # previous web server feeds the suite's queue, so the suite's worker executes.
    env = {**live_env, "COUNTERSIGN_QUEUE": f"{live_env['COUNTERSIGN_QUEUE']}-{version}"}
    old_var = {"COUNTERSIGN_VAR_DIR": str(tree / "var")}
    key = {"COUNTERSIGN_WORKER_KEY_FILE": worker_keys["private_file"]}

    def run(url: str, worker, email: str) -> None:
        propose_approve_execute(url, agent_token, worker, upstream, email)

    # Started together: the worker is waited for once both web servers listen.
    old_worker = start_worker(
        {**env, **old_var, **key},
        live_logs,
        name=f"worker-{version}",
        python=python,
        cwd=tree,
        wait=False,
    )
    started.append(old_worker)
    old_web, old_url = start_web(
        {**live_env, **old_var}, live_logs, name=f"web-{version}", python=python, cwd=tree
    )
    started.append(old_web)
    new_web, new_url = start_web(env, live_logs, name="web-upgraded")
    started.append(new_web)
    wait_ready(old_worker)
    # Migrations it does not know are no reason for it to leave the load balancer.
    ready = {c["name"]: c for c in httpx.get(f"{old_url}/readyz", timeout=10).json()["checks"]}
    assert ready["migrations"]["ok"], ready

    # The workers replaced first: the previous web server, this release's worker. Its
    # INSERTs of a plan, an approval and audit events lack the new columns.
    run(old_url, live["worker"], "ada@workers-first.example")
    # A web server replaced first: this release's, beside the previous worker (its
    # attempt and audit events, on a plan this release wrote).
    run(new_url, old_worker, "ada@web-first.example")
