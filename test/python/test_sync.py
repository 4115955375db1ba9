"""The Python SDK's synchronous Sandbox against aenv: create and its wire defaults, commands (streamed output,
background, stdin), files (read, write, signed upload/download URLs), watch, pause/connect, snapshots, fork,
metrics, timeouts and kill."""

import os
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone

import pytest
from e2b import (
    CommandExitException,
    FileType,
    FilesystemEventType,
    NotFoundException,
    Sandbox,
    SandboxQuery,
)
from e2b.sandbox.filesystem.filesystem import WriteEntry

from conftest import api, wait_for


def envd_status_without_token(sandbox_id):
    req = urllib.request.Request(
        os.environ["E2B_SANDBOX_URL"] + "/process.Process/List",
        data=b"{}",
        method="POST",
        headers={
            "content-type": "application/json",
            "e2b-sandbox-id": sandbox_id,
            "e2b-sandbox-port": "49983",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def sleepers(sbx):
    """PIDs of the `sleep 3600` commands envd runs in sbx (commands run as `bash -l -c <cmd>`)."""
    return [p.pid for p in sbx.commands.list() if "sleep 3600" in " ".join([p.cmd, *p.args])]


def run(sbx, cmd, **kw):
    return sbx.commands.run(cmd, **kw).stdout


def test_create_is_secured_and_lives_300_s_by_default(sbx):
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.state == "running"
    assert info.template_id
    assert sbx.is_running()
    lifetime = (info.end_at - info.started_at).total_seconds()
    # The fixture asked for 600 s; a sandbox created with no timeout gets NewSandboxV2's 300 s.
    assert 600 <= lifetime < 660
    plain = Sandbox.create()
    try:
        p = plain.get_info()
        assert 300 <= (p.end_at - p.started_at).total_seconds() < 360
        assert p.lifecycle == {"on_timeout": "kill", "auto_resume": False}
        status, detail = api("GET", f"/sandboxes/{plain.sandbox_id}")
        assert status == 200 and detail["envdAccessToken"]
        # envd refuses calls without the sandbox's token (the SDK sends it).
        assert envd_status_without_token(plain.sandbox_id) == 401
        assert plain.commands.run("echo ok").stdout == "ok\n"
        listed = Sandbox.list().next_items()
        assert plain.sandbox_id in [s.sandbox_id for s in listed]
    finally:
        plain.kill()


def test_create_with_metadata_envs_and_list_filters(sandboxes):
    tag = uuid.uuid4().hex[:8]
    s = Sandbox.create(timeout=120, metadata={"suite": "py", "run": tag}, envs={"FROM_CREATE": tag})
    sandboxes.append(s)
    assert run(s, "echo $FROM_CREATE").strip() == tag
    assert s.get_info().metadata == {"suite": "py", "run": tag}
    found = Sandbox.list(query=SandboxQuery(metadata={"run": tag})).next_items()
    assert [x.sandbox_id for x in found] == [s.sandbox_id]
    assert Sandbox.list(query=SandboxQuery(metadata={"run": "nope-" + tag})).next_items() == []


def test_commands_stream_output_as_it_comes(sbx):
    chunks, errs = [], []
    result = sbx.commands.run(
        "for i in 1 2 3; do echo line$i; sleep 0.2; done; echo oops >&2",
        on_stdout=chunks.append,
        on_stderr=errs.append,
    )
    assert "".join(chunks) == "line1\nline2\nline3\n" == result.stdout
    # Streamed: each line came on its own, not all at the end.
    assert len(chunks) >= 3
    assert "".join(errs) == "oops\n" == result.stderr
    assert result.exit_code == 0
    assert run(sbx, "pwd; id -un").split() == ["/home/user", "user"]
    assert run(sbx, "id -un", user="root").strip() == "root"
    assert run(sbx, "echo $GREETING; pwd", envs={"GREETING": "hi"}, cwd="/tmp").split() == ["hi", "/tmp"]
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo before; echo bad >&2; exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.stderr == "bad\n"
    assert failed.value.stdout == "before\n"


def test_background_commands_list_connect_and_kill(sbx):
    h = sbx.commands.run("sleep 3600", background=True)
    assert h.pid in [p.pid for p in sbx.commands.list()]
    counter = sbx.commands.run("for i in $(seq 1 5); do echo c$i; sleep 0.2; done", background=True)
    seen = []
    again = sbx.commands.connect(counter.pid)
    assert again.wait(on_stdout=seen.append).exit_code == 0
    assert "c5\n" in "".join(seen)
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()
    assert h.pid not in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(h.pid) is False


def test_stdin_of_a_running_command(sbx):
    h = sbx.commands.run("cat; echo done", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "first\n")
    h.send_stdin("second\n")
    sbx.commands.close_stdin(h.pid)
    result = h.wait()
    assert result.stdout == "first\nsecond\ndone\n"


def test_files_read_write_list_and_move(sbx):
    info = sbx.files.write("py/files/a.txt", "hello from python")
    assert info.path == "/home/user/py/files/a.txt"
    assert sbx.files.read("py/files/a.txt") == "hello from python"
    blob = bytes(range(256)) * 4096  # 1 MiB, every byte value
    sbx.files.write("py/files/blob.bin", blob)
    assert bytes(sbx.files.read("py/files/blob.bin", format="bytes")) == blob
    sbx.files.write_files(
        [WriteEntry(path="py/files/m1.txt", data="one"), WriteEntry(path="/tmp/py-m2.txt", data=b"two")]
    )
    assert run(sbx, "cat py/files/m1.txt /tmp/py-m2.txt") == "onetwo"
    names = sorted(e.name for e in sbx.files.list("py/files"))
    assert names == ["a.txt", "blob.bin", "m1.txt"]
    entry = sbx.files.get_info("py/files/blob.bin")
    assert entry.type == FileType.FILE and entry.size == len(blob) and entry.owner == "user"
    assert sbx.files.exists("py/files/a.txt") and not sbx.files.exists("py/files/none")
    assert sbx.files.make_dir("py/files/sub") is True
    sbx.files.rename("py/files/a.txt", "py/files/sub/b.txt")
    assert sbx.files.read("py/files/sub/b.txt") == "hello from python"
    sbx.files.remove("py/files/sub")
    assert not sbx.files.exists("py/files/sub")
    with pytest.raises(NotFoundException):
        sbx.files.read("py/files/sub/b.txt")


def _multipart(field, filename, data):
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def test_signed_upload_and_download_urls(sbx):
    data = b"through a signed URL \x00\xff"
    body, content_type = _multipart("file", "up.bin", data)
    up = urllib.request.Request(
        sbx.upload_url("/home/user/py-up.bin"), data=body, method="POST", headers={"content-type": content_type}
    )
    with urllib.request.urlopen(up, timeout=30) as r:
        assert r.status == 200
    with urllib.request.urlopen(sbx.download_url("/home/user/py-up.bin"), timeout=30) as r:
        assert r.read() == data
    expiring = sbx.download_url("/home/user/py-up.bin", use_signature_expiration=60)
    assert "signature_expiration=" in expiring
    with urllib.request.urlopen(expiring, timeout=30) as r:
        assert r.read() == data
    # A signature for another path opens nothing.
    forged = sbx.download_url("/home/user/other.bin").replace("other.bin", "py-up.bin")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(forged, timeout=30)
    assert refused.value.code in (401, 403)


def test_watch_dir_reports_changes(sbx):
    sbx.files.make_dir("py/watched/deep")
    handle = sbx.files.watch_dir("py/watched", recursive=True)
    try:
        sbx.files.write("py/watched/new.txt", "x")
        sbx.files.write("py/watched/deep/inner.txt", "y")
        sbx.files.remove("py/watched/new.txt")
        events = []

        def seen():
            events.extend(handle.get_new_events())
            got = {(e.name, e.type) for e in events}
            return (
                ("new.txt", FilesystemEventType.CREATE) in got
                and ("new.txt", FilesystemEventType.REMOVE) in got
                and any(n == "deep/inner.txt" for n, _ in got)
            )

        wait_for(seen, "the watch events of new.txt and deep/inner.txt", tries=100)
    finally:
        handle.stop()


def test_pause_and_connect_keep_memory_or_only_the_disk(sandboxes):
    s = Sandbox.create(timeout=300)
    sandboxes.append(s)
    s.files.write("kept.txt", "on disk")
    sleeper = s.commands.run("sleep 3600", background=True)
    sleeper.disconnect()
    assert s.pause() is True
    assert s.get_info().state == "paused"
    assert not s.is_running()
    # Pausing a paused sandbox answers 204 (idempotent; docs/differences.md), so the SDK says True, not False.
    assert Sandbox.pause(s.sandbox_id) is True
    resumed = Sandbox.connect(s.sandbox_id, timeout=300)
    assert resumed.is_running()
    assert sleeper.pid in [p.pid for p in resumed.commands.list()]
    assert resumed.files.read("kept.txt") == "on disk"

    # Filesystem only: the disk comes back, the processes do not.
    assert resumed.pause(mode="filesystem") is True
    status, detail = api("GET", f"/sandboxes/{s.sandbox_id}")
    assert status == 200 and detail["pauseKind"] == "filesystem"
    s.connect()
    assert s.files.read("kept.txt") == "on disk"
    assert sleeper.pid not in [p.pid for p in s.commands.list()]
    # A memory pause booted from its disk on request.
    s.commands.run("sleep 3600", background=True).disconnect()
    assert len(sleepers(s)) == 1
    s.pause()
    rebooted = Sandbox.connect(s.sandbox_id, on_resume="reboot")
    assert sleepers(rebooted) == []
    assert rebooted.files.read("kept.txt") == "on disk"


def test_snapshots_make_new_sandboxes(sandboxes):
    s = Sandbox.create(timeout=300)
    sandboxes.append(s)
    s.files.write("snap.txt", "in the snapshot")
    sleeper = s.commands.run("sleep 3600", background=True)
    sleeper.disconnect()
    snap = s.create_snapshot()
    assert snap.snapshot_id
    assert s.is_running()  # the source goes on
    listed = [x.snapshot_id for x in Sandbox.list_snapshots(sandbox_id=s.sandbox_id).next_items()]
    assert snap.snapshot_id in listed
    child = Sandbox.create(snap.snapshot_id, timeout=120)
    sandboxes.append(child)
    assert child.files.read("snap.txt") == "in the snapshot"
    assert sleepers(child) == [sleeper.pid]  # a full snapshot holds the processes too
    child.files.write("snap.txt", "changed in the child")
    assert s.files.read("snap.txt") == "in the snapshot"
    child.kill()
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False


def test_fork_copies_memory_and_disk(sandboxes):
    s = Sandbox.create(timeout=300)
    sandboxes.append(s)
    s.files.write("fork.txt", "parent")
    sleeper = s.commands.run("sleep 3600", background=True)
    sleeper.disconnect()
    forks = s.fork(count=2, timeout=120)
    assert len(forks) == 2
    for f in forks:
        assert isinstance(f, Sandbox), f
        sandboxes.append(f)
    a, b = forks
    assert a.sandbox_id != b.sandbox_id != s.sandbox_id
    for f in forks:
        assert f.files.read("fork.txt") == "parent"
        assert sleeper.pid in [p.pid for p in f.commands.list()]
    a.files.write("fork.txt", "a")
    assert b.files.read("fork.txt") == "parent"
    assert s.files.read("fork.txt") == "parent"
    assert s.is_running()


def test_metrics_of_a_running_sandbox(sbx):
    sbx.commands.run("head -c 32000000 /dev/urandom > py-metrics.bin")
    metrics = wait_for(lambda: sbx.get_metrics(), "a metrics sample", tries=100)
    m = metrics[-1]
    assert m.cpu_count >= 1
    assert 0 <= m.cpu_used_pct <= 100
    assert 0 < m.mem_used <= m.mem_total
    assert 0 < m.disk_used <= m.disk_total
    assert isinstance(m.timestamp, datetime)
    later = wait_for(
        lambda: [x for x in sbx.get_metrics(start=m.timestamp) if x.timestamp > m.timestamp],
        "a later sample",
        tries=100,
    )
    assert all(x.timestamp >= m.timestamp for x in later)
    assert sbx.get_metrics(end=datetime(2000, 1, 1, tzinfo=timezone.utc)) == []


def test_timeout_kill_and_what_a_dead_sandbox_answers(sandboxes):
    s = Sandbox.create(timeout=60)
    sandboxes.append(s)
    before = s.get_info().end_at
    s.set_timeout(240)
    assert (s.get_info().end_at - before).total_seconds() > 100
    assert s.kill() is True
    assert Sandbox.kill(s.sandbox_id) is False
    with pytest.raises(NotFoundException):
        Sandbox.connect(s.sandbox_id)
    with pytest.raises(NotFoundException):
        Sandbox.get_info(s.sandbox_id)
    # A sandbox that times out is gone by itself (v2's default action is kill).
    short = Sandbox.create(timeout=1)
    sandboxes.append(short)
    wait_for(lambda: api("GET", f"/sandboxes/{short.sandbox_id}")[0] == 404, "the 1 s sandbox to be killed")


def test_a_filesystem_only_snapshot_is_refused_by_name(sandboxes):
    # aenv's snapshots always hold memory and disk; create_snapshot(mode="filesystem") sends `memory: false`,
    # which is refused rather than answered with a snapshot that would restore the processes.
    s = Sandbox.create(timeout=120)
    sandboxes.append(s)
    with pytest.raises(Exception) as refused:
        s.create_snapshot(mode="filesystem")
    assert "400" in str(refused.value) and "memory is not supported" in str(refused.value), refused.value
    assert Sandbox.list_snapshots(sandbox_id=s.sandbox_id).next_items() == []
    assert s.is_running()
