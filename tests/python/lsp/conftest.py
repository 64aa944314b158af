"""Fixtures for driving ``python -m hookscope.lsp`` over stdio with pytest-lsp."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

SERVER_COMMAND = [sys.executable, "-m", "hookscope.lsp"]

CLIENT_CAPABILITIES = types.ClientCapabilities(
    workspace=types.WorkspaceClientCapabilities(
        code_lens=types.CodeLensWorkspaceClientCapabilities(refresh_support=True),
        configuration=True,
    ),
    text_document=types.TextDocumentClientCapabilities(
        code_lens=types.CodeLensClientCapabilities(),
        hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
        code_action=types.CodeActionClientCapabilities(
            code_action_literal_support=types.ClientCodeActionLiteralOptions(
                code_action_kind=types.ClientCodeActionKindOptions(value_set=[types.CodeActionKind.QuickFix])
            )
        ),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(
            code_description_support=True,
            tag_support=types.ClientDiagnosticsTagOptions(value_set=[types.DiagnosticTag.Deprecated]),
        ),
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
    ),
)


def initialize_params(options: dict | None = None) -> types.InitializeParams:
    return types.InitializeParams(
        capabilities=CLIENT_CAPABILITIES,
        root_uri=Path(__file__).parent.as_uri(),
        initialization_options=options if options is not None else {"diagnosticsDelayMs": 20},
    )


def track_lens_refreshes(client: LanguageClient) -> None:
    """Count ``workspace/codeLens/refresh`` requests on ``client.lens_refreshes``."""
    client.lens_refreshes = 0  # type: ignore[attr-defined]

    @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def on_refresh(_params: None) -> None:
        client.lens_refreshes += 1  # type: ignore[attr-defined]


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER_COMMAND))
async def client(lsp_client: LanguageClient):
    track_lens_refreshes(lsp_client)
    await lsp_client.initialize_session(initialize_params())
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=SERVER_COMMAND),
)
async def configured_client(lsp_client: LanguageClient):
    """A server started with diagnostic settings in initializationOptions."""
    await lsp_client.initialize_session(
        initialize_params({"hookscope": {"diagnostics": {"HS001": "error", "HS004": "off"}}, "diagnosticsDelayMs": 20})
    )
    yield
    await lsp_client.shutdown_session()
