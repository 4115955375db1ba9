"""The Python SDK's AsyncSandbox against aenv: concurrent creates, streamed and background commands with stdin,
files, watch with a callback, pause/connect, snapshot and fork, metrics, kill. Each test drives its own event
loop (asyncio.run), so no pytest plugin is needed."""

import asyncio

import pytest
from e2b import AsyncSandbox, CommandExitException, FilesystemEventType, NotFoundException


async def _eventually(check, what, tries=200, every=0.1):
    for _ in range(tries):
        value = await check()
        if value:
            return value
        await asyncio.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def test_async_create_commands_files_and_watch():
    async def main():
        a, b = await asyncio.gather(AsyncSandbox.create(timeout=300), AsyncSandbox.create(timeout=300))
        try:
            assert a.sandbox_id != b.sandbox_id
            assert await a.is_running() and await b.is_running()
            listed = {s.sandbox_id for s in await AsyncSandbox.list().next_items()}
            assert {a.sandbox_id, b.sandbox_id} <= listed

            chunks = []

            async def on_stdout(chunk):
                chunks.append(chunk)

            r = await a.commands.run("for i in 1 2 3; do echo n$i; sleep 0.2; done", on_stdout=on_stdout)
            assert "".join(chunks) == r.stdout == "n1\nn2\nn3\n"
            assert len(chunks) >= 3
            with pytest.raises(CommandExitException) as failed:
                await a.commands.run("exit 7")
            assert failed.value.exit_code == 7

            h = await a.commands.run("read line; echo got:$line", background=True, stdin=True)
            await a.commands.send_stdin(h.pid, "typed\n")
            assert (await h.wait()).stdout == "got:typed\n"

            # Both sandboxes at once: their files are their own.
            await asyncio.gather(a.files.write("who.txt", "a"), b.files.write("who.txt", "b"))
            assert await asyncio.gather(a.files.read("who.txt"), b.files.read("who.txt")) == ["a", "b"]
            data = bytes(range(256)) * 1024
            await a.files.write("bin.dat", data)
            assert bytes(await a.files.read("bin.dat", format="bytes")) == data

            events = []
            await a.files.make_dir("watched")
            watch = await a.files.watch_dir("watched", on_event=events.append)
            try:
                await a.files.write("watched/f.txt", "x")

                async def seen():
                    return any(e.name == "f.txt" and e.type == FilesystemEventType.CREATE for e in events)

                await _eventually(seen, "the watch callback for watched/f.txt")
            finally:
                await watch.stop()

            metrics = await _eventually(a.get_metrics, "a metrics sample of the async sandbox")
            assert metrics[-1].cpu_count >= 1 and metrics[-1].mem_total > 0
        finally:
            await asyncio.gather(a.kill(), b.kill())
        assert await AsyncSandbox.kill(a.sandbox_id) is False
        with pytest.raises(NotFoundException):
            await AsyncSandbox.connect(a.sandbox_id)

    asyncio.run(main())


def test_async_pause_connect_snapshot_and_fork():
    async def main():
        s = await AsyncSandbox.create(timeout=300)
        made = [s]
        try:
            await s.files.write("state.txt", "kept")
            sleeper = await s.commands.run("sleep 3600", background=True)
            await sleeper.disconnect()
            assert await s.pause() is True
            assert (await s.get_info()).state == "paused"
            back = await AsyncSandbox.connect(s.sandbox_id)
            assert sleeper.pid in [p.pid for p in await back.commands.list()]
            assert await back.files.read("state.txt") == "kept"

            snap = await back.create_snapshot()
            child = await AsyncSandbox.create(snap.snapshot_id, timeout=120)
            made.append(child)
            assert await child.files.read("state.txt") == "kept"

            (fork,) = await back.fork(count=1, timeout=120)
            assert isinstance(fork, AsyncSandbox), fork
            made.append(fork)
            assert await fork.files.read("state.txt") == "kept"
            assert sleeper.pid in [p.pid for p in await fork.commands.list()]
            await child.kill()
            assert await AsyncSandbox.delete_snapshot(snap.snapshot_id) is True
        finally:
            await asyncio.gather(*(m.kill() for m in made), return_exceptions=True)

    asyncio.run(main())
