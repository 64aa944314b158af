"""Reading parameters' ``.grad`` for the editor never races autograd (it crashed torch).

The agent answers requests on its own thread while the program trains. Reading ``.grad``
there while a backward accumulates into it segfaults torch 2.13 on CPU within seconds; the
engine reads them at a safe point instead. Run in a subprocess: a segfault must fail the
test, not end the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import threading, time
    import torch
    from torch import nn
    from hookscope.engine.core import Engine

    torch.set_num_threads(1)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(20)])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    engine = Engine(lambda event: None, shapes=False)
    engine.requests_off_thread = True  # as the agent makes it
    engine.add_model("m", model)
    stop, answers, errors = False, [0], []

    def panel():  # the editor asking for the gradient-flow numbers, as fast as it can
        while not stop:
            reply = engine.handle({"type": "getParamGrads", "id": 1, "model": "m"})
            if "error" in reply:
                errors.append(reply["error"])
            else:
                answers[0] += 1

    thread = threading.Thread(target=panel)
    thread.start()
    started = time.monotonic()
    while time.monotonic() - started < 4.0:
        optimizer.zero_grad()
        model(torch.randn(32, 64)).sum().backward()
        optimizer.step()
    stop = True
    thread.join()
    engine.shutdown()
    print("answers", answers[0], "errors", len(errors))
""")


def test_gradient_reads_from_the_agents_thread_never_crash_training():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    answers = int(result.stdout.split()[1])
    assert answers > 10, result.stdout
