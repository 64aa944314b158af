"""Hookscope's language server: layer code lenses, hook-hygiene diagnostics, hovers.

Started by the extension as ``python -m hookscope.lsp`` (stdio). Reads
source with ``ast`` only: importing this package never imports torch.
"""
