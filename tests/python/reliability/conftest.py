"""Fixtures of the reliability suite: an editor stand-in and a real agent+engine.

The agent here is the real one (real ``Engine``, real socket); only model
discovery is replaced by handing the model to the agent's discovery callback,
so a test controls exactly which models the editor sees. Plain helpers live in
``reliability_support``.
"""

from __future__ import annotations

from typing import Any

import pytest
from torch import nn

from hookscope.engine import discovery
from hookscope.link.agent import Agent
from hookscope.terminal.editor_link import EditorLink


@pytest.fixture
def link():
    server = EditorLink()
    yield server
    server.close()


@pytest.fixture
def live_agent():
    """``live_agent(link, model)``: a real agent with a real Engine, connected, the model announced."""
    agents: list[Agent] = []

    def make(link: EditorLink, *models: nn.Module, **kwargs: Any) -> Agent:
        a = Agent(link.host, link.port, link.token, link.session, discover=False, **kwargs)
        for i, model in enumerate(models):
            model_id = f"m{i + 1}"
            a._on_model_added(model_id, model, discovery.describe(model_id, model, type(model).__name__))
        a.start()
        agents.append(a)
        return a

    yield make
    for a in agents:
        a.stop()
