"""The language server's analysis and rules stay linear in the size of the file.

A file with one HS001 finding (a discarded hook handle, with its quick fix) every 12 lines: four
times the lines must cost about four times the work, not sixteen. Work is counted (the AST nodes
the rules take from the index), so the test does not depend on the machine's load; the time ratio
is checked too, with room for noise.
"""

from __future__ import annotations

import gc
import time

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from hookscope.lsp.analysis import analyze
from hookscope.lsp.diagnostics import find_problems
from hookscope.lsp.gc_pause import collection_paused

from .helpers import open_document, wait_until

BLOCK = """
class Block{i}(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


block_{i} = Block{i}()
block_{i}.fc.register_forward_hook(hook)
"""


def generated(blocks: int) -> str:
    header = "import torch.nn as nn\n\n\ndef hook(module, inputs, output):\n    return None\n"
    return header + "".join(BLOCK.format(i=i) for i in range(blocks))


def rule_work(text: str) -> tuple[int, float, int]:
    """(AST nodes the rules took from the index, seconds for analysis + rules, HS001 findings)."""
    gc.collect()
    with collection_paused():  # as the server analyses: full collections would grow with the heap
        return _rule_work(text)


def _rule_work(text: str) -> tuple[int, float, int]:
    started = time.perf_counter()
    analysis = analyze(text)
    taken = 0
    of = analysis.index.of

    def counting_of(*types):
        nonlocal taken
        nodes = of(*types)
        taken += len(nodes)
        return nodes

    analysis.index.of = counting_of  # type: ignore[method-assign]
    findings = find_problems(analysis)
    return taken, time.perf_counter() - started, sum(f.code == "HS001" for f in findings)


def test_hs001_findings_cost_linear_work():
    small, large = 250, 1000  # about 3,000 and 12,000 lines
    small_work, _, small_found = rule_work(generated(small))
    large_work, _, large_found = rule_work(generated(large))
    assert (small_found, large_found) == (small, large)
    assert large_work / small_work < 6, f"4x the file took {large_work / small_work:.1f}x the work: quadratic"


def test_analysis_and_rules_time_grows_linearly():
    small_text, large_text = generated(800), generated(3200)  # about 10,000 and 40,000 lines
    small = min(rule_work(small_text)[1] for _ in range(2))
    large = min(rule_work(large_text)[1] for _ in range(2))
    # Linear is 4x, quadratic 16x: 10 leaves room for a loaded machine and still catches n².
    assert large / small < 10, f"10k lines: {small:.2f} s, 40k lines: {large:.2f} s ({large / small:.1f}x)"


@pytest.mark.asyncio
async def test_a_large_file_does_not_hold_up_other_documents(client: LanguageClient, tmp_path):
    """A 50,000-line file takes over a second to analyse; a small file opened right after it gets
    its lenses before the large one's first diagnostics are published (analysed on a worker)."""
    large_path = tmp_path / "large.py"
    large_text = generated(4200)
    assert large_text.count("\n") > 50_000
    large = open_document(client, large_path, large_text)
    small_path = tmp_path / "small.py"
    small_path.write_text(
        "import torch.nn as nn\n" + BLOCK.format(i=0).replace("block_0.fc.register_forward_hook(hook)", "")
    )
    small = open_document(client, small_path)
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=small))
    )
    assert lenses, f"{small_path.name} has lenses"
    assert large not in client.diagnostics, "the small file waited for the large one"
    await wait_until(lambda: large in client.diagnostics, "the large file's diagnostics", deadline_s=120)
    assert len(client.diagnostics[large]) == 4200  # one HS001 per block: the work was done, not skipped
