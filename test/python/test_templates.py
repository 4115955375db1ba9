"""Templates built with the Python SDK's Template builder from images named the Docker Hub way (ubuntu:22.04,
e2bdev/base): the node's docker.io mirror is the local test registry, which holds aenv/base under those names
(test/services/start.sh)."""

import os
import tempfile
import uuid

import pytest
from e2b import Sandbox, Template, wait_for_file

from conftest import api

RUN = "py" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module", autouse=True)
def delete_built_templates():
    yield
    status, listed = api("GET", "/templates")
    for t in listed if status == 200 else []:
        if any(n.startswith(RUN) for n in t.get("names", [])):
            api("DELETE", f"/templates/{t['templateID']}")


def test_build_from_ubuntu_and_start_sandboxes_from_it(sandboxes):
    ctx = tempfile.mkdtemp(prefix="aenv-py-tmpl-")
    with open(os.path.join(ctx, "hello.txt"), "w") as f:
        f.write(f"hello {RUN}\n")
    name = f"{RUN}-ubuntu"
    template = (
        Template(file_context_path=ctx)
        .from_ubuntu_image("22.04")
        .run_cmd(f"mkdir -p /srv && echo {RUN} > /srv/marker", user="root")
        .set_envs({"GREETING": "hello"})
        .copy("hello.txt", "/app/")
        .set_workdir("/app")
        .set_start_cmd("echo started > /tmp/started && exec sleep 100000", wait_for_file("/tmp/started"))
    )
    logs = []
    built = Template.build(template, name, tags=["v1"], cpu_count=1, memory_mb=512, on_build_logs=logs.append)
    assert built.template_id and built.build_id
    messages = [e.message for e in logs]
    assert any(f"echo {RUN} > /srv/marker" in m for m in messages), messages
    assert Template.exists(name) is True
    assert Template.exists(f"{RUN}-never-built") is False
    assert "v1" in [t.tag for t in Template.get_tags(name)]

    s = Sandbox.create(name, timeout=120)
    sandboxes.append(s)
    assert s.get_info().template_id == built.template_id
    assert s.commands.run("cat /srv/marker").stdout == f"{RUN}\n"
    assert s.commands.run("echo $GREETING; pwd; cat hello.txt").stdout == f"hello\n/app\nhello {RUN}\n"
    assert s.commands.run("cat /tmp/started").stdout == "started\n"
    assert s.commands.run("pgrep -x sleep | wc -l").stdout.strip() == "1"
    tagged = Sandbox.create(f"{name}:v1", timeout=60)
    sandboxes.append(tagged)
    assert tagged.commands.run("cat /srv/marker").stdout == f"{RUN}\n"


def test_build_from_the_e2b_base_image(sandboxes):
    name = f"{RUN}-base"
    Template.build(Template().from_base_image().run_cmd(f"echo {RUN} > /tmp/from-base"), name)
    s = Sandbox.create(name, timeout=60)
    sandboxes.append(s)
    assert s.commands.run("cat /tmp/from-base; id -un").stdout == f"{RUN}\nuser\n"
