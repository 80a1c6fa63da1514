"""The proxy's checkpoint under file faults: a real checkpoint cut short, a checkpoint that cannot be read,
writes that fail in a streak and then succeed again.  Garbage content of every other kind is in
test_store.py; a full disk (tmpfs) in tests/integration/test_state_faults.py."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from runtimeproxy.cli import FieldsFormatter
from runtimeproxy.store import Store
from tests.fixtures.waiting import wait_until
from tests.unit.runtimeproxy.test_store import CTR_ID, POD2_ID, POD_ID, container_request, pod_request

LOGGER = "runtimeproxy.store"


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """The store's records at ``level`` as the proxy logs them: the message, then its fields."""
    formatter = FieldsFormatter("%(message)s")
    return [formatter.format(r) for r in caplog.records if r.name == LOGGER and r.levelno == level]


def checkpoint(path: Path) -> bytes:
    store = Store(str(path))
    store.put_pod(POD_ID, pod_request())
    store.put_container(CTR_ID, POD_ID, container_request())
    store.close()
    return path.read_bytes()


@pytest.mark.parametrize("keep", [0.0, 0.5, 0.99], ids=["empty", "half", "last-bytes-missing"])
def test_a_truncated_checkpoint_is_dropped_with_one_line_and_the_next_write_replaces_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, keep: float) -> None:
    path = tmp_path / "checkpoint.json"
    whole = checkpoint(path)
    cut = whole[:int(len(whole) * keep)]
    path.write_bytes(cut)

    store = Store(str(path))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        store.load()
    assert store.pods() == {} and store.containers() == {}
    (line,) = records(caplog, logging.ERROR)
    assert "the checkpoint is unusable" in line and f"path={path}" in line, line
    assert "error=not valid JSON" in line and f"bytes={len(cut)}" in line, line
    assert f"kept=moved to {path}.bad" in line and "starting empty" in line, line
    assert Path(f"{path}.bad").read_bytes() == cut and not path.exists()

    store.put_pod(POD2_ID, pod_request("other"))
    store.close()
    reopened = Store(str(path))
    reopened.load()
    assert set(reopened.pods()) == {POD2_ID}


def test_a_checkpoint_that_cannot_be_read_or_written_is_logged_once_per_streak(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A directory where the file should be: reading fails with EISDIR, and so does every os.replace onto it.
    path = tmp_path / "checkpoint.json"
    path.mkdir()
    (path / "inside").write_text("")
    store = Store(str(path), persist_delay_seconds=0.01, write_retry_seconds=0.05)
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            store.load()
            (line,) = records(caplog, logging.ERROR)
            assert "cannot read the checkpoint; starting empty" in line, line
            assert f"path={path}" in line and "error=Is a directory" in line, line

            store.put_pod(POD_ID, pod_request())
            wait_until("three failed checkpoint writes", lambda: store.failed_writes >= 3)
            store.put_pod(POD2_ID, pod_request("other"))
            wait_until("more failed writes", lambda: store.failed_writes >= 6)
            errors = records(caplog, logging.ERROR)[1:]
            assert len(errors) == 1, errors
            assert "cannot write the checkpoint; keeping the changes in memory" in errors[0], errors
            assert f"path={path}" in errors[0] and "error=Is a directory" in errors[0], errors
            assert not records(caplog, logging.INFO)

            shutil.rmtree(path)  # the fault goes away: the writer's retry catches up without another change
            wait_until("the checkpoint written again", lambda: path.is_file() and store.failed_writes == 0)
            (recovered,) = records(caplog, logging.INFO)
            assert "checkpoint written again" in recovered and f"path={path}" in recovered, recovered
            assert "failed_writes=" in recovered, recovered
            assert len(records(caplog, logging.ERROR)) == 2
    finally:
        store.close()
    reopened = Store(str(path))
    reopened.load()
    assert set(reopened.pods()) == {POD_ID, POD2_ID}
