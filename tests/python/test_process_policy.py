"""Which processes get an agent and what it says about its process (``link/process_policy.py``)."""

from __future__ import annotations

import os

from hookscope.link import process_policy


def test_multiprocessing_workers_and_distributed_launchers_get_no_agent(monkeypatch):
    monkeypatch.setattr(
        process_policy.sys, "orig_argv", ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"]
    )
    assert process_policy.skip_reason() == "multiprocessing worker"
    monkeypatch.setattr(process_policy.sys, "orig_argv", ["python", "-m", "torch.distributed.run", "x.py"])
    assert process_policy.skip_reason() is not None
    monkeypatch.setattr(process_policy.sys, "orig_argv", ["python", "train.py"])
    assert process_policy.skip_reason() is None


def test_user_argv_strips_debugpy_options(monkeypatch):
    monkeypatch.setattr(process_policy.sys, "argv", ["/x/debugpy", "--connect", "1"])
    monkeypatch.setattr(
        process_policy.sys,
        "orig_argv",
        [
            "python",
            "/x/debugpy",
            "--connect",
            "127.0.0.1:5",
            "--configure-qt",
            "none",
            "--adapter-access-token",
            "abc",
            "/w/train.py",
            "--lr",
            "3",
        ],
    )
    assert process_policy.user_argv() == ["/w/train.py", "--lr", "3"]


def test_the_process_description_names_the_session_only_when_there_is_one():
    described = process_policy.describe_process("s1")
    assert described["pid"] == os.getpid() and described["session"] == "s1"
    assert isinstance(described["argv"], list) and described["python"].count(".") == 2
    assert "session" not in process_policy.describe_process(None)
